// A Planner machine on the link at /machine, speaking its JSON the way any
// connector would: hello (resumable, with a manifest when given), heartbeats
// answered, messages queued for the test to take in order, renewed
// credentials and acknowledgements (`reply-received`, `run-received`, SPEC
// L10) kept aside. `drop()` ends the socket without a close frame, as
// when Wi-Fi goes.

import WebSocket from 'ws';
import { TIMEOUT } from './browser.mjs';

export class Machine {
  /**
   * Links with `credential` to `server` and waits for `welcome`, kept as
   * `machine.welcome`. `manifest` (e.g. `{ planning: true }`, SPEC U1) is
   * sent in `hello` when given.
   */
  static async link(server, credential, { manifest } = {}) {
    const machine = new Machine();
    machine.ws = new WebSocket(`${server.baseUrl.replace(/^http/, 'ws')}/machine`, {
      headers: { Authorization: `Bearer ${credential}` },
    });
    machine.queue = [];
    machine.waiters = [];
    machine.acks = [];
    machine.ws.on('message', (data) => {
      const message = JSON.parse(String(data));
      if (message.type === 'heartbeat') {
        machine.send({ type: 'heartbeat-ack', seq: message.seq });
        return;
      }
      if (message.type === 'credential') {
        // Renewed credentials (SPEC L8): kept, never queued as work.
        machine.credential = message.credential;
        return;
      }
      if (message.type === 'reply-received' || message.type === 'run-received') {
        machine.acks.push(message);
        return;
      }
      const waiter = machine.waiters.shift();
      if (waiter) waiter(message);
      else machine.queue.push(message);
    });
    await new Promise((resolve, reject) => {
      machine.ws.once('open', resolve);
      machine.ws.once('error', reject);
    });
    const hello = { type: 'hello', protocol_version: 1, features: ['resumable-sessions'] };
    if (manifest) hello.manifest = manifest;
    machine.send(hello);
    const welcome = await machine.next();
    if (welcome.type !== 'welcome') throw new Error(`expected welcome, got ${JSON.stringify(welcome)}`);
    machine.welcome = welcome;
    return machine;
  }

  send(message) {
    this.ws.send(JSON.stringify(message));
  }

  /** The next message other than a heartbeat. */
  next() {
    const queued = this.queue.shift();
    if (queued) return Promise.resolve(queued);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('no message from the server in time')), TIMEOUT);
      this.waiters.push((message) => {
        clearTimeout(timer);
        resolve(message);
      });
    });
  }

  /** The next message, which must be of `type`. */
  async expect(type) {
    const message = await this.next();
    if (message.type !== type) throw new Error(`expected ${type}, got ${JSON.stringify(message)}`);
    return message;
  }

  /** Drops the link without a close frame. */
  drop() {
    this.ws.terminate();
  }
}
