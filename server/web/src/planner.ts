// The Planner's status, in one component (SPEC B1a, L2, L4, R1): the state
// the server names (PlannerView.state) in words, what it means for the
// person looking, Stop only while there is something to stop — saying
// what it ends — and Resume while a Stop waits to be confirmed; run cards,
// live ones on their own and finished ones grouped by name, with true ages
// counted from when the machine reported them.
//
// Views arrive live from the document's feed (feed.ts). Run names are the
// Planner's (a model's) words: textContent only.

import { ApiError, api, describe } from './api';
import { byId, el } from './dom';
import { ago, duration } from './time';
import type { PlannerState, PlannerView, RunView } from './wire';

/** How often live ages are redrawn. */
const TICK_MS = 15_000;

export interface PlannerOptions {
  docId: string;
  token: string;
  readOnly: boolean;
  onAuthFailure: (e: unknown) => boolean;
  /** Told the session each view names (null for none): the plan follows it. */
  onSession: (session: string | null) => void;
}

const LABELS: Record<PlannerState, string> = {
  unlinked: 'No Planner linked',
  available: 'Available',
  working: 'Working',
  waiting: 'Waiting',
  disconnected: 'Disconnected',
  stopping: 'Stopping…',
  stopped: 'Stopped',
};

function plural(n: number, one: string, many = `${one}s`): string {
  return `${n} ${n === 1 ? one : many}`;
}

/** Parts joined into the start of a sentence: "Replying, running Build". */
function sentence(parts: (string | null)[]): string {
  const text = parts.filter(Boolean).join(', ');
  return text.charAt(0).toUpperCase() + text.slice(1);
}

const isLive = (r: RunView) => r.status === 'running' || r.status === 'paused';

export class PlannerPanel {
  private view: PlannerView | null = null;
  private reachable = true;
  private received = Date.now();
  private timer: ReturnType<typeof setInterval>;
  private readonly status = byId<HTMLElement>('planner-status');
  private readonly detail = byId<HTMLElement>('planner-detail');
  private readonly stop = byId<HTMLButtonElement>('planner-stop');
  private readonly resume = byId<HTMLButtonElement>('planner-resume');
  private readonly note = byId<HTMLElement>('planner-stop-note');
  private readonly runs = byId<HTMLElement>('planner-runs');
  private readonly onStop = () => void this.send('stop');
  private readonly onResume = () => void this.send('resume');
  /** Which run groups people opened, kept across re-renders. */
  private readonly open = new Set<string>();

  constructor(private readonly o: PlannerOptions) {
    this.status.dataset.state = 'loading';
    this.status.textContent = 'Loading…';
    this.detail.textContent = '';
    this.note.textContent = '';
    this.stop.hidden = true;
    this.resume.hidden = true;
    this.runs.replaceChildren();
    this.stop.addEventListener('click', this.onStop);
    this.resume.addEventListener('click', this.onResume);
    this.timer = setInterval(() => this.renderRuns(), TICK_MS);
  }

  destroy(): void {
    clearInterval(this.timer);
    this.stop.removeEventListener('click', this.onStop);
    this.resume.removeEventListener('click', this.onResume);
    this.runs.replaceChildren();
    this.stop.hidden = true;
    this.resume.hidden = true;
  }

  setReadOnly(readOnly: boolean): void {
    this.o.readOnly = readOnly;
    if (this.view) this.render();
  }

  /**
   * Whether the server can be reached. While it cannot, the Planner's
   * status is unknown — not "not linked" — and nothing is offered to do.
   */
  setReachable(reachable: boolean): void {
    if (reachable === this.reachable) return;
    this.reachable = reachable;
    this.render();
  }

  /** Shows a view the feed delivered. */
  show(view: PlannerView): void {
    this.view = view;
    this.received = Date.now();
    this.o.onSession(typeof view.session === 'string' && view.session ? view.session : null);
    this.render();
  }

