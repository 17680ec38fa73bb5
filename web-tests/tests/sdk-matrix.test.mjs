// Every connector SDK against the real server through a proxy that breaks
// the link at each step of a turn (SPEC L10, O3, W1): before and after the
// `invoke`, each run report, each tool call and the reply, by cutting the
// connection or by partitioning it (both ways silent, sockets left open).
// Each SDK runs its steady planner (the same turn in Rust, TypeScript and
// Python, as a child process); after every break the turn's reply is posted
// exactly once, its run shows `completed`, its card exists once, the
// handler saw the turn once, and Chat never says the turn was lost. On
// SQLite, and on PostgreSQL when TEST_DATABASE_URL names one.

import assert from 'node:assert/strict';
import { execFile, spawn, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { describe, test } from 'node:test';
import { documentWith } from '../lib/doc.mjs';
import { Proxy } from '../lib/proxy.mjs';
import { MarginServer, freePort, repoRoot, sleep, waitFor, withTimeout } from '../lib/server.mjs';

const PATIENCE = 30000;
/** How often the server sends heartbeats, and how long an SDK waits in
 * silence before it counts the link as dropped (four heartbeats). */
const HEARTBEAT_MS = 500;
const SILENCE_MS = 2000;

/** Each SDK's steady planner: the command that runs it. */
const SDKS = {
  rust: () => [process.env.MARGIN_STEADY_RUST ?? path.join(repoRoot, 'target', 'debug', 'examples', 'steady-planner')],
  typescript: () => [process.execPath, path.join(repoRoot, 'sdk', 'typescript', 'dist', 'examples', 'steady-planner.js')],
  python: () => [
    process.env.MARGIN_PYTHON ?? path.join(repoRoot, 'sdk', 'python', '.venv', 'bin', 'python'),
    path.join(repoRoot, 'sdk', 'python', 'examples', 'steady_planner.py'),
  ],
};

/** The steps of the steady planner's turn, each broken before and after. */
const STEPS = [
  ['the invoke', 'down', (m) => m.type === 'invoke'],
  ['the running report', 'up', (m) => m.type === 'run' && m.status === 'running'],
  ['the read', 'up', (m) => m.type === 'tool-call' && m.name === 'read_document'],
  ['the card call', 'up', (m) => m.type === 'tool-call' && m.name === 'open_decisions'],
  ['the completed report', 'up', (m) => m.type === 'run' && m.status === 'completed'],
  ['the reply', 'up', (m) => m.type === 'reply'],
];
const BREAKS = ['cut', 'partition'].flatMap((mode) => ['before', 'after'].map((when) => ({ mode, when })));

const BASE = process.env.TEST_DATABASE_URL;
const PSQL = spawnSync('psql', ['--version']).status === 0;
const POSTGRES_SKIP = !BASE ? 'TEST_DATABASE_URL is not set' : !PSQL ? 'psql is not installed' : false;

function psql(sql) {
  return new Promise((resolve, reject) => {
    execFile('psql', [BASE, '-q', '-v', 'ON_ERROR_STOP=1', '-c', sql], { timeout: 10000 }, (err, _out, stderr) =>
      err ? reject(new Error(`psql failed: ${err.message}\n${stderr}`)) : resolve(),
    );
  });
}

/** A server on `backend` with account alice; `{ server, drop }`. */
async function serverOn(backend) {
  const dataDir = await mkdtemp(path.join(os.tmpdir(), 'margin-matrix-'));
  let databaseUrl = null;
  let schema = null;
  if (backend === 'postgres') {
    schema = `matrix_${Math.random().toString(36).slice(2, 10)}`;
    await psql(`CREATE SCHEMA ${schema}`);
    databaseUrl = `${BASE}${BASE.includes('?') ? '&' : '?'}options=-c%20search_path%3D${schema}`;
  }
  const server = new MarginServer({ dataDir, port: await freePort(), databaseUrl, serveArgs: ['--heartbeat-ms', String(HEARTBEAT_MS)] });
  await server.addAccount('alice');
  await server.start();
  return {
    server,
    drop: async () => {
      await server.cleanup();
      if (schema) await psql(`DROP SCHEMA IF EXISTS ${schema} CASCADE`).catch(() => {});
    },
  };
}

/** Starts `sdk`'s steady planner through `proxy`; `{ child, output, turns(session) }`. */
async function startPlanner(sdk, server, proxy, dir) {
  const command = SDKS[sdk]();
  for (const part of command) {
    assert.ok(existsSync(part), `${sdk}'s steady planner cannot run: ${part} is missing (web-tests/README.md, "Run", says how to build it)`);
  }
  const credentialFile = path.join(dir, 'machine.credential');
  const paired = await server.api('POST', '/machines', { as: 'alice', body: { name: `${sdk} laptop` } });
  assert.equal(paired.status, 201, JSON.stringify(paired.body));
  await writeFile(credentialFile, paired.body.credential, { mode: 0o600 });
  const child = spawn(command[0], command.slice(1), {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: {
      ...process.env,
      MARGIN_SERVER: proxy.url,
      MARGIN_CREDENTIAL_FILE: credentialFile,
      MARGIN_HELD_FILE: path.join(dir, 'machine.held.json'),
      MARGIN_SILENCE_MS: String(SILENCE_MS),
    },
  });
  const planner = { child, output: '', log: '' };
  child.stdout.on('data', (d) => (planner.output += d));
  child.stderr.on('data', (d) => (planner.log = (planner.log + d).slice(-64 * 1024)));
  planner.exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
  planner.turns = (session) => planner.output.split('\n').filter((l) => l.startsWith(`turn ${session} `)).length;
  planner.links = () => planner.output.split('\n').filter((l) => l === 'linked').length;
  planner.heldFile = path.join(dir, 'machine.held.json');
  await waitFor(() => planner.output.includes('linked'), PATIENCE, `${sdk}'s steady planner to link`);
  return planner;
}

/**
 * Whether the planner's held file says it owes the server nothing: no
 * reply or run report waits for its acknowledgement (SPEC L10).
 */
async function owesNothing(planner) {
  let held;
  try {
    held = JSON.parse(await readFile(planner.heldFile, 'utf8'));
  } catch (e) {
    if (e.code === 'ENOENT') return true;
    throw e;
  }
  return Object.values(held).every((kept) => Array.isArray(kept) || (!kept.reply && !(kept.runs?.length > 0)));
}

/**
 * Waits until the planner linked again after the break that happened with
 * `linksAtBreak` links, and its held file owes nothing: a trial starts on a
 * quiet link, so a message said meanwhile finds the machine linked and no
 * earlier trial's resent reply trips the next fault.
 */
async function quiet(planner, linksAtBreak) {
  await waitFor(
    async () => planner.links() > linksAtBreak && (await owesNothing(planner)),
    PATIENCE,
    'the planner to link again and owe nothing',
  );
}

async function chat(server, docId) {
  const res = await server.api('GET', `/documents/${docId}/chat`, { as: 'alice' });
  assert.equal(res.status, 200);
  return res.body.messages;
}

async function plannerView(server, docId) {
  const res = await server.api('GET', `/documents/${docId}/planner`, { as: 'alice' });
  assert.equal(res.status, 200);
  return res.body;
}

/** What the trial on `doc` came to, to compare with what it must come to. */
async function outcome(server, planner, doc) {
  const lines = await chat(server, doc.id);
  const view = await plannerView(server, doc.id);
  const cards = await server.api('GET', `/documents/${doc.id}/decisions`, { as: 'alice' });
  return {
    replies: lines.filter((m) => m.kind === 'planner').map((m) => m.text),
    lost: lines.filter((m) => m.kind === 'system' && m.text.includes('without the turn')).map((m) => m.text),
    run: view.runs?.find((r) => r.run === 'review')?.status ?? null,
    cards: (cards.body?.decisions ?? []).filter((c) => c.key === 'steady-t1').length,
    turns: view.session ? planner.turns(view.session) : null,
  };
}

const EXPECTED = { replies: ['Reviewed t1: 1 blocks.'], lost: [], run: 'completed', cards: 1, turns: 1 };

// MATRIX_SDKS=rust,python runs those SDKs' matrices only (all by default).
const ONLY = process.env.MATRIX_SDKS?.split(',');

/** Runs `sdk`'s planner through every break of every step, on `backend`. */
function matrix(sdk, backend) {
  return async (t) => {
    const { server, drop } = await serverOn(backend);
    const proxy = await Proxy.start(server.port);
    const dir = await mkdtemp(path.join(os.tmpdir(), `margin-matrix-${sdk}-`));
    let planner = null;
    const trials = [];
    try {
      planner = await startPlanner(sdk, server, proxy, dir);
      let linksAtBreak = 0;
      for (const [step, direction, matches] of STEPS) {
        for (const { mode, when } of BREAKS) {
          const name = `${mode} ${when} ${step}`;
          await quiet(planner, linksAtBreak);
          const { doc } = await documentWith(server, name, ['We launch in March.']);
          const broken = proxy.faultAt({ direction, matches, mode, when });
          const said = await server.api('POST', `/documents/${doc.id}/chat`, { as: 'alice', body: { text: '@planner review' } });
          assert.equal(said.status, 201);
          await withTimeout(broken, PATIENCE, `the link to break at ${name}`);
          linksAtBreak = planner.links();
          await waitFor(
            async () => {
              const now = await outcome(server, planner, doc);
              return now.replies.length > 0 && now.run === 'completed' && now.turns !== null;
            },
            PATIENCE,
            `the turn broken at ${name} to end with its reply and its run completed`,
          ).catch(async (e) => {
            throw new Error(`${e.message}\nnow: ${JSON.stringify(await outcome(server, planner, doc))}`);
          });
          trials.push({ name, doc });
        }
      }
      // A copy sent again would land after the original: look once every
      // trial has had the whole matrix's time to show one.
      await sleep(SILENCE_MS);
      const wrong = [];
      for (const { name, doc } of trials) {
        const got = await outcome(server, planner, doc);
        if (JSON.stringify(got) !== JSON.stringify(EXPECTED)) wrong.push(`${name}: ${JSON.stringify(got)}`);
      }
      t.diagnostic(`${sdk} on ${backend}: ${STEPS.length} steps × ${BREAKS.length} breaks = ${trials.length} trials; ${trials.length - wrong.length} replies posted once, runs completed, handler once`);
      assert.deepEqual(wrong, [], `trials whose outcome is not ${JSON.stringify(EXPECTED)}`);
    } catch (e) {
      process.stderr.write(`\n----- ${sdk} planner output -----\n${planner?.output ?? ''}\n${planner?.log ?? ''}\n----- margin output -----\n${server.logs}\n`);
      throw e;
    } finally {
      if (planner) {
        planner.child.kill('SIGTERM');
        await withTimeout(planner.exited, 10000, `${sdk}'s steady planner to exit`).catch(() => planner.child.kill('SIGKILL'));
      }
      await proxy.close();
      await drop();
      await rm(dir, { recursive: true, force: true });
    }
  };
}

for (const sdk of Object.keys(SDKS).filter((s) => !ONLY || ONLY.includes(s))) {
  describe(`the ${sdk} SDK`, () => {
    test('posts each reply once and shows each run\'s end through a link broken at every step of a turn, on SQLite', { timeout: 600000 }, matrix(sdk, 'sqlite'));
    test('posts each reply once and shows each run\'s end through a link broken at every step of a turn, on PostgreSQL', { timeout: 600000, skip: POSTGRES_SKIP }, matrix(sdk, 'postgres'));
  });
}
