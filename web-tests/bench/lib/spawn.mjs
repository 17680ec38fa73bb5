// Starting and stopping the servers a bench measures, on loopback only:
// what both benches (fanout.mjs, peers.mjs) share.

import { spawn, execFile } from 'node:child_process';
import net from 'node:net';

export function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

export function run(bin, args, env = {}) {
  return new Promise((resolve, reject) => {
    execFile(bin, args, { timeout: 30000, env: { ...process.env, ...env } }, (err, stdout, stderr) => {
      if (err) reject(new Error(`${bin} ${args.join(' ')}: ${err.message}\n${stderr}`));
      else resolve(stdout);
    });
  });
}

/**
 * Spawns a server; `matched` resolves once its output matches `ready`.
 * `env` is added to this process's (a value of undefined removes one).
 */
export function spawnUntil(bin, args, env, ready, what, timeoutMs = 20000) {
  // An env value of undefined removes that variable.
  const full = { ...process.env, ...env };
  for (const k of Object.keys(full)) if (full[k] === undefined) delete full[k];
  const child = spawn(bin, args, { stdio: ['ignore', 'pipe', 'pipe'], env: full });
  // The server's WARN and ERROR lines are counted: a run that logged any
  // says so beside its figures.
  const log = { text: '', warn: 0, error: 0 };
  const matched = new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${what} not ready after ${timeoutMs} ms:\n${log.text}`)), timeoutMs);
    const onData = (d) => {
      log.text += d;
      log.warn += (d.match(/\bWARN\b/g) ?? []).length;
      log.error += (d.match(/\bERROR\b/g) ?? []).length;
      if (log.text.length > 65536) log.text = log.text.slice(-65536);
      const m = log.text.match(ready);
      if (m) { clearTimeout(timer); resolve(m); }
    };
    child.stdout.setEncoding('utf8');
    child.stderr.setEncoding('utf8');
    child.stdout.on('data', onData);
    child.stderr.on('data', onData);
    child.on('exit', (code, sig) => {
      clearTimeout(timer);
      reject(new Error(`${what} exited (${code ?? sig}) before it was ready:\n${log.text}`));
    });
  });
  return { child, log, matched };
}

export function stopChild(child) {
  return new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) return resolve();
    const t = setTimeout(() => child.kill('SIGKILL'), 5000);
    child.once('exit', () => { clearTimeout(t); resolve(); });
    child.kill('SIGTERM');
  });
}
