// Raw TCP on loopback for the cluster nemesis (SPEC C5): a `Tunnel` in
// front of one address that can black-hole both ways, as a network that
// drops every packet, and a `Balancer` that spreads connections over the
// nodes `/readyz` calls ready, as a load balancer does. Neither reads what
// it carries, so they sit in front of PostgreSQL as well as of a node.

import net from 'node:net';

/** Most connections either holds at once. */
const MAX_CONNECTIONS = 512;

/** How often, and how patiently, the balancer asks each node `/readyz`. */
const CHECK_EVERY_MS = 200;
const CHECK_TIMEOUT_MS = 300;

async function listen(server) {
  await new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', resolve);
  });
  server.maxConnections = MAX_CONNECTIONS;
  return server.address().port;
}

function pipe(pair, from, to) {
  from.on('data', (chunk) => {
    if (!pair.dark) to.write(chunk);
  });
}

/** Forwards connections to 127.0.0.1:`targetPort` until darkened. */
export class Tunnel {
  static async start(targetPort) {
    const tunnel = new Tunnel(targetPort);
    tunnel.port = await listen(tunnel.server);
    return tunnel;
  }

  constructor(targetPort) {
    this.targetPort = targetPort;
    this.dark = false;
    this.pairs = new Set();
    this.server = net.createServer((client) => this.#accept(client));
  }

  /** From now on nothing passes either way, on open or new connections. */
  darken() {
    this.dark = true;
    for (const pair of this.pairs) pair.dark = true;
  }

  /**
   * Lets new connections through again. The ones that were dark are ended:
   * bytes they dropped are gone, so their streams cannot go on (TCP would
   * have given up on them too).
   */
  heal() {
    this.dark = false;
    for (const pair of [...this.pairs]) if (pair.dark) this.#end(pair);
  }

  async close() {
    for (const pair of [...this.pairs]) this.#end(pair);
    await new Promise((resolve) => this.server.close(resolve));
  }

  #accept(client) {
    const pair = { client, upstream: null, dark: this.dark };
    this.pairs.add(pair);
    client.on('error', () => this.#end(pair));
    client.on('close', () => this.#end(pair));
    if (pair.dark) {
      // Taken and never answered, as behind a dropped route.
      client.on('data', () => {});
      return;
    }
    pair.upstream = net.connect(this.targetPort, '127.0.0.1');
    pair.upstream.setNoDelay(true);
    client.setNoDelay(true);
    pair.upstream.on('error', () => this.#end(pair));
    pair.upstream.on('close', () => this.#end(pair));
    pipe(pair, client, pair.upstream);
    pipe(pair, pair.upstream, client);
  }

  #end(pair) {
    this.pairs.delete(pair);
    pair.client.destroy();
    pair.upstream?.destroy();
  }
}

/**
 * Spreads connections over `ports`, round robin among the nodes whose
 * `/readyz` answered 200 last (all of them when none did). Remembers which
 * node each connection went to, by the `client` query parameter of its
 * request line, so a test knows where each editor is attached.
 */
export class Balancer {
  static async start(ports) {
    const balancer = new Balancer(ports);
    balancer.port = await listen(balancer.server);
    balancer.#check();
    return balancer;
  }

  constructor(ports) {
    this.ports = ports;
    this.ready = ports.map(() => true);
    this.next = 0;
    this.pairs = new Set();
    /** client name -> index of the node its latest connection went to */
    this.attached = new Map();
    this.server = net.createServer((client) => this.#accept(client));
    this.stopped = false;
  }

  get url() {
    return `http://127.0.0.1:${this.port}`;
  }

  get wsBase() {
    return `ws://127.0.0.1:${this.port}`;
  }

  async close() {
    this.stopped = true;
    clearTimeout(this.timer);
    for (const pair of [...this.pairs]) {
      pair.client.destroy();
      pair.upstream?.destroy();
    }
    await new Promise((resolve) => this.server.close(resolve));
  }

  async #check() {
    await Promise.all(
      this.ports.map(async (port, at) => {
        try {
          const res = await fetch(`http://127.0.0.1:${port}/readyz`, { signal: AbortSignal.timeout(CHECK_TIMEOUT_MS) });
          await res.arrayBuffer();
          this.ready[at] = res.status === 200;
        } catch {
          this.ready[at] = false;
        }
      }),
    );
    if (!this.stopped) this.timer = setTimeout(() => this.#check(), CHECK_EVERY_MS);
  }

  #pick() {
    const ready = this.ports.map((_, at) => at).filter((at) => this.ready[at]);
    const among = ready.length > 0 ? ready : this.ports.map((_, at) => at);
    const at = among[this.next % among.length];
    this.next += 1;
    return at;
  }

  #accept(client) {
    const at = this.#pick();
    const pair = { client, upstream: net.connect(this.ports[at], '127.0.0.1'), dark: false };
    this.pairs.add(pair);
    const end = () => {
      this.pairs.delete(pair);
      client.destroy();
      pair.upstream.destroy();
    };
    for (const socket of [client, pair.upstream]) {
      socket.setNoDelay(true);
      socket.on('error', end);
      socket.on('close', end);
    }
    client.once('data', (head) => {
      const line = head.toString('latin1', 0, Math.min(head.length, 2048)).split('\r\n')[0];
      const name = /[?&]client=([^& ]+)/.exec(line)?.[1];
      if (name) this.attached.set(decodeURIComponent(name), at);
    });
    pipe(pair, client, pair.upstream);
    pipe(pair, pair.upstream, client);
  }
}
