// What a Planner writes: the Handler the SDK calls, and the handles it
// gets — a Turn with typed tool calls, a SessionHandle for runs, an Answer
// to a question it asked.

import { pause } from './backoff.js';
import type { Calls } from './calls.js';
import { ToolError } from './errors.js';
import type { Held } from './held.js';
import type { Logger } from './log.js';
import type { Owed } from './owed.js';
import type { ToolName } from './tools.js';
import type {
  AnswerBody,
  ChatMessageView,
  EditPlanInput,
  EditPlanOutput,
  OpenDecisionInput,
  OpenDecisionsInput,
  OpenDecisionsOutput,
  PlanView,
  ReadDocumentOutput,
  RunStatus,
  UpdatePlanInput,
  UpdatePlanOutput,
} from './wire.js';

/** How many times a tool call the server could not decide is tried. */
const TRIES = 4;
/** The pause before the first retry; it doubles after each. */
const FIRST_RETRY_MS = 250;

/** A Planner: the SDK calls it for each turn, answer and Stop. */
export interface Handler {
  /**
   * Does a turn's work and resolves to the reply for Chat. Questions belong
   * in decisions (`openDecisions`), not in the reply (SPEC T2): a reply that
   * asks gets a repair turn, whose `turn.repair` lists them. A turn that
   * throws still replies, saying why. Pass `turn.signal` to your own I/O: it
   * aborts when the turn is stopped or superseded.
   */
  turn(turn: Turn): Promise<string>;

  /** A member answered a question the session asked with `turn.ask`. Delivered once. */
  answered?(answer: Answer): void | Promise<void>;

  /**
   * A member pressed Stop: stop the session's work. The running turn (if
   * any) is already aborted — its signal fired, its calls failed, and it
   * has settled or had 5 s to; `stopped` is sent once this returns.
   */
  stop?(session: SessionHandle): void | Promise<void>;

  /**
   * A member pressed Resume before this machine confirmed the Stop: the
   * Stop is withdrawn (SPEC L4). The aborted turn stays aborted; carry on
   * with what can be. `stopped` is still sent when `stop` returns.
   */
  stopWithdrawn?(session: SessionHandle): void | Promise<void>;

  /**
   * After a drop, the server says a question this machine held no longer
   * waits (people discarded it, SPEC L3): settle it. No answer will come.
   */
  withdrawn?(question: { session: SessionHandle; request: string }): void | Promise<void>;

  /**
   * After a drop, the server says a session this machine held has ended
   * (an explicit end while away, a lease that ran out): its turn is aborted
   * and its questions will get no answer.
   */
  sessionEnded?(session: SessionHandle): void | Promise<void>;
}

/** What a turn or session handle needs from the link that serves it. */
export interface Services {
  readonly calls: Calls;
  readonly held: Held;
  readonly owed: Owed;
  readonly log: Logger;
}

/** A session, for what outlives a turn: run reports. */
export class SessionHandle {
  constructor(
    /** The session's id, as the server named it. */
    readonly id: string,
    private readonly services: Services,
  ) {}

  /**
   * Reports a run of this session and its status now (SPEC R1). A live
   * (running or paused) run keeps the session in use. A report over the
   * declared run capacity is refused by the server (`run_capacity`, logged).
   * Resolves once the report is queued for the link; the run's latest
   * report is kept, and sent again after a drop, until the server
   * acknowledges it (SPEC L10).
   */
  run(run: string, name: string, status: RunStatus): Promise<void> {
    return this.#report(run, undefined, name, status);
  }

  /**
   * Reports `attempt` (from 1) of a run: a higher number than before starts
   * a new attempt, and a late report about an older one never repaints the
   * run (SPEC R2, T4).
   */
  runAttempt(run: string, attempt: number, name: string, status: RunStatus): Promise<void> {
    return this.#report(run, attempt, name, status);
  }

  #report(run: string, attempt: number | undefined, name: string, status: RunStatus): Promise<void> {
    return this.services.owed.run(this.id, run, name, status, attempt);
  }

  /** Never shows the link's internals. */
  toJSON(): { id: string } {
    return { id: this.id };
  }
}

/** What a turn is: its ids, what started it, and its session's plan. */
export interface TurnStart {
  session: SessionHandle;
  id: string;
  document: string;
  messages: ChatMessageView[];
  repair: string[];
  plan: PlanView | null;
}

