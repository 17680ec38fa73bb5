// Side-by-side peer benchmark: the same raw-socket client workload against
// Margin, @y/websocket-server (npm), Hocuspocus and y-sweet, one fresh server
// process per run, servers interleaved within each repetition (order
// alternating), medians of the repetitions printed as a Markdown table with a
// "Margin ÷ best peer" column.
//
// Clients are raw `ws` sockets speaking the y-websocket sync protocol by hand
// (lib/yproto.mjs, lib/client.mjs): receivers send step 1 with an empty state
// vector, answer the server's step 1 with an empty step 2 and count update
// messages; each writer has one Y.Doc and appends tokens "[doc.seq@ms]" to a
// Y.XmlText in a paragraph Y.XmlElement of the Y.XmlFragment 'prosemirror'.
// Receivers find tokens in the raw update bytes (latin1 + regex): an update
// may carry several (Margin merges a batch), so deliveries are counted as
// (edit, receiver) pairs. Only loopback addresses; every run is bounded in
// count and time and stops by itself.
//
// Servers (SERVERS, default all; one that is not installed is skipped):
//   margin      release binary, SQLite in a fresh temp data dir, default
//               durability (each batch committed before broadcast)
//   npm         @y/websocket-server 0.1.1, in memory
//   hocuspocus  @hocuspocus/server (no extensions), in memory
//   ysweet      y-sweet 0.9 `serve`, in memory (its default without a store);
//               YSWEET_STORE=dir gives it a temp dir store (background
//               checkpoints every 10 s)
//
// Scenarios (SCENARIOS, default all):
//   idle        IDLE_CONNS idle synced connections over IDLE_DOCS documents;
//               server VmRSS before connecting and after all are synced and
//               SETTLE_MS settled -> KiB per connection
//   many-docs   MANY_DOCS documents x (1 writer + MANY_RECEIVERS receivers);
//               every document gets one edit per second (spread over the
//               second) for MANY_SECONDS s -> RSS while connected, latency
//               edit -> each receiver p50/p99/max, edit -> all receivers p99,
//               server CPU over the edit phase
//   open-N      one document, 1 writer, RECEIVERS receivers, N edits/s open
//               loop (timer-paced, never waiting for delivery), OPEN_SECONDS
//               s of edits -> server CPU µs per delivery, latency p50/p99
//   closed-W    one document, RECEIVERS receivers; the writer keeps at most W
//               edits not yet delivered to every receiver; CLOSED_EDITS edits
//               or CLOSED_SECONDS s -> edits/s fanned out to all receivers
//   join        one document of JOIN_PARAGRAPHS paragraphs (~1 MB of Yjs
//               state) loaded by a writer (which stays connected), then
//               JOINS fresh joins one after another (connect, step 1, the
//               whole step 2) -> join p50/p99, step 2's arrival after step
//               1 went out p50, RSS with the document loaded
//   cold-join   the same document, the writer gone and COLD_SETTLE_MS
//               passed, then COLD_JOINS times: restart the server on its
//               stored data, one join -> cold join p50, its step 2 p50,
//               RSS after it, the server's minor page faults during it
//               (pages a fresh process touches for the first time).
//               Margin and y-sweet (given a directory store for this
//               scenario) only: npm and Hocuspocus keep nothing to restart
//               from
//
// Every repetition first measures the disk the data dirs are on: DISK_SYNCS
// 4 KiB writes each followed by fdatasync -> p50/p99, kept in the JSON's
// run line; the light-load target (issue 43) is read against it.
//
// Knobs, as env vars or --name=value (names case-insensitive, - or _):
//   SERVERS=margin,npm,hocuspocus,ysweet   SCENARIOS=idle,many-docs,open-1000,
//   open-200,closed-64,closed-1024,join,cold-join   REPEAT=3
//   IDLE_CONNS=5000 IDLE_DOCS=50 SETTLE_MS=2000
//   MANY_DOCS=500 MANY_RECEIVERS=3 MANY_SECONDS=20
//   RECEIVERS=50 OPEN_SECONDS=5 CLOSED_EDITS=5000 CLOSED_SECONDS=10
//   JOIN_PARAGRAPHS=10000 JOINS=20 COLD_JOINS=5 COLD_SETTLE_MS=12000
//   DISK_SYNCS=500
//   DRAIN_MS=5000      after the last edit, how long to wait for deliveries
//   CONNECT_CONCURRENCY=100   sockets opening at once
//   SOURCE_ADDRS=16    client sockets bind 127.0.0.1..127.0.0.N round robin
//   MAX_CONNECTIONS=20000   Margin's connection caps (all / per address)
//   SERVER_LOG=warn    RUST_LOG for margin and y-sweet (both log per request
//                      or per update at info)
//   MARGIN_BIN (default <repo>/target/release/margin)
//   YSWEET_BIN (default /work/.peers/bin/y-sweet, or $PEERS_ROOT/bin/y-sweet)
//   YSWEET_STORE=memory|dir
//   RUN_TIMEOUT_MS=180000  hard limit for one run (then it counts as failed)
//   JSON=path          also write the run as JSON lines: the machine, the
//                      build, then every run (headline.mjs reads them)
//
// Every run records the load: CPU that other processes used during it (the
// machine's busy ticks from /proc/stat less the server's and this harness's),
// as % of one core; a high figure marks a disturbed run.

