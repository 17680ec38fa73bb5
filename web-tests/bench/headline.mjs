// Renders the headline table of docs/performance.md from the newest peers
// results file in server/benches/results (`*-peers.jsonl`, written by
// `JSON=… node peers.mjs`), between its `<!-- headline:begin -->` and
// `<!-- headline:end -->` markers, so every figure in it comes from one
// committed run.
//
//   node headline.mjs          rewrite the table in docs/performance.md
//   node headline.mjs --check  exit 1 if the table and the file disagree

import { readFileSync, readdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { table, targets } from './lib/table.mjs';

const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const RESULTS = path.join(repo, 'server', 'benches', 'results');
const DOC = path.join(repo, 'docs', 'performance.md');
const BEGIN = '<!-- headline:begin -->';
const END = '<!-- headline:end -->';

/** The newest `*-peers.jsonl` in the results folder (names start with the date). */
export function newestRun() {
  const files = readdirSync(RESULTS).filter((f) => f.endsWith('-peers.jsonl')).sort();
  if (!files.length) throw new Error(`no *-peers.jsonl in ${RESULTS}`);
  const file = files[files.length - 1];
  const lines = readFileSync(path.join(RESULTS, file), 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l));
  const head = lines.find((l) => l.kind === 'run');
  if (!head) throw new Error(`${file} has no "run" line`);
  const results = lines.filter((l) => l.kind === 'result');
  return { file, head, results };
}

/** The block between the markers, as `run` (the newest, by default) renders it. */
export function render(run = newestRun()) {
  const { file, head, results } = run;
  const servers = head.cfg.servers.filter((s) => results.some((r) => r.server === s));
  const built = head.build?.binary?.builtAt ?? 'unknown';
  return [
    BEGIN,
    `Rendered by \`node web-tests/bench/headline.mjs\` from [${file}](../server/benches/results/${file}): ` +
      `the checkout ${head.build?.checkout ?? 'unknown'}, the binary built at ${built}, ` +
      `${head.machine.cpus} CPUs (${head.machine.model}), medians of ${head.cfg.repeat} repetitions, ` +
      `started ${head.startedAt}, ${Math.round(head.seconds)} s.`,
    '',
    table(head.cfg, results, servers),
    '',
    targets(head, results),
    END,
  ].join('\n');
}

/** docs/performance.md's block between the markers. */
export function published() {
  const doc = readFileSync(DOC, 'utf8');
  const from = doc.indexOf(BEGIN);
  const to = doc.indexOf(END);
  if (from < 0 || to < from) throw new Error(`${DOC} has no ${BEGIN} … ${END} block`);
  return { doc, from, to: to + END.length, block: doc.slice(from, to + END.length) };
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const run = newestRun();
  const fresh = render(run);
  const { doc, from, to, block } = published();
  if (process.argv.includes('--check')) {
    if (block !== fresh) {
      console.error('docs/performance.md\'s headline differs from the newest results file; run `node web-tests/bench/headline.mjs`');
      process.exit(1);
    }
    console.log('headline matches', run.file);
  } else {
    writeFileSync(DOC, doc.slice(0, from) + fresh + doc.slice(to));
    console.log('rendered the headline from', run.file);
  }
}
