// How a link ended, and whether linking again can help (the Rust SDK's
// `Ended`).

import { Close } from './protocol.js';

/** How a link ended. */
export type Ended =
  /** The machine detached (its signal aborted). */
  | { kind: 'detached' }
  /** The server closed the link with this code and reason (4403 revoked, 4002 unresponsive, 4409 taken over, 1001 shutting down, …). */
  | { kind: 'closed'; code: number; reason: string }
  /** The connection broke without a close, or went silent. */
  | { kind: 'dropped'; reason: string }
  /** The server refused to link again, for good: `Connector.run` gave up. */
  | { kind: 'refused'; reason: string };

/**
 * Whether linking again cannot help: the machine left, or the server ended
 * this machine's link on purpose (revoked, bad `hello`, taken over).
 */
export function isFinal(ended: Ended): boolean {
  switch (ended.kind) {
    case 'detached':
    case 'refused':
      return true;
    case 'closed':
      return ended.code === Close.REVOKED || ended.code === Close.BAD_HELLO || ended.code === Close.SUPERSEDED;
    case 'dropped':
      return false;
  }
}

/** One line saying how the link ended. */
export function describeEnded(ended: Ended): string {
  switch (ended.kind) {
    case 'detached':
      return 'detached';
    case 'closed':
      return `closed by the server (${ended.code}: ${ended.reason})`;
    case 'dropped':
      return `dropped (${ended.reason})`;
    case 'refused':
      return `refused (${ended.reason})`;
  }
}