import { writeFile } from 'node:fs/promises';
import { closeSync, fdatasyncSync, mkdtempSync, openSync, rmSync, statSync, writeSync } from 'node:fs';
import { execSync } from 'node:child_process';
import os from 'node:os';
import path from 'node:path';
import * as Y from 'yjs';
import { RawClient, Writer, localAddresses } from './lib/client.mjs';
import { startServer, installed, pool, repoRoot } from './lib/servers.mjs';
import { procStats, loadMeter } from './lib/proc.mjs';
import { fmt, median, metricsFor, table, targets } from './lib/table.mjs';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const ALL_SERVERS = ['margin', 'npm', 'hocuspocus', 'ysweet'];
const ALL_SCENARIOS = ['idle', 'many-docs', 'open-1000', 'open-200', 'closed-64', 'closed-1024', 'join', 'cold-join'];
const TOKEN_RE = /\[(\d+)\.(\d+)@(\d+\.\d+)\]/g;

function config() {
  const args = {};
  for (const a of process.argv.slice(2)) {
    const m = a.match(/^--([^=]+)=(.*)$/);
    if (m) args[m[1].toUpperCase().replace(/-/g, '_')] = m[2];
    else throw new Error(`unknown argument ${a} (use --name=value)`);
  }
  const get = (k, d) => args[k] ?? process.env[k] ?? d;
  const num = (k, d) => {
    const v = Number(get(k, d));
    if (!Number.isFinite(v)) throw new Error(`${k} must be a number`);
    return v;
  };
  const list = (k, d) => String(get(k, d)).split(',').map((s) => s.trim()).filter(Boolean);
  const peersRoot = get('PEERS_ROOT', '/work/.peers');
  const cfg = {
    servers: list('SERVERS', ALL_SERVERS.join(',')),
    scenarios: list('SCENARIOS', ALL_SCENARIOS.join(',')),
    repeat: num('REPEAT', 3),
    idleConns: num('IDLE_CONNS', 5000),
    idleDocs: num('IDLE_DOCS', 50),
    settleMs: num('SETTLE_MS', 2000),
    manyDocs: num('MANY_DOCS', 500),
    manyReceivers: num('MANY_RECEIVERS', 3),
    manySeconds: num('MANY_SECONDS', 20),
    receivers: num('RECEIVERS', 50),
    openSeconds: num('OPEN_SECONDS', 5),
    closedEdits: num('CLOSED_EDITS', 5000),
    closedSeconds: num('CLOSED_SECONDS', 10),
    joinParagraphs: num('JOIN_PARAGRAPHS', 10000),
    joins: num('JOINS', 20),
    coldJoins: num('COLD_JOINS', 5),
    coldSettleMs: num('COLD_SETTLE_MS', 12000),
    diskSyncs: num('DISK_SYNCS', 500),
    drainMs: num('DRAIN_MS', 5000),
    connectConcurrency: num('CONNECT_CONCURRENCY', 100),
    sourceAddrs: num('SOURCE_ADDRS', 16),
    maxConnections: num('MAX_CONNECTIONS', 20000),
    serverLog: get('SERVER_LOG', 'warn'),
    marginBin: path.resolve(get('MARGIN_BIN', path.join(repoRoot, 'target', 'release', 'margin'))),
    ysweetBin: path.resolve(get('YSWEET_BIN', path.join(peersRoot, 'bin', 'y-sweet'))),
    ysweetStore: get('YSWEET_STORE', 'memory'),
    runTimeoutMs: num('RUN_TIMEOUT_MS', 180000),
    json: get('JSON', null),
  };
  for (const s of cfg.servers) if (!ALL_SERVERS.includes(s)) throw new Error(`unknown server ${s} (one of ${ALL_SERVERS})`);
  for (const s of cfg.scenarios) {
    if (!/^(idle|many-docs|open-\d+|closed-\d+|join|cold-join)$/.test(s)) throw new Error(`unknown scenario ${s}`);
  }
  if (!['memory', 'dir'].includes(cfg.ysweetStore)) throw new Error('YSWEET_STORE must be memory or dir');
  return cfg;
}

