// The pause before linking again after a failed or ended link: doubling
// from 250 ms to 30 s, with jitter so a fleet of machines dropped at once
// does not come back at once (the Rust SDK's `backoff`).

/** The first pause before linking again. */
export const FIRST_PAUSE_MS = 250;
/** The longest pause between attempts to link again. */
export const MAX_PAUSE_MS = 30_000;

/**
 * The pause after `failures` failed attempts in a row: 250 ms × 2^failures,
 * at most 30 s, then moved by up to a quarter either way.
 */
export function backoff(failures: number, random: () => number = Math.random): number {
  const base = Math.min(FIRST_PAUSE_MS * 2 ** Math.min(failures, 8), MAX_PAUSE_MS);
  return Math.round(base * (0.75 + random() * 0.5));
}

/** Resolves after `ms`, or at once (false) when `signal` aborts first. */
export function pause(ms: number, signal?: AbortSignal): Promise<boolean> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve(false);
    const done = (slept: boolean) => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', aborted);
      resolve(slept);
    };
    const aborted = () => done(false);
    const timer = setTimeout(() => done(true), ms);
    signal?.addEventListener('abort', aborted, { once: true });
  });
}
