// Runs one of the TypeScript SDK's example Planners as a person would, as a
// child process (`node dist/examples/NAME.js …`), or any other program a
// person starts (`margin planner acp …`), keeping its output for a failure
// report and killing it when the test ends.

import { execFile, spawn } from 'node:child_process';
import { promisify } from 'node:util';

/** Starts `script` with `args` (and `env` added, in folder `cwd`); `{ child, output, exited }`. */
export function startExample(script, args, onCleanup, env = {}, cwd = undefined) {
  return startProgram(process.execPath, [script, ...args], onCleanup, env, cwd);
}

/** Starts `program` with `args` as `startExample` starts a script. */
export function startProgram(program, args, onCleanup, env = {}, cwd = undefined) {
  const child = spawn(program, args, {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, ...env },
    cwd,
  });
  const example = { child, output: '' };
  for (const stream of [child.stdout, child.stderr]) stream.on('data', (d) => (example.output += d));
  example.exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
  onCleanup(async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    await example.exited;
  });
  return example;
}

/** Pairs a machine for `account` with `margin machine pair … --credential-file FILE`. */
export async function pairToFile(server, account, name, file) {
  return promisify(execFile)(server.bin, ['machine', 'pair', account, name, '--credential-file', file, '--data', server.dataDir], {
    timeout: 10000,
  });
}
