// Tool calls waiting for their results, matched by call id. A call stays
// waiting across a resumable drop: once its frame went out it is named in
// the next `resume`, and what the server sends after `resumed` — its result,
// or `interrupted`, `result_not_kept` — settles it (SPEC W1). `unknown_call`
// to a call a `resume` named means it died with the old link before it
// reached the server, so it never ran: it is sent again.

import { ToolError } from './errors.js';
import type { Logger } from './log.js';
import type { Outbox } from './outbox.js';
import type { ClientMessage } from './wire.js';

/** A call waiting for its result. */
interface InFlight {
  session: string;
  turn: string;
  /**
   * Whether its frame went out on a link: only then can the server have it,
   * and only then is it named in `resume` (one still queued goes out after
   * the `resume`, and gets its result then).
   */
  written: boolean;
  /** Whether a `resume` named it since it was last written: only then does `unknown_call` mean it never arrived. */
  named: boolean;
  /** Its `tool-call`, to send again. */
  message: ClientMessage;
  resolve: (output: unknown) => void;
  reject: (error: ToolError) => void;
}

export class Calls {
  readonly #pending = new Map<string, InFlight>();
  #next = 0;

  constructor(
    private readonly outbox: Outbox,
    private readonly log: Logger,
  ) {}

  /** Calls tool `name` for `turn` of `session` and waits for its result. */
  async call(session: string, turn: string, name: string, args: Record<string, unknown>): Promise<unknown> {
    const callId = `c${++this.#next}`;
    const message: ClientMessage = { type: 'tool-call', session, turn, call_id: callId, name, arguments: args };
    const result = new Promise<unknown>((resolve, reject) => {
      this.#pending.set(callId, { session, turn, written: false, named: false, message, resolve, reject });
    });
    // Settled (say, failed by a drop) while the send waits for room: the
    // caller still gets it below, so it is not an unhandled rejection.
    result.catch(() => {});
    try {
      await this.outbox.push(message);
    } catch (error) {
      this.#pending.delete(callId);
      throw error;
    }
    return result;
  }

  /** Call `callId`'s frame went out on a link. */
  written(callId: string): void {
    const call = this.#pending.get(callId);
    if (call) call.written = true;
  }

  /** The calls of `turn` in `session` whose frames went out, oldest first. */
  waiting(session: string, turn: string): string[] {
    return [...this.#pending]
      .filter(([, call]) => call.written && call.session === session && call.turn === turn)
      .map(([id]) => id);
  }

  /** A `resume` named `callIds`: each gets one answer after `resumed`. */
  named(callIds: readonly string[]): void {
    for (const id of callIds) {
      const call = this.#pending.get(id);
      if (call) call.named = true;
    }
  }

  /**
   * The `tool-call` to send again when the server answered `unknown_call`
   * to `callId`: null unless a `resume` named it (then it never reached
   * the server and never ran, so calling it again is safe, SPEC W1);
   * otherwise the refusal is its answer.
   */
  again(callId: string): ClientMessage | null {
    const call = this.#pending.get(callId);
    if (!call?.named) return null;
    call.named = false;
    call.written = false;
    return call.message;
  }

  /** The server answered `callId`: its output, or `error`. */
  settle(callId: string, outcome: { output: unknown } | { error: ToolError }): void {
    const call = this.#pending.get(callId);
    if (!call) {
      this.log.warn('a result for no call in flight ignored', { call_id: callId });
      return;
    }
    this.#pending.delete(callId);
    if ('error' in outcome) call.reject(outcome.error);
    else call.resolve(outcome.output);
  }

  /** Fails the calls of `turn` in `session` (stopped or superseded) with `error`. */
  failTurn(session: string, turn: string, error: ToolError): void {
    this.#fail((call) => call.session === session && call.turn === turn, error);
  }

  /** Fails the calls of a session that ended. */
  failSession(session: string, error: ToolError): void {
    this.#fail((call) => call.session === session, error);
  }

  /** Fails every call in flight: its result, if any, went with the link. */
  failAll(error: ToolError): void {
    this.#fail(() => true, error);
  }

  #fail(which: (call: InFlight) => boolean, error: ToolError): void {
    for (const [id, call] of this.#pending) {
      if (!which(call)) continue;
      this.#pending.delete(id);
      call.reject(error);
    }
  }
}