/** A turn: what started it, and the document tools for its session. */
export class Turn {
  /** The session. */
  readonly session: SessionHandle;
  /** This turn's id (`t1`, `t2`, … in each session). */
  readonly id: string;
  /** The document the turn is about. */
  readonly document: string;
  /** The Chat lines that started it, in order (steering included). */
  readonly messages: readonly ChatMessageView[];
  /**
   * A repair turn's questions: the last reply asked them in prose; open
   * them as decisions with stable keys and reply without asking.
   */
  readonly repair: readonly string[];
  /**
   * The session's plan, when the Planner declared `planning` and has made
   * one (SPEC U6): its own earlier words, as data, not a message from people.
   */
  readonly plan: PlanView | null;
  /** Aborts when the turn is stopped, superseded, or its link is gone for good. */
  readonly signal: AbortSignal;

  constructor(
    start: TurnStart,
    signal: AbortSignal,
    private readonly services: Services,
  ) {
    this.session = start.session;
    this.id = start.id;
    this.document = start.document;
    this.messages = start.messages;
    this.repair = start.repair;
    this.plan = start.plan;
    this.signal = signal;
  }

  /** `read_document`: the outline at the current revision. */
  readDocument(): Promise<ReadDocumentOutput> {
    return this.call('read_document', {});
  }

  /** `edit_plan`: edits addressed at the current revision. */
  editPlan(input: EditPlanInput): Promise<EditPlanOutput> {
    return this.call('edit_plan', input);
  }

  /** `open_decisions`: a batch of cards, atomic (SPEC D1). */
  openDecisions(input: OpenDecisionsInput): Promise<OpenDecisionsOutput> {
    return this.call('open_decisions', input);
  }

  /** `open_decision`: one card at the current revision. */
  openDecision(input: OpenDecisionInput): Promise<OpenDecisionsOutput> {
    return this.call('open_decision', input);
  }

  /**
   * `ask`: a question that waits on a member (a host request). The answer
   * arrives later through `Handler.answered`, naming the card; until then
   * the question is named in every `resume` (SPEC L3, L5).
   */
  async ask(input: OpenDecisionInput): Promise<OpenDecisionsOutput> {
    const asked = await this.call<OpenDecisionsOutput>('ask', input);
    for (const capture of asked.captures) {
      if (capture.captured) this.services.held.holdQuestion(this.session.id, capture.card_id);
    }
    return asked;
  }

  /**
   * `update_plan` (SPEC U2, U3): replaces the session's plan whole. A stale
   * `expected_revision` or a list that breaks a bound is refused, naming the
   * rule, and changes nothing.
   */
  updatePlan(input: UpdatePlanInput): Promise<UpdatePlanOutput> {
    return this.call('update_plan', input);
  }

  /** Reports a run of the session (see `SessionHandle.run`). */
  run(run: string, name: string, status: RunStatus): Promise<void> {
    if (this.signal.aborted) return Promise.reject(this.signal.reason);
    return this.session.run(run, name, status);
  }

  /** Reports an attempt of a run of the session (see `SessionHandle.runAttempt`). */
  runAttempt(run: string, attempt: number, name: string, status: RunStatus): Promise<void> {
    if (this.signal.aborted) return Promise.reject(this.signal.reason);
    return this.session.runAttempt(run, attempt, name, status);
  }

  /**
   * Calls tool `name` with `input` and resolves to its output. A refusal
   * marked `retry` (the server could not decide, SPEC L6) is tried again
   * after a pause, up to 3 more times; every other refusal is the server's
   * decision and rejects at once with a `refused` ToolError.
   */
  async call<T>(name: ToolName, input: object): Promise<T> {
    let wait = FIRST_RETRY_MS;
    for (let tries = 1; ; tries++) {
      if (this.signal.aborted) throw this.signal.reason;
      try {
        const output = await this.services.calls.call(
          this.session.id,
          this.id,
          name,
          input as Record<string, unknown>,
        );
        if (typeof output !== 'object' || output === null) {
          throw ToolError.output(`${name} answered ${JSON.stringify(output)}, not an object`);
        }
        return output as T;
      } catch (error) {
        const retry = error instanceof ToolError && error.kind === 'refused' && error.refusal?.retry === true;
        if (!retry || tries >= TRIES) throw error;
        this.services.log.warn('the server could not decide; trying again', { tool: name, code: error.code });
        await pause(wait, this.signal);
        wait *= 2;
      }
    }
  }

  /** Never shows the link's internals. */
  toJSON(): { session: string; id: string; document: string } {
    return { session: this.session.id, id: this.id, document: this.document };
  }
}

/** A member's answer to a question the session asked. */
export interface Answer {
  /** The session that asked. */
  session: SessionHandle;
  /** The question: the card id `ask` returned. */
  request: string;
  /** The answer. */
  answer: AnswerBody;
  /** Who answered. */
  answeredBy: string;
}
