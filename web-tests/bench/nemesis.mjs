// The cluster nemesis, as a bounded run that prints its tally (SPEC C3, C5;
// what each trial does and checks: ../lib/nemesis.mjs). From web-tests/,
// after `npm ci` and `npm run pretest` (which builds the TypeScript SDK's
// steady Planner) and `cargo build -p margin-server --bin margin`:
//
//   TEST_DATABASE_URL=postgres://postgres@127.0.0.1:5432/test \
//   FAULTS=100 [SEED=1] [KINDS=kill,pause] [RESULTS=../server/benches/results/DATE-nemesis.jsonl] \
//     node bench/nemesis.mjs
//
// FAULTS trials, one fault each (kinds in random order, each as often);
// RESULTS appends one JSON line: the commit, the machine, the settings and
// the tally. Exits 1 when anything was lost, doubled, stranded or diverged
// (LOGS=FILE then keeps the nodes' and the Planner's output there; LOG_DIR=DIR
// keeps all of it as it comes, a file per node and one for the Planner).

import { execFileSync } from 'node:child_process';
import { appendFile, writeFile } from 'node:fs/promises';
import os from 'node:os';
import { FAULTS, LEASE_TTL_MS, Nemesis, RENEW_MS } from '../lib/nemesis.mjs';

const base = process.env.TEST_DATABASE_URL;
if (!base) {
  console.error('TEST_DATABASE_URL must name a PostgreSQL database (the nemesis runs a cluster)');
  process.exit(2);
}
const faults = Number(process.env.FAULTS ?? 10);
if (!Number.isInteger(faults) || faults < 1 || faults > 1000) {
  console.error(`FAULTS must be a whole number from 1 to 1000, not ${process.env.FAULTS}`);
  process.exit(2);
}
const seed = Number(process.env.SEED ?? Date.now() % 1_000_000);
// KINDS=kill,pause runs only those faults.
const kinds = process.env.KINDS?.split(',') ?? FAULTS;
const unknown = kinds.filter((k) => !FAULTS.includes(k));
if (unknown.length > 0) {
  console.error(`KINDS names faults there are not: ${unknown} (there are ${FAULTS})`);
  process.exit(2);
}
const started = Date.now();
const nemesis = await Nemesis.start({ base, seed, log: (line) => console.log(line) });
let tally;
try {
  tally = await nemesis.run(faults, kinds);
} catch (e) {
  console.error(nemesis.logs.slice(-20000));
  throw e;
} finally {
  await nemesis.stop();
}
const seconds = Math.round((Date.now() - started) / 1000);
console.log(`\n${faults} faults in ${seconds} s (seed ${seed}):`);
console.log(`  faults by kind: ${JSON.stringify(tally.faults)}`);
console.log(`  edits written ${tally.edits}, acknowledged ${tally.acked}, lost ${tally.lost}, twice ${tally.twice}`);
console.log(`  @planner turns ${tally.turns}, replies ${tally.replies} (${tally.interrupted} of them on an interrupted call), cards ${tally.cards}, answers ${tally.answers}`);
console.log(`  stranded ${tally.stranded} (worst probe wait ${tally.worstStrandedMs} ms), diverged ${tally.diverged} (worst convergence ${tally.worstConvergeMs} ms after a heal)`);
if (process.env.RESULTS) {
  const commit = execFileSync('git', ['rev-parse', 'HEAD'], { encoding: 'utf8' }).trim();
  const line = {
    date: new Date().toISOString(),
    commit,
    command: `FAULTS=${faults} SEED=${seed} node bench/nemesis.mjs`,
    machine: { cpus: os.cpus().length, memory_gib: Math.round(os.totalmem() / 2 ** 30), node: process.version },
    settings: { lease_ttl_ms: LEASE_TTL_MS, renew_ms: RENEW_MS, nodes: 3 },
    seconds,
    tally,
  };
  await appendFile(process.env.RESULTS, `${JSON.stringify(line)}\n`);
  console.log(`appended to ${process.env.RESULTS}`);
}
const bad = tally.lost + tally.twice + tally.stranded + tally.diverged;
if (bad > 0 && process.env.LOGS) {
  await writeFile(process.env.LOGS, nemesis.logs);
  console.log(`the nodes' and the Planner's output: ${process.env.LOGS}`);
}
process.exit(bad === 0 ? 0 : 1);
