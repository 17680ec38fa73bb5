// The Planner's plan, beside its status (SPEC B1, E1–E3): given the session
// the Planner's view names (planner.ts), fetches GET /sessions/{sid} and then
// follows GET /sessions/{sid}/events?after=CURSOR with an EventSource,
// showing the plan's explanation, steps and revision. A `plan_updated` is
// applied only when its revision is higher than the one shown, so replayed
// or late events never roll the plan back; `resync` refetches the snapshot.
// The panel is hidden when the session has no `plan` field (the Planner did
// not declare planning, SPEC U1).
//
// Step descriptions and the explanation are written by the Planner (a
// model): untrusted, rendered with textContent only, never innerHTML. A step
// the Planner calls completed is shown as *marked* complete — its word,
// which Margin does not check.

import { ApiError, api, describe } from './api';
import { byId, el } from './dom';
import type { PlanStep, PlanView, SessionSnapshot, StepStatus } from './wire';

/** Wait before starting again after a failure or a stream the browser gave up on. */
const RETRY_MS = 3000;
/** Wait before looking again for a session not yet readable. */
const NOT_YET_MS = 500;

type Plan = PlanView;

const STATUS: Record<StepStatus, { label: string; mark: string; title: string }> = {
  pending: { label: 'pending', mark: '\u25cb', title: 'Not started yet, according to the Planner' },
  in_progress: { label: 'in progress', mark: '\u25d0', title: 'Marked in progress by the Planner' },
  completed: {
    label: 'marked complete',
    mark: '\u2713',
    title: 'Marked complete by the Planner (its own word: Margin does not check the work)',
  },
};

export interface PlanOptions {
  token: string;
  onAuthFailure: (e: unknown) => boolean;
}



export class PlanPanel {
  private destroyed = false;
  /** The session followed, or null. */
  private session: string | null = null;
  /** Bumped on every switch, so late answers for an old session are dropped. */
  private generation = 0;
  private source: EventSource | null = null;
  private retry: ReturnType<typeof setTimeout> | null = null;
  /** Snapshots not found in a row, for backing off. */
  private misses = 0;
  /** The plan shown: undefined while unknown or planning is off. */
  private plan: Plan | null | undefined = undefined;
  private readonly panel = byId<HTMLElement>('plan');
  private readonly explanation = byId<HTMLElement>('plan-explanation');
  private readonly steps = byId<HTMLOListElement>('plan-steps');
  private readonly empty = byId<HTMLElement>('plan-empty');
  private readonly error = byId<HTMLElement>('plan-error');

  constructor(private readonly o: PlanOptions) {
    this.render();
  }

  /** Follows `session` (the PlannerView's), or nothing; a new id switches streams. */
  follow(session: string | null): void {
    if (this.destroyed || session === this.session) return;
    this.stop();
    this.session = session;
    this.misses = 0;
    this.plan = undefined;
    this.render();
    if (session !== null) void this.load();
  }

  destroy(): void {
    this.destroyed = true;
    this.stop();
    this.session = null;
    this.plan = undefined;
    this.render();
  }

  /** Closes the session's stream while the tab is hidden (see feed.ts). */
  pause(): void {
    this.stop();
  }

  /** Follows the session again, from a fresh snapshot. */
  resume(): void {
    if (!this.destroyed && this.session !== null && !this.source) void this.load();
  }

  /** Closes the stream and forgets pending work for the current session. */
  private stop(): void {
    this.generation++;
    this.source?.close();
    this.source = null;
    if (this.retry) clearTimeout(this.retry);
    this.retry = null;
  }

  private sessionPath(session: string): string {
    return `/sessions/${encodeURIComponent(session)}`;
  }

