// Starts real `margin` servers for the web tests: a fresh temp data dir
// (SQLite), a free port, accounts made through the CLI, readiness by polling
// GET /healthz. The server's output is kept in a buffer and printed when a test
// that used it fails.

import { spawn, execFile } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { appendFileSync, existsSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { test } from 'node:test';

const here = path.dirname(fileURLToPath(import.meta.url));
export const repoRoot = path.resolve(here, '..', '..');

/**
 * Path of the margin binary: $MARGIN_BIN, else debug/margin under
 * $CARGO_TARGET_DIR (relative to the repository, where cargo was run), else
 * under the repository's target/.
 */
export function marginBin() {
  const fromEnv = process.env.MARGIN_BIN;
  const targetDir = process.env.CARGO_TARGET_DIR
    ? path.resolve(repoRoot, process.env.CARGO_TARGET_DIR)
    : path.join(repoRoot, 'target');
  const bin = fromEnv ? path.resolve(fromEnv) : path.join(targetDir, 'debug', 'margin');
  if (!existsSync(bin)) {
    throw new Error(
      `margin binary not found at ${bin}; build it with \`cargo build -p margin-server --bin margin\` or set MARGIN_BIN`,
    );
  }
  return bin;
}

export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Polls `fn` until it returns a truthy value (which is returned) or throws
 * after `timeoutMs`. Errors thrown by `fn` count as "not yet"; the last one is
 * reported on timeout; an error with `fatal: true` stops the wait at once.
 */
export async function waitFor(fn, timeoutMs = 5000, what = 'condition', intervalMs = 25) {
  const deadline = Date.now() + timeoutMs;
  let lastError;
  let lastValue;
  for (;;) {
    try {
      lastValue = await fn();
      if (lastValue) return lastValue;
    } catch (e) {
      if (e?.fatal) throw e;
      lastError = e;
    }
    if (Date.now() >= deadline) {
      const detail = lastError
        ? `; last error: ${lastError.message ?? lastError}`
        : `; last value: ${JSON.stringify(lastValue)}`;
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${detail}`);
    }
    await sleep(intervalMs);
  }
}

/** Rejects if `promise` does not settle within `timeoutMs`. */
export function withTimeout(promise, timeoutMs, what) {
  let timer;
  return Promise.race([
    promise,
    new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`timed out after ${timeoutMs} ms: ${what}`)), timeoutMs);
    }),
  ]).finally(() => clearTimeout(timer));
}

export async function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

function run(bin, args, timeoutMs = 30000) {
  return new Promise((resolve, reject) => {
    execFile(bin, args, { timeout: timeoutMs, maxBuffer: 4 << 20 }, (err, stdout, stderr) => {
      if (err) {
        reject(new Error(`\`margin ${args.join(' ')}\` failed: ${err.message}\nstdout:\n${stdout}\nstderr:\n${stderr}`));
      } else {
        resolve({ stdout, stderr });
      }
    });
  });
}

const LOG_LIMIT = 256 * 1024;

export class MarginServer {
  /**
   * `databaseUrl` runs it on PostgreSQL instead of the data dir's SQLite;
   * `serveArgs` are added to `margin serve` (e.g. `--cluster`).
   */
  constructor({ dataDir, port, databaseUrl = null, serveArgs = [] }) {
    this.bin = marginBin();
    this.dataDir = dataDir;
    this.dbArgs = databaseUrl ? ['--database-url', databaseUrl] : [];
    this.serveArgs = serveArgs;
    this.port = port;
    this.baseUrl = `http://127.0.0.1:${port}`;
    this.wsBase = `ws://127.0.0.1:${port}`;
    /** account name -> bearer token */
    this.tokens = {};
    this.child = null;
    this.exited = null;
    this.logText = '';
    this.generation = 0;
  }

