// What a machine sent that the server has not acknowledged yet (SPEC L10):
// each session's turn reply and each run's latest report, kept (in Held,
// so in the held file too) until `reply-received` / `run-received` or a
// refusal naming it settles it. One written on an earlier link — or read
// from the held file — is sent again after `resumed`; `session_busy` sends
// it again after a pause. Sends go through the outbox, in order.

import type { Held } from './held.js';
import type { Logger } from './log.js';
import type { Outbox } from './outbox.js';
import type { ClientMessage, KeptReply, KeptRun, RunStatus } from './wire.js';

/** How long after `session_busy` a reply or report is sent again. */
export const BUSY_PAUSE_MS = 1000;

/** A refusal, as the link sends it. */
interface Refusal {
  code: string;
  message: string;
  session?: string | null;
  turn?: string | null;
  run?: string | null;
}

/** Where a kept message is: queued in the outbox, or written on link `n`. */
type Sent = { what: string; link: number | null };

export class Owed {
  /** By key (`reply`/`run` and ids): which message, and where it is. */
  readonly #sent = new Map<string, Sent>();
  readonly #timers = new Set<ReturnType<typeof setTimeout>>();
  /** The link now being driven, from 1. */
  #link = 0;

  constructor(
    private readonly outbox: Outbox,
    private readonly held: Held,
    private readonly log: Logger,
  ) {}

  /** Sends `turn`'s reply, kept until acknowledged. Resolves once queued. */
  reply(session: string, turn: string, text: string): Promise<void> {
    this.held.keepReply(session, { turn, text });
    return this.#send(replyMessage(session, { turn, text }));
  }

  /** Sends a run report, kept (as its run's latest) until acknowledged. Resolves once queued. */
  run(session: string, run: string, name: string, status: RunStatus, attempt: number | undefined): Promise<void> {
    this.held.keepRun(session, { run, name, status, attempt: attempt ?? 1 });
    return this.#send({ type: 'run', session, run, name, status, ...(attempt === undefined ? {} : { attempt }) });
  }

  /** Sends the session's kept reply again: the server asked for its turn again. */
  replyAgain(session: string): void {
    const kept = this.held.reply(session);
    if (kept) void this.#send(replyMessage(session, kept)).catch(() => {});
  }

  /** A new link is being driven. */
  linked(): void {
    this.#link++;
  }

  /** `message` went out on the link: a kept reply or report it is now waits for its answer. */
  written(message: ClientMessage): void {
    const key = keyOf(message);
    if (key === null || !this.#isKept(message)) return;
    this.#sent.set(key, { what: identity(message), link: this.#link });
  }

  /**
   * After `resumed`: sends again every kept reply and report written on an
   * earlier link or read from the held file (one still queued goes out as
   * it is), each session's runs before its reply.
   */
  resend(): void {
    for (const [session, kept] of this.held.entries()) {
      const messages: ClientMessage[] = (kept.runs ?? []).map((report) => runMessage(session, report));
      if (kept.reply) messages.push(replyMessage(session, kept.reply));
      for (const message of messages) {
        const sent = this.#sent.get(keyOf(message)!);
        const queued = sent?.what === identity(message) && sent.link === null;
        const onThisLink = sent?.what === identity(message) && sent.link === this.#link;
        if (!queued && !onThisLink) void this.#send(message);
      }
    }
  }

  /** `reply-received`: the turn's reply is committed. */
  replyReceived(session: string, turn: string): void {
    this.held.settleReply(session, (reply) => reply.turn === turn);
  }

  /** `run-received`: that report is taken; the kept one is settled if it is that report. */
  runReceived(session: string, run: string, attempt: number, status: RunStatus): void {
    this.held.settleRun(session, run, (report) => report.attempt === attempt && report.status === status);
  }

  /** An `invoke` of `turn`: an earlier turn's reply is settled (turns run one at a time). */
  invoked(session: string, turn: string): void {
    this.held.settleReply(session, (reply) => reply.turn !== turn);
  }

  /**
   * A refusal naming a reply or a run report: `session_busy` sends it again
   * after a pause, any other code settles it. False when it names neither.
   */
  refused(refusal: Refusal): boolean {
    const { session, turn, run, code } = refusal;
    if (!session || (!turn && !run)) return false;
    const reply = turn ? this.held.reply(session) : null;
    const report = run ? this.held.run(session, run) : null;
    const message =
      turn && reply?.turn === turn ? replyMessage(session, reply) : report ? runMessage(session, report) : null;
    if (!message) {
      this.log.debug?.('a refusal of nothing kept ignored', { session, turn, run, code });
      return true;
    }
    if (code === 'session_busy') {
      this.#later(message);
      return true;
    }
    this.log.warn(turn ? 'the server refused a reply; it is dropped' : 'the server refused a run report; it is dropped', {
      session,
      ...(turn ? { turn } : { run }),
      code,
      message: refusal.message,
    });
    if (turn) this.held.settleReply(session, (reply) => reply.turn === turn);
    else this.held.settleRun(session, run!, () => true);
    return true;
  }

  /** Cancels every pending resend and forgets where each went: the work they were for is gone. */
  stop(): void {
    for (const timer of this.#timers) clearTimeout(timer);
    this.#timers.clear();
    this.#sent.clear();
  }

  /** Sends `message` again after BUSY_PAUSE_MS, if it is still kept then. */
  #later(message: ClientMessage): void {
    const timer = setTimeout(() => {
      this.#timers.delete(timer);
      if (this.#isKept(message)) void this.#send(message);
    }, BUSY_PAUSE_MS);
    timer.unref?.();
    this.#timers.add(timer);
  }

  #send(message: ClientMessage): Promise<void> {
    this.#sent.set(keyOf(message)!, { what: identity(message), link: null });
    // Rejects only once no link will come: then nothing can be sent.
    return this.outbox.push(message);
  }

  /** Whether `message` is the reply or report kept now. */
  #isKept(message: ClientMessage): boolean {
    if (message.type === 'reply') {
      const kept = this.held.reply(message.session);
      return kept !== null && kept.turn === message.turn && kept.text === message.text;
    }
    if (message.type === 'run') {
      const kept = this.held.run(message.session, message.run);
      return kept !== null && identity(runMessage(message.session, kept)) === identity(message);
    }
    return false;
  }
}

function replyMessage(session: string, reply: KeptReply): ClientMessage {
  return { type: 'reply', session, turn: reply.turn, text: reply.text };
}

function runMessage(session: string, report: KeptRun): ClientMessage {
  const { run, name, status, attempt } = report;
  return { type: 'run', session, run, name, status, attempt };
}

/** Where a reply or run report is kept; null for any other message. */
function keyOf(message: ClientMessage): string | null {
  if (message.type === 'reply') return JSON.stringify(['reply', message.session]);
  if (message.type === 'run') return JSON.stringify(['run', message.session, message.run]);
  return null;
}

/** Which reply or report `message` is: what its acknowledgement must match. */
function identity(message: ClientMessage): string {
  if (message.type === 'reply') return JSON.stringify([message.turn, message.text]);
  if (message.type === 'run') return JSON.stringify([message.name, message.status, message.attempt ?? 1]);
  return '';
}