// ---------------------------------------------------------------------------
// Helpers

function percentile(sorted, p) {
  if (!sorted.length) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

function sortedF64(arr) {
  return Float64Array.from(arr).sort();
}

const rssMiB = (pid) => procStats(pid).rss / 1024;

/** Opens `n` sockets with bounded concurrency; client i uses make(i). */
async function openMany(cfg, n, make) {
  const addrs = localAddresses(cfg.sourceAddrs);
  return pool(n, cfg.connectConcurrency, async (i) => {
    const c = make(i, addrs[i % addrs.length]);
    await c.connect();
    return c;
  });
}

/**
 * Delivery bookkeeping for `docs` documents with `edits` edits each (token
 * "[doc.seq@ms]") and `receivers` receivers each. Each (edit, receiver) pair
 * counts once; an edit is fanned out when all its receivers have it.
 */
class Deliveries {
  constructor(docs, edits, receivers, onFanned = null) {
    this.docs = docs;
    this.edits = edits;
    this.receivers = receivers;
    this.seen = new Uint8Array(docs * edits * receivers);
    this.count = new Uint16Array(docs * edits);
    this.lat = [];
    this.fanLat = [];
    this.delivered = 0;
    this.dups = 0;
    this.fanned = 0;
    this.lastFanned = 0;
    this.lastDelivery = 0;
    this.onFanned = onFanned;
    this.allDone = null;
    this.done = new Promise((r) => { this.allDone = r; });
  }

  get expected() { return this.docs * this.edits * this.receivers; }

  /** An update payload arrived at receiver `r` of document `doc` at `t`. */
  record(doc, r, payload, t) {
    const s = payload.latin1Slice(0, payload.length);
    TOKEN_RE.lastIndex = 0;
    let m;
    while ((m = TOKEN_RE.exec(s)) !== null) {
      const d = Number(m[1]);
      const seq = Number(m[2]);
      if (d !== doc || seq >= this.edits) continue;
      const e = d * this.edits + seq;
      const k = e * this.receivers + r;
      if (this.seen[k]) { this.dups++; continue; }
      this.seen[k] = 1;
      this.delivered++;
      const lat = t - Number(m[3]);
      this.lat.push(lat);
      if (t > this.lastDelivery) this.lastDelivery = t;
      if (++this.count[e] === this.receivers) {
        this.fanned++;
        this.fanLat.push(lat); // this receiver was the last one
        this.lastFanned = t;
        if (this.onFanned) this.onFanned();
        if (this.fanned === this.docs * this.edits) this.allDone();
      }
    }
  }

  /** Resolves when all expected deliveries arrived or after `ms`. */
  async wait(ms) {
    let timer;
    await Promise.race([this.done, new Promise((r) => { timer = setTimeout(r, ms); })]);
    clearTimeout(timer);
  }

  summary() {
    const lat = sortedF64(this.lat);
    const fan = sortedF64(this.fanLat);
    return {
      expected: this.expected,
      delivered: this.delivered,
      missing: this.expected - this.delivered,
      dups: this.dups,
      latP50: percentile(lat, 50),
      latP99: percentile(lat, 99),
      latMax: lat.length ? lat[lat.length - 1] : NaN,
      fanP50: percentile(fan, 50),
      fanP99: percentile(fan, 99),
    };
  }
}

function token(doc, seq) {
  return `[${doc}.${seq}@${performance.now().toFixed(3)}]`;
}

function closeAll(clients) {
  for (const c of clients) if (c) c.close();
}

/** Close codes of the clients the server closed during the run, counted. */
function closesOf(clients) {
  const out = {};
  for (const c of clients) {
    const raw = c.client ?? c;
    if (raw.closed) out[raw.closeCode] = (out[raw.closeCode] ?? 0) + 1;
  }
  return out;
}

/** Receivers for `endpoint`, document index `doc`, feeding `del`. */
function receiversFor(cfg, endpoint, doc, n, del, offset = 0) {
  const out = [];
  for (let r = 0; r < n; r++) {
    out.push(new RawClient(endpoint, {
      onUpdate: (payload, t) => del.record(doc, r, payload, t),
      localAddress: localAddresses(cfg.sourceAddrs)[(offset + r) % cfg.sourceAddrs],
    }));
  }
  return out;
}

async function connectAll(cfg, clients) {
  await pool(clients.length, cfg.connectConcurrency, (i) => clients[i].connect());
}

// ---------------------------------------------------------------------------
// Scenarios: each gets a fresh server and returns its figures.

async function idle(cfg, server) {
  const docs = await server.docs(cfg.idleDocs);
  await sleep(500);
  const before = rssMiB(server.pid);
  const t0 = performance.now();
  const clients = await openMany(cfg, cfg.idleConns, (i, addr) => new RawClient(docs[i % docs.length], { localAddress: addr }));
  const connectSec = (performance.now() - t0) / 1000;
  await sleep(cfg.settleMs);
  const after = rssMiB(server.pid);
  const open = clients.filter((c) => !c.closed).length;
  const closes = closesOf(clients);
  closeAll(clients);
  return {
    conns: cfg.idleConns,
    open,
    closes,
    rssBeforeMiB: before,
    rssAfterMiB: after,
    kibPerConn: ((after - before) * 1024) / cfg.idleConns,
    connectPerSec: cfg.idleConns / connectSec,
  };
}

async function manyDocs(cfg, server) {
  const D = cfg.manyDocs;
  const R = cfg.manyReceivers;
  const E = cfg.manySeconds;
  const docs = await server.docs(D);
  const del = new Deliveries(D, E, R);
  const addrs = localAddresses(cfg.sourceAddrs);
  const writers = docs.map((ep, d) => new Writer(ep, { localAddress: addrs[d % addrs.length] }));
  const receivers = [];
  try {
    await pool(D, cfg.connectConcurrency, (d) => writers[d].connect(`doc ${d}`));
    docs.forEach((ep, d) => receivers.push(...receiversFor(cfg, ep, d, R, del, d * R)));
    await connectAll(cfg, receivers);
    await sleep(1000);
    const rssConnected = rssMiB(server.pid);
    const meter = loadMeter(server.pid);
    const t0 = performance.now();
    const total = D * E;
    let sent = 0;
    // Edit k goes to document k % D at t0 + k * (1000 / D) ms: each document
    // once a second, the documents spread over the second.
    await new Promise((resolve) => {
      const tick = () => {
        const due = Math.min(total, Math.floor(((performance.now() - t0) * D) / 1000) + 1);
        while (sent < due) {
          const d = sent % D;
          const seq = Math.floor(sent / D);
          writers[d].append(token(d, seq));
          sent++;
        }
        if (sent >= total) return resolve();
        setTimeout(tick, Math.max(0, (sent * 1000) / D - (performance.now() - t0)));
      };
      tick();
    });
    await del.wait(cfg.drainMs);
    const load = meter.stop();
    const rssEnd = rssMiB(server.pid);
    return {
      docs: D, receiversPerDoc: R, edits: total,
      closes: closesOf([...receivers, ...writers]),
      rssConnectedMiB: rssConnected, rssEndMiB: rssEnd,
      ...del.summary(),
      serverCpuSec: load.serverCpuSec,
      serverCpuPct: load.serverCpuPct,
      _load: load,
    };
  } finally {
    closeAll(receivers);
    for (const w of writers) w.close();
  }
}

/** One document, a writer and cfg.receivers receivers, connected. */
async function oneDoc(cfg, server, edits, onFanned) {
  const [ep] = await server.docs(1);
  const del = new Deliveries(1, edits, cfg.receivers, onFanned);
  const writer = new Writer(ep, { localAddress: '127.0.0.1' });
  await writer.connect('writer 0');
  const receivers = receiversFor(cfg, ep, 0, cfg.receivers, del, 1);
  await connectAll(cfg, receivers);
  await sleep(500);
  return { del, writer, receivers };
}

async function openLoop(cfg, server, rate) {
  const N = Math.round(rate * cfg.openSeconds);
  const { del, writer, receivers } = await oneDoc(cfg, server, N);
  try {
    const meter = loadMeter(server.pid);
    const t0 = performance.now();
    let sent = 0;
    await new Promise((resolve) => {
      const tick = () => {
        const due = Math.min(N, Math.floor(((performance.now() - t0) * rate) / 1000) + 1);
        while (sent < due) { writer.append(token(0, sent)); sent++; }
        if (sent >= N) return resolve();
        setTimeout(tick, Math.max(0, (sent * 1000) / rate - (performance.now() - t0)));
      };
      tick();
    });
    const sendSec = (performance.now() - t0) / 1000;
    await del.wait(cfg.drainMs);
    const load = meter.stop();
    const s = del.summary();
    return {
      rate, edits: N, receivers: cfg.receivers,
      closes: closesOf([...receivers, writer]),
      sentPerSec: N / sendSec,
      ...s,
      serverCpuSec: load.serverCpuSec,
      cpuUsPerDelivery: (1e6 * load.serverCpuSec) / s.delivered,
      _load: load,
    };
  } finally {
    closeAll(receivers);
    writer.close();
  }
}

async function closedLoop(cfg, server, window) {
  const N = cfg.closedEdits;
  let sent = 0;
  let writer = null;
  let stopped = false;
  const pump = () => {
    if (stopped) return;
    while (sent < N && sent - del.fanned < window) { writer.append(token(0, sent)); sent++; }
  };
  const ctx = await oneDoc(cfg, server, N, () => pump());
  const { del, receivers } = ctx;
  writer = ctx.writer;
  try {
    const meter = loadMeter(server.pid);
    const t0 = performance.now();
    pump();
    await del.wait(cfg.closedSeconds * 1000);
    stopped = true;
    const load = meter.stop();
    const s = del.summary();
    return {
      window, edits: N, receivers: cfg.receivers, sent,
      closes: closesOf([...receivers, writer]),
      fanned: del.fanned,
      fannedPerSec: del.fanned / ((del.lastFanned - t0) / 1000),
      deliveriesPerSec: del.delivered / ((del.lastDelivery - t0) / 1000),
      completed: del.fanned === N,
      ...s,
      // Of the edits sent before the time ran out (not of CLOSED_EDITS).
      missing: sent * cfg.receivers - s.delivered,
      serverCpuSec: load.serverCpuSec,
      cpuUsPerDelivery: (1e6 * load.serverCpuSec) / s.delivered,
      _load: load,
    };
  } finally {
    stopped = true;
    closeAll(receivers);
    writer.close();
  }
}

const SENTINEL = 'ENDOFPRELOAD';

/**
 * Loads one document of JOIN_PARAGRAPHS paragraphs of ~80 characters, 200
 * per transaction (one update each), then a sentinel paragraph, through a
 * writer that stays connected; resolves once a probe join sees the sentinel.
 */
async function preload(cfg, ep) {
  const writer = new Writer(ep, { localAddress: '127.0.0.1' });
  await writer.connect('writer 0');
  try {
    const frag = writer.doc.getXmlFragment('prosemirror');
    const chunk = 200;
    for (let i = 0; i < cfg.joinParagraphs; i += chunk) {
      writer.doc.transact(() => {
        const paras = [];
        for (let j = i; j < Math.min(cfg.joinParagraphs, i + chunk); j++) {
          const p = new Y.XmlElement('paragraph');
          p.insert(0, [new Y.XmlText(`Paragraph ${String(j).padStart(5, '0')}: the plan says what happens next, who does it, and by when.`)]);
          paras.push(p);
        }
        frag.push(paras);
      });
      // Let the socket drain between chunks.
      while (writer.client.ws.bufferedAmount > 1 << 20) await sleep(5);
      await sleep(1);
    }
    const last = new Y.XmlElement('paragraph');
    last.insert(0, [new Y.XmlText(SENTINEL)]);
    frag.push([last]);
    const docBytes = Y.encodeStateAsUpdate(writer.doc).length;
    const deadline = performance.now() + 60000;
    for (;;) {
      const probe = await joinOnce(ep, '127.0.0.1');
      if (probe.full) return { writer, docBytes, step2Bytes: probe.bytes };
      if (performance.now() > deadline) throw new Error('server never had the whole pre-loaded document');
      await sleep(200);
    }
  } catch (e) {
    writer.close();
    throw e;
  }
}

/** One fresh join: connect, step 1, the whole step 2; its times in ms. */
async function joinOnce(ep, localAddress) {
  let full = false;
  let bytes = 0;
  let step2 = NaN;
  const t0 = performance.now();
  const c = new RawClient(ep, {
    localAddress,
    onStep2: (p, t) => { full = p.includes(SENTINEL); bytes = p.length; step2 = t - c.step1At; },
  });
  await c.connect(60000);
  const ms = performance.now() - t0;
  c.close();
  return { full, bytes, ms, step2 };
}

function joinFigures(joins) {
  const ms = sortedF64(joins.map((j) => j.ms));
  const step2 = sortedF64(joins.map((j) => j.step2));
  return {
    joins: joins.length,
    incomplete: joins.filter((j) => !j.full).length,
    joinP50: percentile(ms, 50),
    joinP99: percentile(ms, 99),
    joinMax: ms[ms.length - 1],
    step2P50: percentile(step2, 50),
  };
}

async function join(cfg, server) {
  const [ep] = await server.docs(1);
  const { writer, docBytes, step2Bytes } = await preload(cfg, ep);
  try {
    await sleep(1000);
    const rssLoaded = rssMiB(server.pid);
    const meter = loadMeter(server.pid);
    const joins = [];
    for (let j = 0; j < cfg.joins; j++) {
      joins.push(await joinOnce(ep, '127.0.0.2'));
      await sleep(50);
    }
    return { paragraphs: cfg.joinParagraphs, docBytes, step2Bytes, rssLoadedMiB: rssLoaded, ...joinFigures(joins), _load: meter.stop() };
  } finally {
    writer.close();
  }
}

// The same document joined by the first client after the server started
// again from what it stored: nothing loaded. The writer leaves, then
// COLD_SETTLE_MS passes for every server alike (y-sweet writes its store
// in the background every 10 s; Margin has committed every edit already).
async function coldJoin(cfg, server) {
  const [ep] = await server.docs(1);
  const { writer, step2Bytes } = await preload(cfg, ep);
  writer.close();
  await sleep(cfg.coldSettleMs);
  const joins = [];
  const loads = [];
  // The server's memory once the joined document is loaded from storage
  // (the `join` scenario's figure is of a document built by live edits).
  const rss = [];
  // The pages the server touched for the first time during the join (a
  // fresh process pays the kernel for each: much of a cold join).
  const faults = [];
  for (let j = 0; j < cfg.coldJoins; j++) {
    await server.restart();
    await sleep(500);
    const meter = loadMeter(server.pid);
    const before = procStats(server.pid).minflt;
    joins.push(await joinOnce(ep, '127.0.0.2'));
    faults.push(procStats(server.pid).minflt - before);
    loads.push(meter.stop());
    rss.push(rssMiB(server.pid));
  }
  const f = joinFigures(joins);
  if (f.incomplete) throw new Error(`${f.incomplete} of ${f.joins} cold joins did not see the whole document`);
  const mean = (k) => loads.reduce((a, l) => a + l[k], 0) / loads.length;
  return {
    paragraphs: cfg.joinParagraphs, step2Bytes, ...f, rssLoadedMiB: median(rss), faultsP50: median(faults),
    _load: { otherCpuPct: mean('otherCpuPct'), harnessCpuPct: mean('harnessCpuPct'), serverCpuPct: mean('serverCpuPct') },
  };
}

// The disk the servers' data dirs are on: one 4 KiB write then
// `fdatasync`, DISK_SYNCS times, in the temp dir every server's store uses.
// Margin pays one such sync per batch of edits before it broadcasts them;
// issue 43's light-load target allows Margin y-sweet's latency plus it.
function diskProbe(cfg) {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'disk-probe-'));
  const fd = openSync(path.join(dir, 'probe'), 'w');
  const block = Buffer.alloc(4096, 7);
  const times = [];
  try {
    for (let i = 0; i < cfg.diskSyncs; i++) {
      writeSync(fd, block, 0, block.length, i * block.length);
      const t0 = performance.now();
      fdatasyncSync(fd);
      times.push(performance.now() - t0);
    }
  } finally {
    closeSync(fd);
    rmSync(dir, { recursive: true, force: true });
  }
  const sorted = sortedF64(times);
  return { syncs: cfg.diskSyncs, fdatasyncP50: percentile(sorted, 50), fdatasyncP99: percentile(sorted, 99) };
}

