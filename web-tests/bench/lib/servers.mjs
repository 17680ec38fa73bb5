// How the peer benchmark starts each server (a fresh process for every run)
// and addresses its documents. Each start() resolves to
//   { name, pid, log, docs(n) -> [{ url, framing }], restart(), stop() }
// where docs(n) makes n documents the way that server makes them and returns
// one sync endpoint per document, and restart() — only where the server
// keeps documents somewhere to start again from (Margin; y-sweet with a
// store) — stops the process and starts it on the same data and port, so
// nothing is loaded (pid and log then name the new process).

import { mkdtemp, rm } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { plainFraming, hocuspocusFraming } from './yproto.mjs';
import { freePort, run, spawnUntil, stopChild } from './spawn.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
export const benchDir = path.resolve(here, '..');
export const repoRoot = path.resolve(benchDir, '..', '..');

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function waitHttp(url, what, timeoutMs = 10000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try { if ((await fetch(url)).ok) return; } catch { /* not yet */ }
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(25);
  }
}

/** Runs `fn(i)` for i in [0, n) with at most `width` at once. */
export async function pool(n, width, fn) {
  const out = new Array(n);
  let next = 0;
  const lane = async () => {
    while (next < n) { const i = next++; out[i] = await fn(i); }
  };
  await Promise.all(Array.from({ length: Math.min(width, n) }, lane));
  return out;
}

// --- what is installed -------------------------------------------------------

export function installed(name, cfg) {
  switch (name) {
    case 'margin':
      return existsSync(cfg.marginBin) ? null
        : `margin binary not found at ${cfg.marginBin} (cargo build --release -p margin-server --bin margin, or set MARGIN_BIN)`;
    case 'npm':
      return existsSync(path.join(benchDir, 'node_modules', '@y', 'websocket-server', 'src', 'server.js')) ? null
        : '@y/websocket-server not installed (run web-tests/bench/install-peers.sh)';
    case 'hocuspocus':
      return existsSync(path.join(benchDir, 'node_modules', '@hocuspocus', 'server')) ? null
        : '@hocuspocus/server not installed (run web-tests/bench/install-peers.sh)';
    case 'ysweet':
      return existsSync(cfg.ysweetBin) ? null
        : `y-sweet not found at ${cfg.ysweetBin} (run web-tests/bench/install-peers.sh, or set YSWEET_BIN)`;
    default:
      return `unknown server ${name}`;
  }
}

// --- Margin ------------------------------------------------------------------

// Margin caps open HTTP connections (4096 in all, 512 per address by
// default); the idle scenario opens more, so both caps are raised. Nothing
// else is changed: SQLite in a fresh data dir, every batch committed before
// it is broadcast.
async function startMargin(cfg) {
  const bin = cfg.marginBin;
  const dataDir = await mkdtemp(path.join(os.tmpdir(), 'margin-peers-'));
  const env = {
    RUST_LOG: cfg.serverLog,
    MARGIN_MAX_CONNECTIONS: String(cfg.maxConnections),
    MARGIN_MAX_CONNECTIONS_PER_ADDRESS: String(cfg.maxConnections),
    // A stop is the run's end or a restart: no balancer to drain for.
    MARGIN_DRAIN_SECONDS: '0',
  };
  const out = await run(bin, ['account', 'add', 'bench', '--data', dataDir], env);
  const token = out.trim().split('\n').pop().trim();
  const serve = async (listen) => {
    const spawned = spawnUntil(
      bin, ['serve', '--data', dataDir, '--listen', listen], env,
      /margin listening on http:\/\/127\.0\.0\.1:(\d+)/, 'margin serve',
    );
    const port = Number((await spawned.matched)[1]);
    await waitHttp(`http://127.0.0.1:${port}/healthz`, 'margin /healthz');
    return { ...spawned, port };
  };
  let proc = await serve('127.0.0.1:0');
  const { port } = proc;
  const base = `http://127.0.0.1:${port}`;
  return {
    name: 'margin',
    get pid() { return proc.child.pid; },
    get child() { return proc.child; },
    get log() { return proc.log; },
    async docs(n) {
      return pool(n, 8, async (i) => {
        const res = await fetch(`${base}/documents`, {
          method: 'POST',
          headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json' },
          body: JSON.stringify({ title: `bench ${i}` }),
        });
        if (res.status !== 201) throw new Error(`POST /documents: ${res.status} ${await res.text()}`);
        const { id } = await res.json();
        return { url: `ws://127.0.0.1:${port}/documents/${id}/sync?token=${encodeURIComponent(token)}`, framing: plainFraming() };
      });
    },
    /** Stops the process and starts it again on the same data and port: nothing is loaded. */
    async restart() {
      await stopChild(proc.child);
      proc = await serve(`127.0.0.1:${port}`);
    },
    async stop() {
      await stopChild(proc.child);
      await rm(dataDir, { recursive: true, force: true });
    },
  };
}

