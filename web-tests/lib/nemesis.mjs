// The cluster under a nemesis (SPEC C3, C5): three `margin serve --cluster`
// nodes on one PostgreSQL schema, each reaching the database through a
// `Tunnel` and reached by the other nodes through another (its advertised
// address), with y-websocket editors and the TypeScript SDK's steady
// Planner coming in through a `Balancer`. Each trial makes two documents,
// starts editors writing on them and asks the Planner on each, then breaks
// one node — kill -9 and restart, SIGSTOP past the lease, cut off from the
// database, cut off from the other nodes, or a graceful restart — and heals
// it. Checked on every trial, from outside:
// - stranded: while the fault lasts, an editor whose socket stays open on a
//   node that serves misses an edit written after the lease TTL and one
//   renewal interval for more than a second (editors on a paused node
//   itself wait for it: nothing can answer for a stopped process);
// - converged: every editor of each document holds the same text, with an
//   edit written as the fault healed, within the TTL and a second of the
//   heal;
// - lost: with every editor gone (so no client can send anything again), a
//   fresh reader lacks an edit another editor had received — acknowledged,
//   since a server sends nothing on before it is committed — or an `@planner`
//   message, a reply, a card the Planner was told was opened, or an answer
//   the server acknowledged (a turn whose card call was in flight on a node
//   that went down is told `interrupted`, and replies so: its card is not
//   owed, and is counted apart);
// - twice: a block, Chat line, reply or card there twice, or a turn the
//   Planner was handed twice.
// At the end every node is killed and restarted and every trial's documents
// are read again. Loopback only; every wait is bounded.

