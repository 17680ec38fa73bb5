// A Planner served across one or more links: the loop that reads each
// link's messages (heartbeats answered, each fresh credential kept before
// the next message, SPEC L8), runs one turn per `invoke`, delivers answers
// once and acknowledges them (L5), carries out Stops (L4), and keeps what
// the next `resume` names — the sessions and questions held, each session's
// running turn and its calls still waiting (L3, W1), and each reply and run
// report until the server acknowledges it (L10, src/owed.ts).

import { Calls } from './calls.js';
import { plausibleCredential, type CredentialKeeper } from './credential.js';
import { isFinal, type Ended } from './ended.js';
import { ToolError } from './errors.js';
import { Answer, Handler, SessionHandle, Turn, type Services } from './handler.js';
import { Held } from './held.js';
import type { Logger } from './log.js';
import { Outbox } from './outbox.js';
import { Owed } from './owed.js';
import { MAX_HELD_CALLS, MAX_HELD_QUESTIONS, MAX_RESUME_SESSIONS } from './protocol.js';
import type { LinkSocket } from './socket.js';
import type { ClientMessage, HeldSession, ServerMessage } from './wire.js';

/** How long a stopped turn may take to settle before the Stop goes on without it. */
const STOP_GRACE_MS = 5000;
/** Answers remembered as delivered, so one sent again is not delivered twice. */
const MAX_DELIVERED = 4096;
/** Longest reply the SDK writes for a turn that failed (the server takes 4000 bytes). */
const MAX_FAILURE_REPLY = 1000;

/** A turn the SDK runs: until its reply is written, it is named in `resume`. */
interface Running {
  id: string;
  controller: AbortController;
  done: Promise<void>;
}

export interface ServingOptions {
  heldFile?: string | undefined;
  log: Logger;
  /** How long the link may be silent before it counts as dropped. */
  silenceMs: number;
}

export class Serving {
  readonly #handler: Handler;
  readonly #log: Logger;
  readonly #silenceMs: number;
  readonly #outbox = new Outbox();
  readonly #calls: Calls;
  readonly #held: Held;
  readonly #owed: Owed;
  readonly #services: Services;
  /** Each session's turn the SDK runs, to abort on Stop and name in `resume`. */
  readonly #turns = new Map<string, Running>();
  /** Answers already given to the handler (request ids, oldest first). */
  readonly #delivered = new Set<string>();
  /** Bumped when everything ends: work started before it sends nothing after. */
  #generation = 0;

  constructor(handler: Handler, options: ServingOptions) {
    this.#handler = handler;
    this.#log = options.log;
    this.#silenceMs = options.silenceMs;
    this.#calls = new Calls(this.#outbox, this.#log);
    this.#held = new Held(options.heldFile, this.#log);
    this.#owed = new Owed(this.#outbox, this.#held, this.#log);
    this.#services = { calls: this.#calls, held: this.#held, owed: this.#owed, log: this.#log };
  }

  /**
   * Runs one link until it ends or `signal` aborts (then it detaches). With
   * `resume`, the first message is `resume`, and a drop keeps running turns
   * and their calls in flight for the next link: its `resume` names them,
   * and each call gets its result — or `interrupted` — after `resumed`
   * (SPEC W1); replies and run reports not yet acknowledged are sent again
   * after `resumed` (L10). Without it, or when the end is final, everything
   * ends with the link.
   */
  async drive(socket: LinkSocket, keeper: CredentialKeeper, signal: AbortSignal | undefined, resume: boolean): Promise<Ended> {
    this.#owed.linked();
    if (resume) socket.send(this.#resumeMessage());
    this.#outbox.open((message) => {
      if (!socket.send(message)) return false;
      this.#written(message);
      return true;
    });
    let ended: Ended;
    for (;;) {
      const read = await socket.read(this.#silenceMs, signal);
      if (read.kind === 'aborted') {
        socket.send({ type: 'detach' });
        socket.close(1000);
        ended = { kind: 'detached' };
        break;
      }
      if (read.kind === 'silent') {
        // The server sends a heartbeat every 15 s: this long without one,
        // the connection is gone even if no close says so.
        socket.terminate();
        ended = { kind: 'dropped', reason: `no message from the server in ${this.#silenceMs} ms` };
        break;
      }
      if (read.kind === 'end') {
        ended = read.ended;
        break;
      }
      const message = parse(read.text);
      if (!message) {
        this.#log.warn('unreadable server message ignored', { frame: read.text.slice(0, 200) });
        continue;
      }
      if (message.type === 'credential') {
        await this.#keep(keeper, message.credential, message.expires_at);
        continue;
      }
      const answer = this.#dispatch(message);
      if (answer) socket.send(answer);
    }
    this.#outbox.pause();
    // Nothing will be resumed: a result that was on its way is lost with the link.
    if (!resume || isFinal(ended)) this.finish(resume);
    return ended;
  }

