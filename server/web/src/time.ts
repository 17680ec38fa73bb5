// How long ago, and how long: the few ways the editor says a time.

const MINUTE = 60_000;
const HOUR = 60 * MINUTE;
const DAY = 24 * HOUR;

/** "just now", "4 min ago", "3 h ago", "yesterday", "5 days ago", or a date. */
export function ago(at: number, now = Date.now()): string {
  const span = Math.max(0, now - at);
  if (span < MINUTE) return 'just now';
  if (span < HOUR) return `${Math.floor(span / MINUTE)} min ago`;
  if (span < DAY) return `${Math.floor(span / HOUR)} h ago`;
  if (span < 2 * DAY) return 'yesterday';
  if (span < 7 * DAY) return `${Math.floor(span / DAY)} days ago`;
  return new Date(at).toLocaleDateString([], { year: 'numeric', month: 'short', day: 'numeric' });
}

/** A span as people say it: "0.4 s", "12 s", "3 min", "2 h 5 min". */
export function duration(ms: number): string {
  const span = Math.max(0, ms);
  if (span < 10_000) return `${(span / 1000).toFixed(1)} s`;
  if (span < MINUTE) return `${Math.round(span / 1000)} s`;
  if (span < HOUR) return `${Math.floor(span / MINUTE)} min`;
  const h = Math.floor(span / HOUR);
  const m = Math.floor((span % HOUR) / MINUTE);
  return m ? `${h} h ${m} min` : `${h} h`;
}

/** A clock time, "14:05". */
export function clock(at: number): string {
  return new Date(at).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' });
}
