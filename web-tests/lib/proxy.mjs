// A TCP proxy on loopback between a machine and a margin server, for tests
// that break the link the way a network does: `cut()` ends every connection
// through it (no close frame reaches either side), `hold('down')` /
// `hold('up')` silently drops what one side sends on the open connections
// (a result lost on its way, a call that never arrived), and `refuse(true)`
// turns new connections away, so a machine stays away until told otherwise.
// `faultAt(fault)` breaks the link at one exact message (SPEC L10): it reads
// the WebSocket frames each way and, at the first text message the fault
// matches, cuts every connection or partitions them (both ways silent, the
// sockets left open) — before that message is forwarded or right after.
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
    /** The armed fault, if any; see `faultAt`. */
    this.fault = null;
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

  /**
   * Arms one fault: at the first text message going `direction` (`up` from
   * the machine, `down` from the server) for which `matches(message)` holds
   * (the message parsed as JSON), `mode` `cut` ends every connection and
   * `partition` silences them both ways; `when` `before` does so instead of
   * forwarding that message, `after` once it is forwarded. Resolves with the
   * message once the fault has happened.
   */
  faultAt({ direction, matches, mode, when }) {
    if (!['up', 'down'].includes(direction) || !['cut', 'partition'].includes(mode) || !['before', 'after'].includes(when)) {
      throw new Error(`a fault is up/down, cut/partition, before/after: ${direction} ${mode} ${when}`);
    }
    return new Promise((resolve) => {
      this.fault = { direction, matches, mode, when, resolve };
    });
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
    const forward = (direction, to) => {
      const frames = new FrameReader();
      return (chunk) => {
        for (const piece of frames.push(chunk)) {
          if (!pair[direction]) {
            this.dropped[direction] += piece.bytes.length;
            continue;
          }
          const fault = this.#trips(direction, piece.text);
          if (fault?.when === 'before') {
            this.#strike(fault);
            this.dropped[direction] += piece.bytes.length;
          } else if (fault) {
            // Nothing else passes; the message itself is delivered, and
            // only then does the link break.
            this.#silence();
            to.write(piece.bytes, () => this.#strike(fault));
          } else {
            to.write(piece.bytes);
          }
        }
      };
    };
    client.on('data', forward('up', upstream));
    upstream.on('data', forward('down', client));
    for (const socket of [client, upstream]) {
      socket.on('error', end);
      socket.on('close', end);
    }
  }

  /** The armed fault, disarmed, if the message `text` going `direction` trips it. */
  #trips(direction, text) {
    const fault = this.fault;
    if (!fault || fault.direction !== direction || text === null) return null;
    let message;
    try {
      message = JSON.parse(text);
    } catch {
      return null;
    }
    if (!fault.matches(message)) return null;
    this.fault = null;
    fault.message = message;
    return fault;
  }

  #strike(fault) {
    if (fault.mode === 'cut') this.cut();
    else this.#silence();
    fault.resolve(fault.message);
  }

  /** Drops, from now on, what either side sends on the open connections. */
  #silence() {
    for (const pair of this.pairs) Object.assign(pair, { up: false, down: false });
  }
}

/** Largest frame a test link carries whole; beyond it frames pass unread. */
const MAX_READ_FRAME = 64 << 20;

/**
 * Splits one direction of a WebSocket connection into pieces to forward:
 * the HTTP upgrade as one piece, then each frame whole, with its text when
 * it is a complete text message (unmasked) and `null` otherwise.
 */
class FrameReader {
  #buffer = Buffer.alloc(0);
  #upgraded = false;

  push(chunk) {
    this.#buffer = Buffer.concat([this.#buffer, chunk]);
    const pieces = [];
    if (!this.#upgraded) {
      const end = this.#buffer.indexOf('\r\n\r\n');
      if (end < 0) return pieces;
      pieces.push({ bytes: this.#buffer.subarray(0, end + 4), text: null });
      this.#buffer = this.#buffer.subarray(end + 4);
      this.#upgraded = true;
    }
    for (;;) {
      const frame = this.#frame();
      if (!frame) return pieces;
      pieces.push(frame);
    }
  }

  #frame() {
    const b = this.#buffer;
    if (b.length < 2) return null;
    const [first, second] = [b[0], b[1]];
    let length = second & 0x7f;
    let at = 2;
    if (length === 126) {
      if (b.length < 4) return null;
      length = b.readUInt16BE(2);
      at = 4;
    } else if (length === 127) {
      if (b.length < 10) return null;
      length = Number(b.readBigUInt64BE(2));
      at = 10;
    }
    const masked = (second & 0x80) !== 0;
    const key = masked ? at : -1;
    if (masked) at += 4;
    if (length > MAX_READ_FRAME) throw new Error(`a ${length}-byte frame is more than a test link carries`);
    if (b.length < at + length) return null;
    const bytes = b.subarray(0, at + length);
    this.#buffer = b.subarray(at + length);
    const wholeText = (first & 0x80) !== 0 && (first & 0x0f) === 1;
    if (!wholeText) return { bytes, text: null };
    const payload = Buffer.from(b.subarray(at, at + length));
    if (masked) for (let i = 0; i < payload.length; i++) payload[i] ^= b[key + (i % 4)];
    return { bytes, text: payload.toString('utf8') };
  }
}