  private render(): void {
    if (!this.reachable) {
      this.status.dataset.state = 'unknown';
      this.status.textContent = 'Unknown while disconnected';
      this.status.title = '';
      this.detail.textContent = "The server cannot be reached; the Planner's status shows again once it can.";
      this.stop.hidden = true;
      this.resume.hidden = true;
      this.note.textContent = '';
      return;
    }
    const v = this.view;
    if (!v) return;
    const state: PlannerState = v.state ?? 'unlinked';
    const runs = v.runs ?? [];
    const live = runs.filter(isLive);
    const machine = v.machine ? ` on ${v.machine}` : '';
    this.status.dataset.state = state;
    this.status.textContent = LABELS[state] ?? state;
    this.status.title = v.machine ? `Planner machine: ${v.machine}` : '';

    const running = live.filter((r) => r.status === 'running');
    const paused = live.filter((r) => r.status === 'paused');
    const detail: Record<PlannerState, string> = {
      unlinked: this.o.readOnly
        ? 'No Planner machine is linked for this document.'
        : "None of the document owner's Planner machines is linked, so @planner cannot start it. See “Connecting a Planner” in Margin's docs.",
      available: `${v.machine ? `Its machine “${v.machine}” is linked. ` : ''}Mention @planner in Chat to ask it.`,
      working: `${sentence([v.replying ? 'replying' : null, running.length ? `running ${running.map((r) => r.name || r.run).join(', ')}` : null])}${machine}.`,
      waiting: `${sentence([v.questions ? `${plural(v.questions, 'question')} for people` : null, paused.length ? `${plural(paused.length, 'run')} paused` : null])}.`,
      disconnected: `The Planner's machine${machine} dropped its link. Its work is kept until it reconnects; decisions stay answerable.`,
      stopping: v.disconnected
        ? 'Stop is held until the Planner reconnects.'
        : 'Stop was sent; waiting for the Planner to confirm.',
      stopped: `The Planner stopped. Mention @planner to start it again${v.machine ? '' : ' once a machine is linked'}.`,
    };
    this.detail.textContent = detail[state] ?? '';

    // Stop only while there is something to stop; say what it ends.
    const ends = [
      v.replying ? 'its reply' : null,
      live.length ? plural(live.length, 'run') : null,
      v.questions ? plural(v.questions, 'question') : null,
    ].filter((x): x is string => x !== null);
    const stoppable = !this.o.readOnly && !v.stop_pending && ends.length > 0;
    this.stop.hidden = !stoppable;
    this.stop.disabled = false;
    const what = ends.length > 1 ? `${ends.slice(0, -1).join(', ')} and ${ends[ends.length - 1]}` : ends[0] ?? '';
    this.stop.setAttribute('aria-label', stoppable ? `Stop the Planner: ends ${what}` : 'Stop the Planner');
    this.note.textContent = stoppable ? `Ends ${what}.` : '';
    // Resume withdraws a Stop the machine has not confirmed; while away it
    // is refused, not held (SPEC L4).
    this.resume.hidden = this.o.readOnly || !v.stop_pending;
    this.resume.disabled = Boolean(v.disconnected);
    this.resume.title = v.disconnected ? 'The Planner is disconnected: a Resume is not held for it.' : '';
    this.renderRuns();
  }

  /** A run's age now: counted from when the view arrived for a live one. */
  private age(r: RunView): number {
    const base = Number(r.age_ms) || 0;
    return isLive(r) ? base + (Date.now() - this.received) : base;
  }

  private runCard(r: RunView): HTMLElement {
    const card = el('div', 'run-card');
    card.dataset.run = r.run;
    card.dataset.status = r.status;
    card.dataset.disconnected = String(Boolean(r.disconnected));
    const status = r.disconnected ? `disconnected · ${r.status}` : r.status;
    const age = isLive(r)
      ? `for ${duration(this.age(r))}`
      : `after ${duration(this.age(r))}${r.ended_at ? `, ${ago(r.ended_at)}` : ''}`;
    card.append(
      el('span', 'run-name', r.name || r.run),
      el('span', `run-status status-${r.status}`, status),
      el('span', 'run-age', age),
    );
    return card;
  }

  private renderRuns(): void {
    const runs = this.view?.runs ?? [];
    const parts: HTMLElement[] = runs.filter(isLive).map((r) => this.runCard(r));
    // Finished runs, grouped by name, newest group first.
    const groups = new Map<string, RunView[]>();
    for (const r of runs.filter((r) => !isLive(r))) {
      const name = r.name || r.run;
      groups.set(name, [...(groups.get(name) ?? []), r]);
    }
    const ordered = [...groups.entries()].sort(
      ([, a], [, b]) => (b[b.length - 1].ended_at ?? 0) - (a[a.length - 1].ended_at ?? 0),
    );
    for (const [name, group] of ordered) {
      const last = group[group.length - 1];
      if (group.length === 1) {
        parts.push(this.runCard(last));
        continue;
      }
      const box = el('details', 'run-group');
      box.dataset.name = name;
      box.open = this.open.has(name);
      box.addEventListener('toggle', () => (box.open ? this.open.add(name) : this.open.delete(name)));
      const summary = el('summary');
      summary.append(
        el('span', 'run-name', name),
        el('span', 'run-count', `${group.length} runs`),
        el('span', `run-status status-${last.status}`, `last ${last.status}`),
        el('span', 'run-age', last.ended_at ? ago(last.ended_at) : ''),
      );
      const list = el('ol');
      for (const r of [...group].reverse()) {
        const li = el('li');
        li.append(this.runCard(r));
        list.append(li);
      }
      box.append(summary, list);
      parts.push(box);
    }
    this.runs.replaceChildren(...parts);
  }

  private async send(act: 'stop' | 'resume'): Promise<void> {
    const button = act === 'stop' ? this.stop : this.resume;
    if (this.o.readOnly || button.disabled) return;
    button.disabled = true;
    try {
      await api('POST', `/documents/${encodeURIComponent(this.o.docId)}/planner/${act}`, this.o.token);
      // The feed brings the new state (stopping, or working again).
    } catch (e) {
      if (this.o.onAuthFailure(e)) return;
      button.disabled = false;
      this.detail.textContent =
        e instanceof ApiError && e.status === 409
          ? `Nothing to ${act}: ${e.message}`
          : `Could not ${act} the Planner: ${describe(e)}`;
    }
  }
}
