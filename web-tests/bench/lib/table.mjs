// The peers bench's table: which metrics each scenario reports, how each is
// written, and the Markdown table of the medians of a run's repetitions,
// with "Margin ÷ best peer". Shared by peers.mjs, which prints it after a
// run, and headline.mjs, which renders docs/performance.md's headline from
// a committed results file, so the two can never read a run differently.

export function median(xs) {
  const v = xs.filter(Number.isFinite).sort((a, b) => a - b);
  if (!v.length) return NaN;
  const m = v.length >> 1;
  return v.length % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

export const fmt = {
  f0: (x) => (Number.isFinite(x) ? Math.round(x).toLocaleString('en-US') : '—'),
  f1: (x) => (Number.isFinite(x) ? x.toFixed(1) : '—'),
  f2: (x) => (Number.isFinite(x) ? x.toFixed(2) : '—'),
};

// Per scenario kind: [key, label, 'lower'|'higher' is better, format].
export const METRICS = {
  idle: [
    ['kibPerConn', 'KiB per idle connection', 'lower', 'f1'],
    ['rssAfterMiB', 'RSS with all connected, MiB', 'lower', 'f1'],
    ['rssBeforeMiB', 'RSS before connecting, MiB', 'lower', 'f1'],
  ],
  'many-docs': [
    ['rssConnectedMiB', 'RSS while connected, MiB', 'lower', 'f1'],
    ['latP50', 'latency p50, ms', 'lower', 'f2'],
    ['latP99', 'latency p99, ms', 'lower', 'f2'],
    ['latMax', 'latency max, ms', 'lower', 'f1'],
    ['serverCpuSec', 'server CPU for the run, s', 'lower', 'f2'],
    ['missing', 'deliveries missing', 'lower', 'f0'],
  ],
  open: [
    ['cpuUsPerDelivery', 'server CPU µs per delivery', 'lower', 'f2'],
    ['latP50', 'latency p50, ms', 'lower', 'f2'],
    ['latP99', 'latency p99, ms', 'lower', 'f2'],
    ['missing', 'deliveries missing', 'lower', 'f0'],
  ],
  closed: [
    ['fannedPerSec', 'edits/s fanned out to all', 'higher', 'f0'],
    ['cpuUsPerDelivery', 'server CPU µs per delivery', 'lower', 'f2'],
  ],
  join: [
    ['joinP50', 'join p50, ms', 'lower', 'f1'],
    ['joinP99', 'join p99, ms', 'lower', 'f1'],
    ['step2P50', 'step 2 after step 1 p50, ms', 'lower', 'f1'],
    ['rssLoadedMiB', 'RSS with the document loaded, MiB', 'lower', 'f1'],
    ['step2Bytes', 'step 2 bytes', 'lower', 'f0'],
  ],
  'cold-join': [
    ['joinP50', 'join p50 after a restart, ms', 'lower', 'f1'],
    ['step2P50', 'step 2 after step 1 p50, ms', 'lower', 'f1'],
    ['rssLoadedMiB', 'RSS after the cold join, MiB', 'lower', 'f1'],
    ['faultsP50', 'minor page faults during the join p50', 'lower', 'f0'],
  ],
};

export function metricsFor(scenario) {
  return METRICS[scenario] ?? METRICS[scenario.split('-')[0]];
}

export function table(cfg, results, servers) {
  const lines = [];
  const peers = servers.filter((s) => s !== 'margin');
  const withRatio = servers.includes('margin') && peers.length > 0;
  lines.push(`| scenario | metric | ${servers.join(' | ')} |${withRatio ? ' Margin ÷ best peer |' : ''}`);
  lines.push(`|---|---|${servers.map(() => '---|').join('')}${withRatio ? '---|' : ''}`);
  for (const scenario of cfg.scenarios) {
    const ok = (s) => results.filter((r) => r.scenario === scenario && r.server === s && !r.failed);
    const rows = [...metricsFor(scenario), ['otherCpuPct', 'load: other CPU % of a core', null, 'f0'], ['harnessCpuPct', 'harness CPU % of a core', null, 'f0']];
    const ran = results.filter((r) => r.scenario === scenario && !r.failed);
    for (const [key, label, better, f] of rows) {
      // A figure added to the bench after a run was made: that run shows
      // no row for it rather than an empty one.
      if (ran.length && !ran.some((r) => r[key] !== undefined)) continue;
      const med = {};
      for (const s of servers) {
        const rs = ok(s);
        med[s] = rs.length ? median(rs.map((r) => r[key])) : NaN;
      }
      let ratio = '';
      if (withRatio) {
        const pv = peers.map((s) => med[s]).filter(Number.isFinite);
        if (better && pv.length && Number.isFinite(med.margin)) {
          const best = better === 'lower' ? Math.min(...pv) : Math.max(...pv);
          const bestName = peers.find((s) => med[s] === best);
          ratio = best === 0 ? (med.margin === 0 ? '1.00' : '∞') : `${(med.margin / best).toFixed(2)} (${bestName})`;
        }
        ratio = ` ${ratio || '—'} |`;
      }
      const cells = servers.map((s) => {
        const n = ok(s).length;
        const failed = results.filter((r) => r.scenario === scenario && r.server === s && r.failed).length;
        if (!n) return failed ? 'failed' : 'skipped';
        return fmt[f](med[s]);
      });
      lines.push(`| ${scenario} | ${label}${better ? ` (${better} is better)` : ''} | ${cells.join(' | ')} |${ratio}`);
    }
  }
  return lines.join('\n');
}


/**
 * Issue 43's light-load and big-document targets read off a run: each
 * Margin median against y-sweet's, the light-load latencies allowing the
 * disk's `fdatasync` measured in the same run (medians of its repetitions).
 */
export function targets({ cfg, disk }, results) {
  const med = (scenario, server, key) => median(results
    .filter((r) => r.scenario === scenario && r.server === server && !r.failed)
    .map((r) => r[key]));
  const sync50 = median((disk ?? []).map((d) => d.fdatasyncP50));
  const sync99 = median((disk ?? []).map((d) => d.fdatasyncP99));
  const rows = [];
  const row = (scenario, key, label, slack = 0, slackLabel = '') => {
    if (!cfg.scenarios.includes(scenario)) return;
    const margin = med(scenario, 'margin', key);
    const ysweet = med(scenario, 'ysweet', key);
    const allowed = ysweet + slack;
    const met = Number.isFinite(margin) && Number.isFinite(allowed) ? (margin <= allowed ? '✓' : '✗') : '—';
    const bound = slackLabel ? `${fmt.f2(ysweet)} + ${fmt.f2(slack)} ${slackLabel} = ${fmt.f2(allowed)}` : fmt.f2(allowed);
    rows.push(`| ${scenario} | ${label} | ${fmt.f2(margin)} | ${fmt.f2(ysweet)} | ≤ ${bound} | ${met} |`);
  };
  for (const scenario of cfg.scenarios.filter((s) => /^open-\d+$/.test(s))) {
    row(scenario, 'cpuUsPerDelivery', 'server CPU µs per delivery');
    row(scenario, 'latP50', 'latency p50, ms', sync50, 'fdatasync p50');
    row(scenario, 'latP99', 'latency p99, ms', sync99, 'fdatasync p99');
  }
  row('join', 'joinP50', 'join p50, ms');
  row('join', 'step2P50', 'step 2 after step 1 p50, ms');
  row('join', 'rssLoadedMiB', 'RSS with the document loaded, MiB');
  row('cold-join', 'joinP50', 'join p50 after a restart, ms');
  return [
    `The disk in this run: 4 KiB write + \`fdatasync\` p50 ${fmt.f2(sync50)} ms, p99 ${fmt.f2(sync99)} ms (medians of ${(disk ?? []).length} repetitions).`,
    '',
    '| scenario | target (issue 43) | margin | ysweet | allowed | met |',
    '|---|---|---|---|---|---|',
    ...rows,
  ].join('\n');
}
