// The document's Chat and the Planner's status, below the document: polls
// GET /documents/{id}/chat?after=SEQ and GET /documents/{id}/planner every
// POLL_MS, posts Chat lines, and sends Stop and Resume (docs/protocol.md).
//
// Chat text is written by members and by the Planner (a model): it is
// untrusted, and every string here is rendered with textContent, never
// innerHTML.

import { ApiError, api, describe } from './api';
import { byId, el } from './dom';

const POLL_MS = 1500;

interface ChatMessage {
  seq: number;
  author: string;
  kind: string;
  text: string;
  created_at?: string;
}

interface PlannerRun {
  run: string;
  name: string;
  status: string;
  age_ms: number;
  /** The Planner is disconnected: `status` is the last one reported. */
  disconnected?: boolean;
}

interface PlannerStatus {
  connected: boolean;
  /** Its link dropped; its work is kept until it reconnects (SPEC L2). */
  disconnected?: boolean;
  machine?: string;
  /** The session bound, connected or not: its plan is in plan.ts. */
  session?: string;
  replying: boolean;
  stop_pending: boolean;
  runs: PlannerRun[];
}

export interface ChatOptions {
  docId: string;
  token: string;
  readOnly: boolean;
  onAuthFailure: (e: unknown) => boolean;
  /** Told the Planner session each PlannerView names (null for none). */
  onSession?: (session: string | null) => void;
}



const KINDS = new Set(['member', 'planner', 'system']);

export class ChatPanel {
  private destroyed = false;
  private lastSeq = 0;
  private timer: ReturnType<typeof setTimeout> | null = null;
  private polling = false;
  private again = false;
  private planner: PlannerStatus | null = null;
  private readonly base: string;
  private readonly list = byId<HTMLOListElement>('chat-list');
  private readonly empty = byId<HTMLElement>('chat-empty');
  private readonly form = byId<HTMLFormElement>('chat-form');
  private readonly input = byId<HTMLTextAreaElement>('chat-input');
  private readonly send = byId<HTMLButtonElement>('chat-send');
  private readonly error = byId<HTMLElement>('chat-error');
  private readonly status = byId<HTMLElement>('planner-status');
  private readonly runs = byId<HTMLElement>('planner-runs');
  private readonly stop = byId<HTMLButtonElement>('planner-stop');
  private readonly resume = byId<HTMLButtonElement>('planner-resume');
  private readonly onSubmit = (ev: Event) => {
    ev.preventDefault();
    void this.post();
  };
  private readonly onKey = (ev: KeyboardEvent) => {
    if (ev.key === 'Enter' && !ev.shiftKey && !ev.isComposing) {
      ev.preventDefault();
      void this.post();
    }
  };
  private readonly onStop = () => void this.requestStop();
  private readonly onResume = () => void this.requestResume();

  constructor(private readonly o: ChatOptions) {
    this.base = `/documents/${encodeURIComponent(o.docId)}`;
    this.list.replaceChildren();
    this.empty.hidden = false;
    this.showError(null);
    this.form.hidden = o.readOnly;
    this.input.value = '';
    this.stop.hidden = true;
    this.resume.hidden = true;
    this.runs.replaceChildren();
    this.status.dataset.state = 'unknown';
    this.status.textContent = 'Planner status loading…';
    this.form.addEventListener('submit', this.onSubmit);
    this.input.addEventListener('keydown', this.onKey);
    this.stop.addEventListener('click', this.onStop);
    this.resume.addEventListener('click', this.onResume);
    void this.poll();
  }

  destroy(): void {
    this.destroyed = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    this.form.removeEventListener('submit', this.onSubmit);
    this.input.removeEventListener('keydown', this.onKey);
    this.stop.removeEventListener('click', this.onStop);
    this.resume.removeEventListener('click', this.onResume);
    this.list.replaceChildren();
    this.runs.replaceChildren();
    this.stop.hidden = true;
    this.resume.hidden = true;
  }

  private showError(message: string | null): void {
    this.error.textContent = message ?? '';
    this.error.hidden = message === null;
  }

  /** Fetches new Chat lines and the Planner's status; reschedules itself. */
  private async poll(): Promise<void> {
    if (this.destroyed) return;
    if (this.polling) {
      this.again = true;
      return;
    }
    this.polling = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    try {
      const [chat, planner] = await Promise.all([
        api<{ messages: ChatMessage[] }>('GET', `${this.base}/chat?after=${this.lastSeq}`, this.o.token),
        api<PlannerStatus>('GET', `${this.base}/planner`, this.o.token),
      ]);
      if (this.destroyed) return;
      this.append(chat.messages ?? []);
      this.renderPlanner(planner);
    } catch (e) {
      if (this.destroyed) return;
      if (this.o.onAuthFailure(e)) return;
      this.status.dataset.state = 'unknown';
      this.status.textContent = `Could not load Chat: ${describe(e)}`;
    } finally {
      this.polling = false;
    }
    if (this.destroyed) return;
    if (this.again) {
      this.again = false;
      void this.poll();
    } else {
      this.timer = setTimeout(() => void this.poll(), POLL_MS);
    }
  }