import { execFile, spawn } from 'node:child_process';
import { appendFileSync, existsSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { sdkDir } from './sdk.mjs';
import { MarginServer, freePort, sleep, waitFor } from './server.mjs';
import { Balancer, Tunnel } from './tunnel.mjs';
import { appendBlock, connectClient } from './yclient.mjs';

export const LEASE_TTL_MS = 1500;
export const RENEW_MS = 500;
/** How long a fault lasts: past the lease, with a second to see it by. */
const HOLD_MS = LEASE_TTL_MS + RENEW_MS + 2000;
/** How long an editor may miss an edit while it is connected and served. */
const STRANDED_MS = 1000;
/** How soon after a heal every editor must agree. */
const CONVERGE_MS = LEASE_TTL_MS + 1000;
const EDITORS = 3;
const DOCUMENTS = 2;
const WRITE_EVERY_MS = 150;
const PATIENCE_MS = 30000;
/** How many ports a node tries before its start is a failure. */
const BIND_ATTEMPTS = 3;

export const FAULTS = ['kill', 'pause', 'database', 'peers', 'restart'];

function psql(url, sql) {
  return new Promise((resolve, reject) => {
    execFile('psql', [url, '-q', '-v', 'ON_ERROR_STOP=1', '-c', sql], { timeout: 10000 }, (err, _out, stderr) =>
      err ? reject(new Error(`psql failed: ${err.message}\n${stderr}`)) : resolve(),
    );
  });
}

/** host:port of a postgres:// URL. */
function authority(url) {
  const rest = url.split('://')[1] ?? '';
  return rest.split('/')[0].split('@').pop();
}

/** A small seeded generator, so a run can be repeated (`seed`). */
function random(seed) {
  let state = seed >>> 0 || 1;
  return () => {
    state ^= state << 13;
    state ^= state >>> 17;
    state ^= state << 5;
    return (state >>> 0) / 4294967296;
  };
}

export class Nemesis {
  /** Starts the cluster on a fresh schema of `base` (TEST_DATABASE_URL). */
  static async start({ base, seed = Date.now(), log = () => {} }) {
    const nemesis = new Nemesis(base, seed, log);
    try {
      await nemesis.#start();
    } catch (e) {
      // What started is stopped, or its sockets and children would keep
      // the test's process alive; the nodes' output says why it failed.
      const logs = nemesis.logs;
      await nemesis.stop();
      e.message += `\n${logs.slice(-40000)}`;
      throw e;
    }
    return nemesis;
  }

  constructor(base, seed, log) {
    this.base = base;
    this.seed = seed;
    this.rand = random(seed);
    this.log = log;
    this.nodes = [];
    this.trials = [];
    this.tally = {
      faults: Object.fromEntries(FAULTS.map((f) => [f, 0])),
      trials: 0,
      edits: 0,
      acked: 0,
      lost: 0,
      twice: 0,
      stranded: 0,
      diverged: 0,
      turns: 0,
      replies: 0,
      interrupted: 0,
      answers: 0,
      cards: 0,
      worstConvergeMs: 0,
      worstStrandedMs: 0,
      problems: [],
    };
  }

  async #start() {
    this.schema = `nemesis_${Math.random().toString(36).slice(2, 10)}`;
    await psql(this.base, `CREATE SCHEMA ${this.schema}`);
    const sep = this.base.includes('?') ? '&' : '?';
    const url = `${this.base}${sep}options=-c%20search_path%3D${this.schema}`;
    const [, pgPort] = authority(url).split(':');
    this.dir = await mkdtemp(path.join(os.tmpdir(), 'margin-nemesis-'));
    for (let i = 0; i < 3; i += 1) {
      const database = await Tunnel.start(Number(pgPort || 5432));
      const internal = await Tunnel.start(0);
      await this.#startNode(
        { database, internal },
        {
          dataDir: this.dir,
          databaseUrl: url.replace(authority(url), `127.0.0.1:${database.port}`),
          serveArgs: [
            '--cluster',
            '--advertise',
            `http://127.0.0.1:${internal.port}`,
            '--lease-ttl-ms',
            String(LEASE_TTL_MS),
            '--lease-renew-ms',
            String(RENEW_MS),
            '--heartbeat-ms',
            '500',
            '--drain-seconds',
            '1',
          ],
        },
      );
    }
    this.token = await this.nodes[0].server.addAccount('alice');
    this.balancer = await Balancer.start(this.nodes.map((n) => n.server.port));
    this.front = new MarginServer({ dataDir: this.dir, port: this.balancer.port });
    this.front.tokens.alice = this.token;
    await this.#startPlanner();
  }

  /**
   * Starts a node on a port found free, its internal tunnel pointed at it.
   * A port can be taken again before the node binds it (by a tunnel's or
   * a running node's socket): a node that could not listen starts again
   * on another. Kept before it starts, so a node that fails to start is
   * stopped with the rest and its output reported.
   */
  async #startNode(tunnels, options) {
    for (let attempt = 1; ; attempt += 1) {
      const port = await freePort();
      tunnels.internal.targetPort = port;
      const server = new MarginServer({ ...options, port });
      this.nodes.push({ server, ...tunnels });
      try {
        await server.start();
        return;
      } catch (e) {
        if (attempt >= BIND_ATTEMPTS || !server.logs.includes('cannot listen on')) throw e;
        this.nodes.pop();
      }
    }
  }

  async #startPlanner() {
    const script = path.join(sdkDir, 'dist', 'examples', 'steady-planner.js');
    if (!existsSync(script)) throw new Error(`${script} is missing: build the TypeScript SDK (npm run build in sdk/typescript)`);
    const paired = await this.front.api('POST', '/machines', { as: 'alice', body: { name: 'nemesis laptop' } });
    if (paired.status !== 201) throw new Error(`pairing: ${paired.status} ${JSON.stringify(paired.body)}`);
    const credentialFile = path.join(this.dir, 'machine.credential');
    await writeFile(credentialFile, paired.body.credential, { mode: 0o600 });
    const child = spawn(process.execPath, [script], {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: {
        ...process.env,
        MARGIN_SERVER: this.balancer.url,
        MARGIN_CREDENTIAL_FILE: credentialFile,
        MARGIN_HELD_FILE: path.join(this.dir, 'machine.held.json'),
        MARGIN_SILENCE_MS: '2000',
      },
    });
    this.planner = { child, output: '', log: '' };
    child.stdout.on('data', (d) => (this.planner.output += d));
    child.stderr.on('data', (d) => {
      if (process.env.LOG_DIR) appendFileSync(path.join(process.env.LOG_DIR, 'planner.log'), d);
      this.planner.log = (this.planner.log + d).slice(-64 * 1024);
    });
    await waitFor(() => this.planner.output.includes('linked'), PATIENCE_MS, 'the steady Planner to link');
  }

  /** Node outputs and the Planner's, for a failure report. */
  get logs() {
    return [
      ...this.nodes.map((n, i) => `----- node ${i} -----\n${n.server.logs}`),
      `----- planner -----\n${this.planner?.log ?? ''}`,
    ].join('\n');
  }

  /** A trial as problems name it: its number, fault and node. */
  #named(trial) {
    return `trial ${trial.number} (${trial.fault} on node ${trial.node})`;
  }

  problem(text) {
    this.tally.problems.push(text);
    this.log(`  ✗ ${text}`);
  }

  /** Runs `count` trials, faults of `kinds` in random order (each as often). */
  async run(count, kinds = FAULTS) {
    const order = [];
    while (order.length < count) {
      const round = [...kinds];
      for (let i = round.length - 1; i > 0; i -= 1) {
        const j = Math.floor(this.rand() * (i + 1));
        [round[i], round[j]] = [round[j], round[i]];
      }
      order.push(...round);
    }
    for (const fault of order.slice(0, count)) await this.trial(fault);
    await this.#everyNodeRestarted();
    return this.tally;
  }

  async trial(fault) {
    const number = this.trials.length + 1;
    const at = Math.floor(this.rand() * this.nodes.length);
    const trial = { number, fault, node: at, docs: [], editors: [], posts: [], answered: [] };
    this.trials.push(trial);
    this.tally.trials += 1;
    this.tally.faults[fault] += 1;
    for (let d = 0; d < DOCUMENTS; d += 1) {
      const doc = await this.#call('POST', '/documents', { title: `Trial ${number}.${d}` });
      trial.docs.push({ id: doc.id, sent: new Map(), acked: new Set() });
    }
    for (const doc of trial.docs) {
      for (let e = 0; e < EDITORS; e += 1) trial.editors.push(this.#editor(trial, doc, e));
    }
    await waitFor(() => trial.editors.every((e) => e.client.provider.synced), PATIENCE_MS, 'the editors to sync');
    const writing = trial.editors.map((editor) => this.#keepWriting(editor));
    await sleep(300);
    for (const doc of trial.docs) await this.#ask(trial, doc);

    const started = Date.now();
    const heal = await this.#break(fault, at);
    await sleep(LEASE_TTL_MS + RENEW_MS - (Date.now() - started));
    await this.#noneStranded(trial, fault, at);
    await sleep(Math.max(0, HOLD_MS - (Date.now() - started)));
    await heal();
    await this.#converged(trial);
    for (const editor of trial.editors) editor.writing = false;
    await Promise.all(writing);
    await this.#settled(trial);
    this.log(
      `trial ${number}: ${fault} on node ${at}; ${trial.docs.reduce((n, d) => n + d.acked.size, 0)} edits acknowledged`,
    );
  }

  #editor(trial, doc, e) {
    const name = `t${trial.number}d${trial.docs.indexOf(doc)}e${e}`;
    const server = { wsBase: this.balancer.wsBase };
    const client = connectClient(server, doc.id, this.token, { params: { client: name } });
    const editor = { name, doc, client, writing: true, n: 0, opened: 0 };
    client.provider.on('status', ({ status }) => {
      if (status === 'connected') editor.opened += 1;
    });
    // Whatever another editor wrote and this one holds was committed.
    client.doc.on('update', () => {
      for (const text of client.texts()) {
        if (doc.sent.has(text) && doc.sent.get(text) !== name) doc.acked.add(text);
      }
    });
    return editor;
  }

  async #keepWriting(editor) {
    while (editor.writing) {
      const text = `${editor.name}.${editor.n}`;
      editor.n += 1;
      editor.doc.sent.set(text, editor.name);
      this.tally.edits += 1;
      appendBlock(editor.client.doc, text);
      await sleep(WRITE_EVERY_MS);
    }
  }

  /** An HTTP call through the balancer, tried again while it cannot be served. */
  async #call(method, urlPath, body) {
    let last = null;
    const deadline = Date.now() + PATIENCE_MS;
    while (Date.now() < deadline) {
      try {
        const res = await this.front.api(method, urlPath, { as: 'alice', body });
        if (res.status < 500 && res.status !== 409) {
          if (res.status >= 400) throw new Error(`${method} ${urlPath}: ${res.status} ${JSON.stringify(res.body)}`);
          return res.body;
        }
        last = `${res.status} ${JSON.stringify(res.body)}`;
      } catch (e) {
        if (!String(e.message).includes('fetch failed') && !String(e.name).includes('Timeout')) throw e;
        last = e.message;
      }
      await sleep(200);
    }
    throw new Error(`${method} ${urlPath} was not served within ${PATIENCE_MS} ms: ${last}`);
  }

  async #ask(trial, doc) {
    await this.#call('POST', `/documents/${doc.id}/chat`, { text: '@planner review' });
    trial.posts.push(doc.id);
  }

  /** Breaks node `at` by `fault`; resolves with what heals it. */
  async #break(fault, at) {
    const node = this.nodes[at];
    switch (fault) {
      case 'kill':
        await node.server.kill();
        return () => node.server.start();
      case 'pause': {
        const pid = node.server.child?.pid;
        if (!pid) throw new Error(`node ${at} is not running (it exited: see its output)`);
        process.kill(pid, 'SIGSTOP');
        return async () => process.kill(pid, 'SIGCONT');
      }
      case 'database':
        node.database.darken();
        return async () => node.database.heal();
      case 'peers':
        node.internal.darken();
        return async () => node.internal.heal();
      case 'restart': {
        const stopped = node.server.stop();
        return async () => {
          await stopped;
          await node.server.start();
        };
      }
      default:
        throw new Error(`no fault ${fault}`);
    }
  }

  /**
   * An editor that is synced and served — not on the paused node, which
   * nothing can answer for — and has not reconnected meanwhile, must get an
   * edit written now within STRANDED_MS.
   */
  async #noneStranded(trial, fault, at) {
    const served = (editor) =>
      editor.client.provider.wsconnected &&
      editor.client.provider.synced &&
      !(fault === 'pause' && this.balancer.attached.get(editor.name) === at);
    for (const doc of trial.docs) {
      const editors = trial.editors.filter((e) => e.doc === doc && served(e));
      const writer = editors[0];
      if (!writer) continue;
      const probe = `${writer.name}.probe-during`;
      doc.sent.set(probe, writer.name);
      this.tally.edits += 1;
      const opened = new Map(editors.map((e) => [e, e.opened]));
      const since = Date.now();
      appendBlock(writer.client.doc, probe);
      const has = (e) => e.client.texts().includes(probe);
      await waitFor(() => editors.every((e) => has(e) || e.opened !== opened.get(e) || !served(e)), STRANDED_MS + 4000).catch(
        () => {},
      );
      const waited = Date.now() - since;
      this.tally.worstStrandedMs = Math.max(this.tally.worstStrandedMs, waited);
      const stuck = editors.filter((e) => !has(e) && e.opened === opened.get(e) && served(e));
      if (stuck.length > 0 || waited > STRANDED_MS) {
        const who = stuck.map((e) => `${e.name} on node ${this.balancer.attached.get(e.name)}`);
        if (stuck.length > 0 || editors.some((e) => has(e) && e.opened === opened.get(e) && waited > STRANDED_MS)) {
          this.tally.stranded += 1;
          this.problem(`trial ${trial.number} (${fault} on node ${at}): stranded ${waited} ms: ${who.join(', ') || 'slow'}`);
        }
      }
    }
  }

  /** Every editor of each document agrees, with an edit written as it healed. */
  async #converged(trial) {
    const healed = Date.now();
    for (const doc of trial.docs) {
      const editors = trial.editors.filter((e) => e.doc === doc);
      const probe = `${editors[0].name}.probe-healed`;
      doc.sent.set(probe, editors[0].name);
      this.tally.edits += 1;
      appendBlock(editors[0].client.doc, probe);
      const same = () => {
        const texts = editors.map((e) => JSON.stringify(e.client.texts()));
        return texts.every((t) => t === texts[0]) && editors[1].client.texts().includes(probe);
      };
      try {
        await waitFor(same, PATIENCE_MS, 'the editors to agree');
      } catch {
        this.tally.diverged += 1;
        this.problem(`${this.#named(trial)}: editors of ${doc.id} never agreed`);
        continue;
      }
      const took = Date.now() - healed;
      this.tally.worstConvergeMs = Math.max(this.tally.worstConvergeMs, took);
      if (took > CONVERGE_MS) {
        this.tally.diverged += 1;
        this.problem(`${this.#named(trial)}: converged ${took} ms after the heal (bound ${CONVERGE_MS})`);
      }
    }
  }

  /** With the editors gone, what was acknowledged is all there, once. */
  async #settled(trial) {
    for (const doc of trial.docs) {
      await waitFor(
        () => trial.editors.filter((e) => e.doc === doc).every((e) => !e.client.provider.wsconnected || e.client.provider.synced),
        PATIENCE_MS,
      ).catch(() => {});
    }
    // Every editor's last edits reach the server before it goes: the probe
    // written as it healed, which every editor holds, came after them.
    await sleep(500);
    for (const editor of trial.editors) editor.client.destroy();
    await this.#planned(trial);
    await this.#check(trial);
  }

  /** Each `@planner` message is answered once; its card is answered by a person. */
  async #planned(trial) {
    for (const id of trial.docs.map((d) => d.id)) {
      const asked = trial.posts.filter((p) => p === id).length;
      try {
        await waitFor(
          async () => {
            const chat = await this.#call('GET', `/documents/${id}/chat`);
            return chat.messages.filter((m) => m.kind === 'planner').length >= asked;
          },
          PATIENCE_MS,
          `a reply on ${id}`,
        );
      } catch {
        this.tally.lost += 1;
        this.problem(`${this.#named(trial)}: no reply on ${id}`);
        continue;
      }
      const cards = await this.#call('GET', `/documents/${id}/decisions`);
      for (const card of cards.decisions.filter((c) => c.state === 'open')) {
        await this.#call('POST', `/documents/${id}/decisions/${card.id}/answer`, { yes: true });
        trial.answered.push({ doc: id, card: card.id });
        this.tally.answers += 1;
      }
    }
  }

  /** Reads trial `trial`'s documents afresh and counts what is missing or twice. */
  async #check(trial, { after = '' } = {}) {
    for (const doc of trial.docs) {
      const reader = connectClient({ wsBase: this.balancer.wsBase }, doc.id, this.token);
      try {
        await reader.waitSynced(PATIENCE_MS);
        const texts = reader.texts();
        const present = new Set(texts);
        const missing = [...doc.acked].filter((t) => !present.has(t));
        const twice = texts.length - present.size;
        if (!after) this.tally.acked += doc.acked.size;
        if (missing.length > 0) {
          this.tally.lost += missing.length;
          this.problem(`${this.#named(trial)}${after}: ${missing.length} acknowledged edits lost on ${doc.id}: ${missing.slice(0, 5)}`);
        }
        if (twice > 0) {
          this.tally.twice += twice;
          this.problem(`${this.#named(trial)}${after}: ${twice} blocks twice on ${doc.id}`);
        }
      } finally {
        reader.destroy();
      }
      const chat = await this.#call('GET', `/documents/${doc.id}/chat`);
      const asked = trial.posts.filter((p) => p === doc.id).length;
      const said = chat.messages.filter((m) => m.kind !== 'planner' && m.kind !== 'system' && m.text === '@planner review');
      const replies = chat.messages.filter((m) => m.kind === 'planner');
      const lostTurns = chat.messages.filter((m) => m.kind === 'system' && m.text.includes('without the turn'));
      if (!after) {
        this.tally.turns += asked;
        this.tally.replies += replies.length;
      }
      if (said.length !== asked || replies.length !== asked || lostTurns.length > 0) {
        this.tally[said.length < asked || replies.length < asked ? 'lost' : 'twice'] += 1;
        this.problem(
          `${this.#named(trial)}${after}: ${asked} asked, Chat holds ${said.length} asks, ${replies.length} replies, ${lostTurns.length} lost turns on ${doc.id}`,
        );
      }
      // A turn whose card call was in flight when its node went down is
      // told `interrupted` and replies with the error: its card is not
      // owed. A turn that replied "Reviewed" had its card acknowledged.
      const reviewed = replies.filter((m) => m.text.startsWith('Reviewed')).length;
      const cards = (await this.#call('GET', `/documents/${doc.id}/decisions`)).decisions;
      const keys = cards.map((c) => c.key);
      if (!after) {
        this.tally.cards += cards.length;
        this.tally.interrupted += replies.length - reviewed;
      }
      if (new Set(keys).size !== keys.length || cards.length < reviewed || cards.length > asked) {
        this.tally[cards.length < reviewed ? 'lost' : 'twice'] += 1;
        this.problem(`${this.#named(trial)}${after}: ${reviewed} cards acknowledged, ${cards.length} there (${keys}) on ${doc.id}`);
      }
      for (const { card } of trial.answered.filter((a) => a.doc === doc.id)) {
        const found = cards.find((c) => c.id === card);
        if (found?.state !== 'answered') {
          this.tally.lost += 1;
          this.problem(`${this.#named(trial)}${after}: the answer to ${card} is gone (${found?.state})`);
        }
      }
    }
    const handed = this.planner.output.split('\n').filter((l) => l.startsWith('turn '));
    if (new Set(handed).size !== handed.length) {
      this.tally.twice += handed.length - new Set(handed).size;
      this.problem(`${this.#named(trial)}${after}: the Planner was handed a turn twice`);
    }
  }

  /** Every node killed at once and started again; every trial read again. */
  async #everyNodeRestarted() {
    for (const node of this.nodes) await node.server.kill();
    for (const node of this.nodes) await node.server.start();
    for (const trial of this.trials) await this.#check(trial, { after: ' after every node restarted' });
  }

  async stop() {
    this.planner?.child.kill('SIGTERM');
    await this.balancer?.close().catch(() => {});
    for (const node of this.nodes) {
      for (const tunnel of [node.database, node.internal]) tunnel.heal();
      try {
        if (node.server.child) process.kill(node.server.child.pid, 'SIGCONT');
      } catch {
        // already gone
      }
      if (node.server.child) await node.server.kill().catch(() => {});
      await node.database.close().catch(() => {});
      await node.internal.close().catch(() => {});
    }
    if (this.dir) await rm(this.dir, { recursive: true, force: true });
    if (this.schema) await psql(this.base, `DROP SCHEMA IF EXISTS ${this.schema} CASCADE`).catch(() => {});
  }
}