  log(line) {
    // LOG_DIR keeps every line, for runs too long for the buffer.
    if (process.env.LOG_DIR) appendFileSync(path.join(process.env.LOG_DIR, `margin-${this.port}.log`), line);
    this.logText += line;
    if (this.logText.length > LOG_LIMIT) this.logText = this.logText.slice(-LOG_LIMIT);
  }

  /** All output the server (and the CLI) printed, for failure reports. */
  get logs() {
    return this.logText;
  }

  /** `margin account add NAME`; returns (and remembers) the token, the last stdout line. */
  async addAccount(name) {
    const { stdout, stderr } = await run(this.bin, ['account', 'add', name, '--data', this.dataDir, ...this.dbArgs]);
    this.log(`[cli account add ${name}] ${stderr}`);
    const token = lastLine(stdout);
    if (!token) throw new Error(`\`margin account add ${name}\` printed no token; stdout: ${JSON.stringify(stdout)}`);
    this.tokens[name] = token;
    return token;
  }

  /** `margin token add NAME`; returns the new token. */
  async addToken(name) {
    const { stdout, stderr } = await run(this.bin, ['token', 'add', name, '--data', this.dataDir, ...this.dbArgs]);
    this.log(`[cli token add ${name}] ${stderr}`);
    const token = lastLine(stdout);
    if (!token) throw new Error(`\`margin token add ${name}\` printed no token; stdout: ${JSON.stringify(stdout)}`);
    return token;
  }

  async start() {
    if (this.child) throw new Error('server already running');
    const gen = ++this.generation;
    this.log(`\n===== margin serve (start #${gen}) on ${this.baseUrl} =====\n`);
    const args = ['serve', '--data', this.dataDir, ...this.dbArgs, '--listen', `127.0.0.1:${this.port}`, ...this.serveArgs];
    const child = spawn(this.bin, args, {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, RUST_BACKTRACE: '1' },
    });
    this.child = child;
    child.stdout.setEncoding('utf8');
    child.stderr.setEncoding('utf8');
    child.stdout.on('data', (d) => this.log(d));
    child.stderr.on('data', (d) => this.log(d));
    this.exited = new Promise((resolve) => {
      child.on('exit', (code, signal) => {
        this.log(`===== margin serve #${gen} exited (code ${code}, signal ${signal}) =====\n`);
        if (this.child === child) this.child = null;
        resolve({ code, signal });
      });
    });
    let exitedEarly = null;
    this.exited.then((r) => {
      exitedEarly = r;
    });
    await waitFor(
      async () => {
        if (exitedEarly) {
          throw Object.assign(new Error(`server exited during startup: ${JSON.stringify(exitedEarly)}`), {
            fatal: true,
          });
        }
        const res = await fetch(`${this.baseUrl}/healthz`, { signal: AbortSignal.timeout(1000) });
        if (res.status !== 200) return false;
        const body = await res.json();
        return body?.status === 'ok';
      },
      20000,
      `GET ${this.baseUrl}/healthz to answer 200 {"status":"ok"}`,
      50,
    );
    return this;
  }

  async #signal(sig, timeoutMs) {
    const child = this.child;
    if (!child) return null;
    child.kill(sig);
    const result = await withTimeout(this.exited, timeoutMs, `margin serve to exit after ${sig}`).catch(async (e) => {
      child.kill('SIGKILL');
      await this.exited;
      throw e;
    });
    return result;
  }

  /** Graceful stop (SIGTERM); resolves with {code, signal}. Fails if the server needs > 10 s. */
  stop() {
    return this.#signal('SIGTERM', 10000);
  }

  /** Hard kill (SIGKILL), as in a crash. */
  kill() {
    return this.#signal('SIGKILL', 5000);
  }

  /** Stops (or kills) the server and starts it again on the same data dir and port. */
  async restart({ hard = false } = {}) {
    if (hard) await this.kill();
    else await this.stop();
    await this.start();
    return this;
  }

  /** Stops the server if running and deletes its data dir. */
  async cleanup() {
    if (this.child) await this.kill().catch(() => {});
    await rm(this.dataDir, { recursive: true, force: true });
  }

  /** JSON HTTP call; returns {status, body}. `token` may be an account name or a raw token. */
  async api(method, urlPath, { token, as, body } = {}) {
    const headers = {};
    const bearer = as ? this.tokens[as] : token;
    if (as && !bearer) throw new Error(`no token for account ${as}`);
    if (bearer) headers.Authorization = `Bearer ${bearer}`;
    if (body !== undefined) headers['Content-Type'] = 'application/json';
    const res = await fetch(`${this.baseUrl}${urlPath}`, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.timeout(10000),
    });
    const text = await res.text();
    let json = null;
    try {
      json = text ? JSON.parse(text) : null;
    } catch {
      json = { unparsed: text };
    }
    return { status: res.status, body: json };
  }

  /** POST /documents as `owner`; asserts 201 and returns the document. */
  async createDocument(owner, title) {
    const res = await this.api('POST', '/documents', { as: owner, body: { title } });
    if (res.status !== 201) throw new Error(`POST /documents as ${owner}: ${res.status} ${JSON.stringify(res.body)}`);
    return res.body;
  }

  /** POST /documents/{id}/members as `owner`; asserts a 2xx status. */
  async addMember(owner, docId, account, role) {
    const res = await this.api('POST', `/documents/${docId}/members`, { as: owner, body: { account, role } });
    if (res.status < 200 || res.status > 299) {
      throw new Error(`POST /documents/${docId}/members as ${owner}: ${res.status} ${JSON.stringify(res.body)}`);
    }
    return res.body;
  }

  /** GET /documents/{id}/outline as `as`; asserts 200. */
  async outline(as, docId) {
    const res = await this.api('GET', `/documents/${docId}/outline`, { as });
    if (res.status !== 200) throw new Error(`GET /documents/${docId}/outline: ${res.status} ${JSON.stringify(res.body)}`);
    return res.body;
  }
}

