// A scripted link server for the TypeScript SDK's tests: plain `ws` on
// loopback, where each connection runs a script of exact messages, for what
// a real server cannot be made to show on demand (a link cut between a
// reply and its acknowledgement, a `retry` refusal, silence).

import { WebSocketServer } from 'ws';
import { waitFor, withTimeout } from './server.mjs';

const PATIENCE = 10000;

/**
 * A link server on loopback that runs `script(link, n)` for its `n`th
 * connection; `link.next()` is the machine's next message (heartbeat-acks
 * skipped), `link.send(m)` sends one.
 */
export async function scriptedServer(t, script) {
  const wss = new WebSocketServer({ host: '127.0.0.1', port: 0, maxPayload: 1 << 20 });
  await new Promise((resolve) => wss.once('listening', resolve));
  t.after(() => new Promise((resolve) => {
    for (const client of wss.clients) client.terminate();
    wss.close(resolve);
  }));
  let connections = 0;
  const done = [];
  wss.on('connection', (ws) => {
    const n = ++connections;
    const queue = [];
    const waiting = [];
    ws.on('message', (data) => {
      const message = JSON.parse(String(data));
      if (message.type === 'heartbeat-ack') return;
      const waiter = waiting.shift();
      if (waiter) waiter(message);
      else queue.push(message);
    });
    const link = {
      ws,
      send: (message) => ws.send(JSON.stringify(message)),
      next: () =>
        queue.length > 0
          ? Promise.resolve(queue.shift())
          : withTimeout(new Promise((resolve) => waiting.push(resolve)), PATIENCE, `message ${n} from the machine`),
    };
    const ran = Promise.resolve().then(() => script(link, n));
    // A script a test never awaits (a link it only counts) may still be
    // waiting when the test ends; its failure is not the test's. Awaited
    // through `done(n)`, it still fails the test.
    ran.catch(() => {});
    done.push(ran);
  });
  return {
    url: `http://127.0.0.1:${wss.address().port}`,
    connections: () => connections,
    /** What the script of the `n`th connection came to. */
    done: async (n) => {
      await waitFor(() => done.length >= n, PATIENCE, `connection ${n}`);
      return withTimeout(done[n - 1], PATIENCE, `the script of connection ${n}`);
    },
  };
}

/** Welcomes the machine and (unless `invoke` is false) starts turn `turn` of session `s`; returns its hello. */
export async function welcomeAndInvoke(link, { invoke = true, turn = 't' } = {}) {
  const hello = await link.next();
  link.send({ type: 'welcome', protocol_version: 1, machine: 'm', capabilities: { durable_plans: true, features: hello.features } });
  if (invoke) link.send({ type: 'invoke', session: 's', turn, document: 'd', messages: [] });
  return hello;
}

/** Reads the machine's `resume`, answers `resumed` carrying `sessions` on, and returns the resume. */
export async function resumeWith(link, sessions = [], ended = []) {
  const resume = await link.next();
  link.send({
    type: 'resumed',
    sessions: sessions.map((session) => ({ session, document: 'd', withdrawn: [] })),
    ended,
  });
  return resume;
}
