// A TCP proxy on loopback between a machine and a margin server, for tests
// that break the link the way a network does: `cut()` ends every connection
// through it (no close frame reaches either side), `hold('down')` /
// `hold('up')` silently drops what one side sends on the open connections
// (a result lost on its way, a call that never arrived), and `refuse(true)`
// turns new connections away, so a machine stays away until told otherwise.
// Loopback only, at most MAX_CONNECTIONS at once.

import net from 'node:net';

const MAX_CONNECTIONS = 64;

export class Proxy {
  /** Listens on 127.0.0.1 (a free port), forwarding to 127.0.0.1:`targetPort`. */
  static async start(targetPort) {
    const proxy = new Proxy(targetPort);
    await new Promise((resolve, reject) => {
      proxy.server.once('error', reject);
      proxy.server.listen(0, '127.0.0.1', resolve);
    });
    proxy.port = proxy.server.address().port;
    return proxy;
  }

  constructor(targetPort) {
    this.targetPort = targetPort;
    /** Connections accepted and forwarded, over the proxy's life. */
    this.accepted = 0;
    /** Connections turned away while refusing, over the proxy's life. */
    this.refused = 0;
    /** Bytes dropped while held, by direction: a test waits on these to
     * know that what it held back did reach the proxy. */
    this.dropped = { up: 0, down: 0 };
    this.refusing = false;
    this.pairs = new Set();
    this.server = net.createServer((client) => this.#accept(client));
    this.server.maxConnections = MAX_CONNECTIONS;
  }

  /** The address a client connects to instead of the server's. */
  get url() {
    return `http://127.0.0.1:${this.port}`;
  }

  /** Forwards new connections to `targetPort` instead (a restarted server elsewhere). */
  retarget(targetPort) {
    this.targetPort = targetPort;
  }

  /**
   * Drops, from now on, what the server sends (`down`) or what the client
   * sends (`up`) on the connections open now; new ones forward both ways.
   */
  hold(direction) {
    if (direction !== 'down' && direction !== 'up') throw new Error(`hold('down') or hold('up'), not ${direction}`);
    for (const pair of this.pairs) pair[direction] = false;
  }

  /** Ends every open connection at once, without a close frame either way. */
  cut() {
    for (const pair of this.pairs) {
      pair.client.destroy();
      pair.upstream.destroy();
    }
    this.pairs.clear();
  }

  /** While `on`, new connections are closed as soon as they arrive. */
  refuse(on) {
    this.refusing = on;
  }

  async close() {
    this.cut();
    await new Promise((resolve) => this.server.close(resolve));
  }

  #accept(client) {
    if (this.refusing) {
      this.refused++;
      client.destroy();
      return;
    }
    this.accepted++;
    const upstream = net.connect(this.targetPort, '127.0.0.1');
    const pair = { client, upstream, up: true, down: true };
    this.pairs.add(pair);
    const end = () => {
      this.pairs.delete(pair);
      client.destroy();
      upstream.destroy();
    };
    client.on('data', (chunk) => {
      if (pair.up) upstream.write(chunk);
      else this.dropped.up += chunk.length;
    });
    upstream.on('data', (chunk) => {
      if (pair.down) client.write(chunk);
      else this.dropped.down += chunk.length;
    });
    for (const socket of [client, upstream]) {
      socket.on('error', end);
      socket.on('close', end);
    }
  }
}
