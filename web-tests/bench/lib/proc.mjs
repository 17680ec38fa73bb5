// /proc readings for the peer benchmark: a process's CPU and RSS, and the
// whole machine's busy ticks, so a run can say how much else was running.
import { readFileSync } from 'node:fs';

const CLK_TCK = 100;

/** utime+stime (s), VmRSS and VmHWM (KiB) and minor page faults so far of `pid`; NaN when it is gone. */
export function procStats(pid) {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const cpu = (Number(f[11]) + Number(f[12])) / CLK_TCK;
    const status = readFileSync(`/proc/${pid}/status`, 'utf8');
    const rss = Number(status.match(/VmRSS:\s+(\d+)/)?.[1] ?? NaN);
    const hwm = Number(status.match(/VmHWM:\s+(\d+)/)?.[1] ?? NaN);
    return { cpu, rss, hwm, minflt: Number(f[7]) };
  } catch {
    return { cpu: NaN, rss: NaN, hwm: NaN, minflt: NaN };
  }
}

/** Whole-machine busy CPU seconds so far (all cores, /proc/stat). */
export function machineBusy() {
  try {
    const line = readFileSync('/proc/stat', 'utf8').split('\n')[0];
    const v = line.trim().split(/\s+/).slice(1).map(Number);
    const total = v.slice(0, 8).reduce((a, b) => a + b, 0);
    return (total - v[3] - v[4]) / CLK_TCK; // less idle and iowait
  } catch {
    return NaN;
  }
}

/** This process's CPU seconds so far. */
export function selfCpu() {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1e6;
}

/**
 * A load meter over an interval: at stop(), `otherPct` is the CPU the rest of
 * the machine used (busy ticks less the server's and the harness's), as % of
 * one core, averaged over the interval.
 */
export function loadMeter(serverPid) {
  const t0 = performance.now();
  const m0 = machineBusy();
  const s0 = procStats(serverPid).cpu;
  const h0 = selfCpu();
  return {
    stop() {
      const secs = (performance.now() - t0) / 1000;
      const server = procStats(serverPid).cpu - s0;
      const harness = selfCpu() - h0;
      const machine = machineBusy() - m0;
      return {
        seconds: secs,
        serverCpuSec: server,
        harnessCpuSec: harness,
        serverCpuPct: (100 * server) / secs,
        harnessCpuPct: (100 * harness) / secs,
        otherCpuPct: (100 * (machine - server - harness)) / secs,
      };
    },
  };
}
