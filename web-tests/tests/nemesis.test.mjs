// The cluster nemesis, short form (SPEC C3, C5): one trial of each fault —
// kill -9 and restart, SIGSTOP past the lease, cut off from PostgreSQL, cut
// off from the other nodes, a graceful restart — against three nodes with
// y-websocket editors and the TypeScript SDK's steady Planner writing
// through a balancer; nothing acknowledged lost or doubled, no editor
// stranded, every editor agreeing soon after each heal, and everything
// still there after every node is killed and restarted (what a trial does
// and checks: ../lib/nemesis.mjs; the long run: bench/nemesis.mjs).
// Needs PostgreSQL (TEST_DATABASE_URL) and psql; skipped without them.

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { test } from 'node:test';
import { FAULTS, Nemesis } from '../lib/nemesis.mjs';

const BASE = process.env.TEST_DATABASE_URL;
const PSQL = spawnSync('psql', ['--version']).status === 0;
const SKIP = !BASE ? 'TEST_DATABASE_URL is not set' : !PSQL ? 'psql (PostgreSQL client) is not installed' : false;

test('a cluster under one fault of each kind loses, doubles and strands nothing', { timeout: 300000, skip: SKIP }, async () => {
  const lines = [];
  const nemesis = await Nemesis.start({ base: BASE, log: (line) => lines.push(line) });
  let tally;
  try {
    tally = await nemesis.run(FAULTS.length);
    const { lost, twice, stranded, diverged, problems } = tally;
    assert.deepEqual({ lost, twice, stranded, diverged, problems }, { lost: 0, twice: 0, stranded: 0, diverged: 0, problems: [] });
    assert.deepEqual(tally.faults, Object.fromEntries(FAULTS.map((f) => [f, 1])));
    assert.ok(tally.acked > 0, 'editors acknowledged edits');
    assert.equal(tally.replies, tally.turns, 'every @planner message answered once');
  } catch (e) {
    process.stderr.write(`${lines.join('\n')}\n${nemesis.logs.slice(-40000)}\n`);
    throw e;
  } finally {
    await nemesis.stop();
  }
});