  private append(messages: ChatMessage[]): void {
    for (const m of messages) {
      if (typeof m.seq !== 'number' || m.seq <= this.lastSeq) continue;
      this.lastSeq = m.seq;
      const kind = KINDS.has(m.kind) ? m.kind : 'system';
      const li = el('li', `chat-line kind-${kind}`);
      li.dataset.kind = kind;
      li.dataset.seq = String(m.seq);
      const head = el('div', 'chat-head');
      const who = kind === 'system' ? 'Margin' : kind === 'planner' ? `Planner${m.author ? ` (${m.author})` : ''}` : m.author;
      head.append(el('span', 'chat-author', who), el('span', 'chat-kind', kind));
      if (m.created_at) {
        const t = new Date(m.created_at);
        if (!Number.isNaN(t.getTime())) {
          const time = el('time', 'chat-time', t.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' }));
          time.dateTime = m.created_at;
          head.append(time);
        }
      }
      li.append(head, el('div', 'chat-text', String(m.text ?? '')));
      this.list.append(li);
    }
    this.empty.hidden = this.list.childElementCount > 0;
    if (messages.length) this.list.scrollTop = this.list.scrollHeight;
  }

  private renderPlanner(p: PlannerStatus): void {
    this.planner = p;
    this.o.onSession?.(typeof p.session === 'string' && p.session ? p.session : null);
    const parts: string[] = [];
    const machine = p.machine ? ` (${p.machine})` : '';
    if (p.connected) parts.push(`Planner connected${machine}`);
    else if (p.disconnected) parts.push(`Planner disconnected${machine} — its work is kept until it reconnects`);
    else parts.push('Planner not connected');
    if (p.replying) parts.push('replying…');
    if (p.stop_pending) parts.push('stop requested');
    this.status.textContent = parts.join(' · ');
    this.status.dataset.state = p.connected
      ? p.replying
        ? 'replying'
        : 'connected'
      : p.disconnected
        ? 'away'
        : 'disconnected';
    this.runs.replaceChildren(
      ...(p.runs ?? []).map((r) => {
        const card = el('div', 'run-card');
        card.dataset.run = r.run;
        card.dataset.status = r.status;
        card.dataset.disconnected = String(Boolean(r.disconnected));
        const minutes = Math.max(0, Math.floor((Number(r.age_ms) || 0) / 60000));
        card.append(
          el('span', 'run-name', r.name || r.run),
          el('span', `run-status status-${r.status}`, r.disconnected ? `disconnected · ${r.status}` : r.status),
          el('span', 'run-age', `${minutes} min`),
        );
        return card;
      }),
    );
    // A Stop pressed while the Planner is away is held for it (SPEC L4).
    this.stop.hidden = this.o.readOnly || !(p.connected || p.disconnected);
    this.stop.disabled = p.stop_pending;
    // Resume undoes a Stop not yet confirmed; while away it is refused.
    this.resume.hidden = this.o.readOnly || !p.stop_pending;
    this.resume.disabled = Boolean(p.disconnected);
    this.resume.title = p.disconnected ? 'The Planner is disconnected: a Resume is not held for it.' : '';
  }

  private async post(): Promise<void> {
    if (this.o.readOnly || this.send.disabled) return;
    const text = this.input.value;
    if (!text.trim()) {
      this.showError('Write a message first.');
      return;
    }
    this.send.disabled = true;
    this.showError(null);
    try {
      await api('POST', `${this.base}/chat`, this.o.token, { text });
      if (this.destroyed) return;
      this.input.value = '';
      void this.poll();
    } catch (e) {
      if (this.destroyed || this.o.onAuthFailure(e)) return;
      this.showError(
        e instanceof ApiError && e.code === 'invalid_message'
          ? `Message not sent (invalid_message): ${describe(e)}`
          : `Could not send the message: ${describe(e)}`,
      );
    } finally {
      this.send.disabled = false;
    }
  }

  private async requestResume(): Promise<void> {
    if (this.o.readOnly || this.resume.disabled) return;
    this.resume.disabled = true;
    this.showError(null);
    try {
      await api('POST', `${this.base}/planner/resume`, this.o.token);
      if (this.destroyed) return;
      void this.poll();
    } catch (e) {
      if (this.destroyed || this.o.onAuthFailure(e)) return;
      this.resume.disabled = false;
      this.showError(`Could not resume the Planner: ${describe(e)}`);
    }
  }

  private async requestStop(): Promise<void> {
    if (this.o.readOnly || !(this.planner?.connected || this.planner?.disconnected)) return;
    this.stop.disabled = true;
    this.showError(null);
    try {
      await api('POST', `${this.base}/planner/stop`, this.o.token);
      if (this.destroyed) return;
      this.status.textContent = `${this.status.textContent} · stop requested`;
      void this.poll();
    } catch (e) {
      if (this.destroyed || this.o.onAuthFailure(e)) return;
      this.stop.disabled = false;
      this.showError(
        e instanceof ApiError && e.status === 409
          ? 'There is no Planner session to stop.'
          : `Could not stop the Planner: ${describe(e)}`,
      );
    }
  }
}