function runScenario(cfg, server, scenario) {
  if (scenario === 'idle') return idle(cfg, server);
  if (scenario === 'many-docs') return manyDocs(cfg, server);
  if (scenario === 'join') return join(cfg, server);
  if (scenario === 'cold-join') return coldJoin(cfg, server);
  const [kind, n] = scenario.split('-');
  if (kind === 'open') return openLoop(cfg, server, Number(n));
  return closedLoop(cfg, server, Number(n));
}

// ---------------------------------------------------------------------------

/** The machine a run measured on. */
function machine() {
  return { cpus: os.cpus().length, model: os.cpus()[0]?.model, node: process.version, kernel: os.release(), loadavg: os.loadavg() };
}

/** The Margin binary a run measured, and the checkout it was run from. */
function build(cfg) {
  const git = (args) => {
    try { return execSync(`git ${args}`, { cwd: repoRoot }).toString().trim(); } catch { return null; }
  };
  let binary = null;
  try {
    const st = statSync(cfg.marginBin);
    binary = { path: cfg.marginBin, bytes: st.size, builtAt: st.mtime.toISOString() };
  } catch { /* not there: margin was not run */ }
  const changed = git('status --porcelain --untracked-files=no');
  return { checkout: git('rev-parse --short HEAD'), changedTrackedFiles: changed === null ? null : changed.split('\n').filter(Boolean).length, binary };
}