// --- @y/websocket-server (npm) -------------------------------------------------

// In memory: no YPERSISTENCE, no CALLBACK_URL. A room is made by connecting.
async function startNpm() {
  const port = await freePort();
  const script = path.join(benchDir, 'node_modules', '@y', 'websocket-server', 'src', 'server.js');
  const { child, log, matched } = spawnUntil(
    process.execPath, [script], { HOST: '127.0.0.1', PORT: String(port), YPERSISTENCE: undefined, CALLBACK_URL: undefined },
    /running at/, '@y/websocket-server',
  );
  await matched;
  return {
    name: 'npm',
    pid: child.pid,
    child,
    log,
    async docs(n) {
      return Array.from({ length: n }, (_, i) => ({ url: `ws://127.0.0.1:${port}/bench-${i}`, framing: plainFraming() }));
    },
    async stop() { await stopChild(child); },
  };
}

// --- Hocuspocus ----------------------------------------------------------------

// In memory (no extensions). Every message is prefixed with the document name;
// a connection must send an auth message first (any token: no onAuthenticate
// hook). The URL path is not used to pick the document.
async function startHocuspocus() {
  const { child, log, matched } = spawnUntil(
    process.execPath, [path.join(here, 'hocuspocus-server.mjs')], {},
    /hocuspocus listening on (\d+)/, 'hocuspocus',
  );
  const port = Number((await matched)[1]);
  return {
    name: 'hocuspocus',
    pid: child.pid,
    child,
    log,
    async docs(n) {
      return Array.from({ length: n }, (_, i) => ({ url: `ws://127.0.0.1:${port}/`, framing: hocuspocusFraming(`bench-${i}`) }));
    },
    async stop() { await stopChild(child); },
  };
}

// --- y-sweet -------------------------------------------------------------------

// `y-sweet serve [STORE]`: without a store, documents live in memory only
// (it warns so); with a directory, each document is written there by a
// background task at most every --checkpoint-freq-seconds (10 s), not before
// an update is broadcast. No --auth: every connection has full access.
// Documents are made by POST /doc/new {docId}; the sync URL is
// /d/{id}/ws/{id}. An unconnected document is dropped after ~2 checkpoints.
async function startYsweet(cfg) {
  const port = await freePort();
  const args = ['serve', '--port', String(port), '--host', '127.0.0.1'];
  let storeDir = null;
  if (cfg.ysweetStore === 'dir') {
    storeDir = await mkdtemp(path.join(os.tmpdir(), 'ysweet-peers-'));
    args.splice(1, 0, storeDir);
  }
  const base = `http://127.0.0.1:${port}`;
  const serve = async () => {
    const spawned = spawnUntil(
      cfg.ysweetBin, args, { RUST_LOG: cfg.serverLog, Y_SWEET_STORE: undefined },
      /ys:\/\/127\.0\.0\.1:\d+|Listening on ws:\/\//, 'y-sweet serve',
    );
    await spawned.matched;
    await waitHttp(`${base}/ready`, 'y-sweet /ready');
    return spawned;
  };
  let proc = await serve();
  return {
    name: 'ysweet',
    get pid() { return proc.child.pid; },
    get child() { return proc.child; },
    get log() { return proc.log; },
    async docs(n) {
      return pool(n, 8, async (i) => {
        const res = await fetch(`${base}/doc/new`, {
          method: 'POST',
          headers: { 'Content-Type': 'application/json' },
          body: JSON.stringify({ docId: `bench-${i}` }),
        });
        if (!res.ok) throw new Error(`POST /doc/new: ${res.status} ${await res.text()}`);
        const { docId } = await res.json();
        return { url: `ws://127.0.0.1:${port}/d/${docId}/ws/${docId}`, framing: plainFraming() };
      });
    },
    // Only with a store is there anything to start again from.
    restart: storeDir && (async () => {
      await stopChild(proc.child);
      proc = await serve();
    }),
    async stop() {
      await stopChild(proc.child);
      if (storeDir) await rm(storeDir, { recursive: true, force: true });
    },
  };
}

export function startServer(name, cfg) {
  switch (name) {
    case 'margin': return startMargin(cfg);
    case 'npm': return startNpm(cfg);
    case 'hocuspocus': return startHocuspocus(cfg);
    case 'ysweet': return startYsweet(cfg);
    default: throw new Error(`unknown server ${name}`);
  }
}