function lastLine(text) {
  const lines = text
    .split('\n')
    .map((l) => l.trim())
    .filter(Boolean);
  return lines[lines.length - 1];
}

/**
 * Starts a fresh server with the given accounts (created before it starts);
 * `serveArgs` are added to `margin serve` (e.g. `--demo-planner alice`).
 */
export async function startServer({ accounts = ['alice', 'bob'], serveArgs = [] } = {}) {
  const dataDir = await mkdtemp(path.join(os.tmpdir(), 'margin-web-test-'));
  const port = await freePort();
  const server = new MarginServer({ dataDir, port, serveArgs });
  try {
    for (const name of accounts) await server.addAccount(name);
    await server.start();
  } catch (e) {
    process.stderr.write(`\n----- margin output -----\n${server.logs}\n-------------------------\n`);
    await server.cleanup();
    throw e;
  }
  return server;
}

/**
 * Declares a test that gets its own fresh server; on failure the server's
 * output is printed, and the server and its data dir are always removed.
 * `cleanups` registered through `onCleanup` run (last first) before that.
 */
export function serverTest(name, { accounts, serveArgs, timeout = 60000 } = {}, fn) {
  test(name, { timeout }, async (t) => {
    const server = await startServer({ accounts, serveArgs });
    const cleanups = [];
    const onCleanup = (f) => cleanups.push(f);
    try {
      await fn({ server, t, onCleanup });
    } catch (e) {
      process.stderr.write(
        `\n----- margin output for failed test "${name}" -----\n${server.logs}\n----- end of margin output -----\n`,
      );
      throw e;
    } finally {
      for (const f of cleanups.reverse()) {
        await Promise.resolve()
          .then(f)
          .catch((e) => process.stderr.write(`cleanup failed: ${e?.stack ?? e}\n`));
      }
      await server.cleanup();
    }
  });
}