async function main() {
  const cfg = config();
  let nofile = NaN;
  try { nofile = Number(execSync('ulimit -n', { shell: '/bin/bash' }).toString().trim()); } catch { /* unknown */ }
  const need = 2 * Math.max(cfg.idleConns, cfg.manyDocs * (1 + cfg.manyReceivers)) + 1000;
  if (nofile < need) {
    console.error(`warning: open-file limit is ${nofile}; the largest scenario needs about ${need} (harness and server each hold one fd per connection). Raise it with \`ulimit -n ${need}\`.`);
  }
  const servers = [];
  for (const s of cfg.servers) {
    const why = installed(s, cfg);
    if (why) console.log(`skipping ${s}: ${why}`);
    else servers.push(s);
  }
  if (!servers.length) { console.error('no server to run'); process.exit(1); }
  const runs = cfg.repeat * cfg.scenarios.length * servers.length;
  const hard = setTimeout(() => { console.error('peers: global hard timeout; exiting'); process.exit(2); }, runs * (cfg.runTimeoutMs + 20000));
  hard.unref();
  console.log(`# peer bench: servers ${servers.join(', ')}; scenarios ${cfg.scenarios.join(', ')}; REPEAT=${cfg.repeat}; ` +
    `${os.cpus().length} CPUs (${os.cpus()[0]?.model}), node ${process.version}, nofile ${nofile}; y-sweet store: ${cfg.ysweetStore}`);
  const results = [];
  const startedAt = new Date().toISOString();
  const tStart = performance.now();
  const disk = [];
  for (let rep = 0; rep < cfg.repeat; rep++) {
    disk.push({ rep: rep + 1, ...diskProbe(cfg) });
    console.log(`disk, repetition ${rep + 1}: fdatasync p50 ${fmt.f2(disk[rep].fdatasyncP50)} ms, p99 ${fmt.f2(disk[rep].fdatasyncP99)} ms`);
    for (const scenario of cfg.scenarios) {
      // Interleaved: every server once per (repetition, scenario), the order
      // reversed on odd repetitions.
      const order = rep % 2 === 0 ? servers : [...servers].reverse();
      for (const name of order) {
        // A cold join needs a server that stores documents: y-sweet gets
        // its directory store; npm and Hocuspocus, in memory, have none.
        if (scenario === 'cold-join' && (name === 'npm' || name === 'hocuspocus')) continue;
        const serverCfg = scenario === 'cold-join' && name === 'ysweet' ? { ...cfg, ysweetStore: 'dir' } : cfg;
        process.stdout.write(`run ${rep + 1}/${cfg.repeat} ${scenario} ${name} ... `);
        let server = null;
        let timer;
        const t0 = performance.now();
        let r;
        try {
          server = await startServer(name, serverCfg);
          const meter = loadMeter(server.pid);
          const res = await Promise.race([
            runScenario(cfg, server, scenario),
            new Promise((_, rej) => { timer = setTimeout(() => rej(new Error(`run exceeded RUN_TIMEOUT_MS=${cfg.runTimeoutMs}`)), cfg.runTimeoutMs); }),
          ]);
          // The load over the measured phase where the scenario has one,
          // else over the whole run.
          const load = res._load ?? meter.stop();
          delete res._load;
          r = {
            server: name, scenario, rep: rep + 1, ...res,
            otherCpuPct: load.otherCpuPct, harnessCpuPct: load.harnessCpuPct,
            serverCpuPctMeasured: load.serverCpuPct, wallSec: (performance.now() - t0) / 1000,
            serverWarnings: (server.log.text.match(/\b(WARN|ERROR)\b/g) ?? []).length,
          };
          const [first] = metricsFor(scenario);
          console.log(`${first[1]} ${fmt[first[3]](r[first[0]])}` +
            (r.missing ? `, missing ${r.missing}` : '') +
            (r.closes && Object.keys(r.closes).length ? `, closed by server ${JSON.stringify(r.closes)}` : '') +
            `, other CPU ${fmt.f0(r.otherCpuPct)}%, harness ${fmt.f0(r.harnessCpuPct)}%, ${fmt.f1(r.wallSec)} s`);
        } catch (e) {
          console.log(`FAILED: ${e.message ?? e}`);
          if (server?.log?.text) console.log(`  server output tail:\n    ${server.log.text.split('\n').slice(-8).join('\n    ')}`);
          r = { server: name, scenario, rep: rep + 1, failed: String(e.message ?? e) };
        } finally {
          clearTimeout(timer);
          if (server) await server.stop().catch(() => {});
        }
        results.push(r);
        await sleep(300);
      }
    }
  }
  console.log(`\nMedians of ${cfg.repeat} repetition(s); total ${fmt.f0((performance.now() - tStart) / 1000)} s. ` +
    `Margin: SQLite, each batch committed before broadcast; npm, hocuspocus: in memory; ysweet: ${cfg.ysweetStore === 'dir' ? 'temp dir store, background checkpoints' : 'in memory'}.\n`);
  console.log(table(cfg, results, servers));
  console.log(`\n${targets({ cfg, disk }, results)}`);
  for (const r of results) if (r.failed) console.log(`FAILED rep ${r.rep} ${r.scenario} ${r.server}: ${r.failed}`);
  if (cfg.json) {
    // JSON lines: what ran where first, then every run as it was measured;
    // headline.mjs renders docs/performance.md's table from such a file.
    const head = { kind: 'run', startedAt, seconds: (performance.now() - tStart) / 1000, machine: machine(), build: build(cfg), cfg, disk };
    const lines = [head, ...results.map((r) => ({ kind: 'result', ...r }))].map((x) => JSON.stringify(x));
    await writeFile(cfg.json, lines.join('\n') + '\n');
    console.log(`\nwrote ${cfg.json}`);
  }
  clearTimeout(hard);
  process.exit(results.some((r) => r.failed) ? 1 : 0);
}

await main();