  /**
   * Ends everything: running turns, calls in flight, and what a resume
   * would name — but with `keepOwed` (a resumable machine), the sessions
   * that owe the server a reply or run report stay held, so a later
   * `resume` (after a restart, with a held file) sends them again (SPEC L10).
   */
  finish(keepOwed: boolean): void {
    this.#generation++;
    const gone = ToolError.linkClosed();
    for (const [session, running] of this.#turns) this.#abort(session, running, gone);
    this.#turns.clear();
    this.#calls.failAll(gone);
    if (keepOwed) this.#held.forgetSettled();
    else this.#held.forgetAll();
    this.#owed.stop();
    this.#outbox.clear();
  }

  /** No link will come: every send from now on fails. */
  close(why: string): void {
    this.#owed.stop();
    this.#outbox.close(why);
  }

  /** Resolves once the held file has every change so far. */
  saved(): Promise<void> {
    return this.#held.saved();
  }

  /** Handles one server message; returns an answer to send at once. */
  #dispatch(message: ServerMessage): ClientMessage | null {
    switch (message.type) {
      case 'heartbeat':
        return { type: 'heartbeat-ack', seq: message.seq };
      case 'invoke':
        this.#invoke(message);
        return null;
      case 'tool-result':
        this.#calls.settle(
          message.call_id,
          message.error
            ? { error: ToolError.refused(message.error) }
            : message.output === undefined || message.output === null
              ? { error: ToolError.output('a result with neither output nor error') }
              : { output: message.output },
        );
        return null;
      case 'input-result': {
        const { session, request } = message;
        this.#held.settleQuestion(session, request);
        // Sent again after a `resumed` if the acknowledgement was lost:
        // acknowledged again, delivered once.
        if (!this.#delivered.has(request)) {
          this.#remember(request);
          const answer: Answer = {
            session: this.#session(session),
            request,
            answer: message.answer,
            answeredBy: message.answered_by,
          };
          this.#spawn('answered', () => this.#handler.answered?.(answer));
        }
        return { type: 'input-received', session, request };
      }
      case 'stop':
        this.#stop(message.session);
        return null;
      case 'stop-withdrawn': {
        const handle = this.#session(message.session);
        this.#spawn('stopWithdrawn', () => this.#handler.stopWithdrawn?.(handle));
        return null;
      }
      case 'resumed':
        for (const session of message.ended) {
          const running = this.#turns.get(session);
          const ended = ToolError.linkClosed(`session ${session} ended while the link was down`);
          if (running) this.#abort(session, running, ended);
          this.#turns.delete(session);
          this.#calls.failSession(session, ended);
          this.#held.forgetSession(session);
          const handle = this.#session(session);
          this.#spawn('sessionEnded', () => this.#handler.sessionEnded?.(handle));
        }
        for (const carried of message.sessions) {
          for (const request of carried.withdrawn) {
            this.#held.settleQuestion(carried.session, request);
            const question = { session: this.#session(carried.session), request };
            this.#spawn('withdrawn', () => this.#handler.withdrawn?.(question));
          }
        }
        this.#owed.resend();
        return null;
      case 'reply-received':
        this.#owed.replyReceived(message.session, message.turn);
        return null;
      case 'run-received':
        this.#owed.runReceived(message.session, message.run, message.attempt, message.status);
        return null;
      case 'refusal': {
        if (this.#owed.refused(message)) return null;
        const again = message.code === 'unknown_call' && message.call_id ? this.#calls.again(message.call_id) : null;
        if (again) {
          // Named in `resume`, never recorded: it died with the old link
          // before reaching the server, so it never ran. Sent again.
          this.#log.debug?.('a call the server never recorded sent again', { call_id: message.call_id });
          this.#outbox.push(again).catch(() => {});
          return null;
        }
        if (message.call_id) {
          this.#calls.settle(message.call_id, {
            error: ToolError.refused({ code: message.code, message: message.message, read_again: false, retry: false }),
          });
        } else {
          this.#log.warn('the server refused a message', { code: message.code, message: message.message });
        }
        return null;
      }
      case 'welcome':
        this.#log.warn('a second welcome ignored');
        return null;
      case 'credential':
        // Kept by the read loop before it dispatches anything else.
        return null;
      default: {
        // A newer server's message: nothing this SDK can do with it.
        const unknown: { type: string } = message;
        this.#log.warn('a server message of an unknown type ignored', { type: unknown.type });
        return null;
      }
    }
  }

  /**
   * Starts a turn; an earlier turn of the session still running is aborted
   * and an earlier turn's reply settled. An invoke of the turn the SDK
   * runs starts nothing, and one of a turn whose reply is kept sends the
   * reply again: the handler sees each turn once.
   */
  #invoke(message: Extract<ServerMessage, { type: 'invoke' }>): void {
    const { session, turn: id } = message;
    if (this.#turns.get(session)?.id === id) {
      this.#log.debug?.('an invoke of a turn already running ignored', { session, turn: id });
      return;
    }
    if (this.#held.reply(session)?.turn === id) {
      this.#log.debug?.('an invoke of a turn already replied to: the reply goes again', { session, turn: id });
      this.#owed.replyAgain(session);
      return;
    }
    this.#owed.invoked(session, id);
    this.#held.holdSession(session);
    const controller = new AbortController();
    const turn = new Turn(
      {
        session: this.#session(session),
        id,
        document: message.document,
        messages: message.messages,
        repair: message.repair ?? [],
        plan: message.plan ?? null,
      },
      controller.signal,
      this.#services,
    );
    const earlier = this.#turns.get(session);
    if (earlier) this.#abort(session, earlier, ToolError.aborted(`turn ${earlier.id} was superseded by turn ${id}`));
    const running: Running = { id, controller, done: Promise.resolve() };
    running.done = this.#runTurn(turn, controller.signal);
    this.#turns.set(session, running);
  }

  /**
   * Runs a turn and sends its reply. A turn that fails still replies, so the
   * people waiting in Chat learn why — after the next `resume` if the link
   * is down meanwhile. An aborted turn sends nothing.
   */
  async #runTurn(turn: Turn, signal: AbortSignal): Promise<void> {
    // A turn starts after the message that started it is handled.
    await Promise.resolve();
    let text: string;
    try {
      text = await this.#handler.turn(turn);
      if (typeof text !== 'string') throw new TypeError(`the turn resolved to ${typeof text}, not the reply's text`);
    } catch (error) {
      if (signal.aborted) return;
      if (error instanceof ToolError && error.kind === 'link-closed') {
        text = 'The Planner lost its link during this turn and did not finish it.';
      } else {
        this.#log.warn('turn failed', { session: turn.session.id, turn: turn.id, error: String(error) });
        const why = error instanceof Error ? error.message : String(error);
        text = `The Planner could not finish this turn: ${why}`.slice(0, MAX_FAILURE_REPLY);
      }
    }
    if (signal.aborted) return;
    await this.#owed.reply(turn.session.id, turn.id, text).catch(() => {});
  }

  /**
   * A Stop: the session's turn is aborted and given a moment to settle, the
   * handler is told, then `stopped` is sent and the session forgotten.
   */
  #stop(session: string): void {
    const running = this.#turns.get(session);
    this.#turns.delete(session);
    const generation = this.#generation;
    const handle = this.#session(session);
    void (async () => {
      if (running) {
        this.#abort(session, running, ToolError.aborted('the turn was stopped'));
        await settled(running.done, STOP_GRACE_MS);
      }
      try {
        await this.#handler.stop?.(handle);
      } catch (error) {
        this.#log.warn('the stop handler failed', { session, error: String(error) });
      }
      if (generation !== this.#generation) return;
      try {
        await this.#outbox.push({ type: 'stopped', session });
        this.#held.forgetSession(session);
      } catch {
        // The link is gone for good; the server ends the session itself.
      }
    })();
  }

  /** Aborts `running` (a turn of `session`): its signal fires and its calls fail with `why`. */
  #abort(session: string, running: Running, why: ToolError): void {
    running.controller.abort(why);
    this.#calls.failTurn(session, running.id, why);
  }

  /**
   * The `resume` naming what this machine holds: each session's questions,
   * its running turn and that turn's calls still waiting — or, with no turn
   * running, the turn whose reply is not yet acknowledged (SPEC L10). A
   * turn whose reply is not yet written still counts as running: a reply
   * queued while the link was down goes out after `resume`, to a turn the
   * server must still hold.
   */
  #resumeMessage(): ClientMessage {
    const held = this.#held.entries();
    if (held.length > MAX_RESUME_SESSIONS) {
      this.#log.warn('more sessions held than a resume may name; the rest end', { held: held.length });
    }
    const sessions: HeldSession[] = held.slice(0, MAX_RESUME_SESSIONS).map(([session, kept]) => {
      const turn = this.#turns.get(session)?.id;
      const entry: HeldSession = { session, questions: (kept.questions ?? []).slice(0, MAX_HELD_QUESTIONS) };
      if (turn !== undefined) {
        entry.turn = turn;
        entry.calls = this.#calls.waiting(session, turn).slice(0, MAX_HELD_CALLS);
        this.#calls.named(entry.calls);
      } else if (kept.reply) {
        entry.turn = kept.reply.turn;
      }
      return entry;
    });
    return { type: 'resume', sessions };
  }

  /** `message` went out on the link. */
  #written(message: ClientMessage): void {
    if (message.type === 'tool-call') this.#calls.written(message.call_id);
    this.#owed.written(message);
    if (message.type === 'reply' && this.#turns.get(message.session)?.id === message.turn) {
      this.#turns.delete(message.session);
    }
  }

  /** Keeps a fresh credential as the newest, unless it could not be one of ours. */
  async #keep(keeper: CredentialKeeper, credential: string, expiresAt: number): Promise<void> {
    if (!plausibleCredential(credential)) {
      this.#log.warn('a malformed credential from the server ignored');
      return;
    }
    await keeper.replace(credential);
    this.#log.debug?.('credential renewed', { expires_at: expiresAt });
  }

  #session(id: string): SessionHandle {
    return new SessionHandle(id, this.#services);
  }

  #remember(request: string): void {
    this.#delivered.add(request);
    if (this.#delivered.size > MAX_DELIVERED) {
      const oldest = this.#delivered.values().next().value;
      if (oldest !== undefined) this.#delivered.delete(oldest);
    }
  }

  /** Runs a handler callback on its own; a failure is logged, never thrown into the link. */
  #spawn(what: string, callback: () => void | Promise<void> | undefined): void {
    void Promise.resolve()
      .then(callback)
      .catch((error) => this.#log.warn(`the ${what} handler failed`, { error: String(error) }));
  }
}

/** A server message, or null when `text` is not one (not JSON, or no string `type`). */
function parse(text: string): ServerMessage | null {
  try {
    const message: unknown = JSON.parse(text);
    if (typeof message === 'object' && message !== null && typeof (message as { type?: unknown }).type === 'string') {
      return message as ServerMessage;
    }
  } catch {
    // Falls through: not JSON.
  }
  return null;
}

/** Resolves when `promise` settles or after `ms`, whichever is first. */
function settled(promise: Promise<unknown>, ms: number): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    promise.then(
      () => {
        clearTimeout(timer);
        resolve();
      },
      () => {
        clearTimeout(timer);
        resolve();
      },
    );
  });
}