  /** Fetches the snapshot, shows its plan, and follows its events from its cursor. */
  private async load(): Promise<void> {
    const session = this.session;
    if (session === null) return;
    this.stop();
    const generation = this.generation;
    let snapshot: SessionSnapshot;
    try {
      snapshot = await api<SessionSnapshot>('GET', this.sessionPath(session), this.o.token);
    } catch (e) {
      if (generation !== this.generation || this.destroyed || this.o.onAuthFailure(e)) return;
      if (e instanceof ApiError && e.status === 404) {
        // The PlannerView can name a session a moment before its first event
        // is committed; whoever reads the document may read its sessions
        // (SPEC E3), so look again soon, quietly.
        this.showError(null);
        this.retryLater(generation, Math.min(RETRY_MS, NOT_YET_MS * 2 ** this.misses++));
      } else {
        this.showError(`Could not load the plan: ${describe(e)}`);
        this.retryLater(generation, RETRY_MS);
      }
      this.render();
      return;
    }
    if (generation !== this.generation || this.destroyed) return;
    this.misses = 0;
    this.showError(null);
    if (!('plan' in snapshot)) {
      // Planning is off, and stays off for the session's life (SPEC U1):
      // no plan will come, so there is nothing to follow.
      this.plan = undefined;
      this.render();
      return;
    }
    this.offer(snapshot.plan ?? null);
    // An ended session's log has no more events: the server would answer
    // 204, so there is nothing to follow.
    if (snapshot.state === 'ended') return;
    this.open(session, Number(snapshot.cursor) || 0, generation);
  }

  /** Follows the session's events after `cursor`. */
  private open(session: string, cursor: number, generation: number): void {
    const url = `${this.sessionPath(session)}/events?after=${cursor}&token=${encodeURIComponent(this.o.token)}`;
    const source = new EventSource(url);
    this.source = source;
    source.addEventListener('plan_updated', (ev) => {
      if (generation !== this.generation) return;
      const event = parse((ev as MessageEvent).data) as { plan?: Plan } | null;
      if (event?.plan) this.offer(event.plan);
    });
    source.addEventListener('session_ended', () => {
      // Nothing follows an end: stop listening, keep the last plan shown.
      if (generation !== this.generation) return;
      source.close();
    });
    source.addEventListener('resync', () => {
      // The log cannot continue from our cursor: start again from a snapshot.
      if (generation !== this.generation) return;
      void this.load();
    });
    source.onerror = () => {
      if (generation !== this.generation) return;
      // While CONNECTING the browser retries itself, sending Last-Event-ID;
      // CLOSED means it gave up (a refusal), so start again from a snapshot.
      if (source.readyState === EventSource.CLOSED) this.retryLater(generation, RETRY_MS);
    };
  }

  private retryLater(generation: number, ms: number): void {
    if (this.retry || this.destroyed) return;
    this.retry = setTimeout(() => {
      this.retry = null;
      if (generation === this.generation && !this.destroyed) void this.load();
    }, ms);
  }

  /** Shows `plan` unless the one shown is newer (SPEC E2: never roll back). */
  private offer(plan: Plan | null): void {
    const shown = this.plan;
    if (shown && !(plan && plan.revision > shown.revision)) return;
    if (shown === null && plan === null) return;
    this.plan = plan;
    this.render();
  }

  private showError(message: string | null): void {
    this.error.textContent = message ?? '';
    this.error.hidden = message === null;
  }

  private render(): void {
    const plan = this.plan;
    this.panel.hidden = plan === undefined && this.error.hidden;
    this.panel.dataset.revision = plan ? String(plan.revision) : '';
    const explanation = plan?.explanation ?? '';
    this.explanation.textContent = explanation;
    this.explanation.hidden = explanation === '';
    const steps = plan?.steps ?? [];
    this.steps.replaceChildren(...steps.map(stepItem));
    this.empty.hidden = plan === undefined || steps.length > 0;
    this.empty.textContent = plan === null ? 'The Planner has not made a plan yet.' : 'The plan has no steps.';
  }
}

function stepItem(step: PlanStep): HTMLLIElement {
  const known = Object.prototype.hasOwnProperty.call(STATUS, step.status);
  const status = known ? STATUS[step.status] : { label: String(step.status), mark: '?', title: '' };
  const li = el('li', 'plan-step');
  li.dataset.step = String(step.id);
  li.dataset.status = known ? step.status : 'unknown';
  li.title = status.title;
  const mark = el('span', 'plan-step-mark', status.mark);
  mark.setAttribute('aria-hidden', 'true');
  li.append(
    mark,
    el('span', 'plan-step-text', String(step.description ?? '')),
    el('span', 'plan-step-status', status.label),
  );
  return li;
}

function parse(data: unknown): unknown {
  try {
    return typeof data === 'string' ? JSON.parse(data) : null;
  } catch {
    return null;
  }
}
