// The document's Chat (docs/protocol.md): lines arrive live from the
// document's feed (feed.ts) — members', the Planner's accepted replies,
// and Margin's true lifecycle lines — and members post with
// POST /documents/{id}/chat; a line mentioning @planner starts a turn.
//
// Chat text is written by members and by the Planner (a model): it is
// untrusted, and every string here is rendered with textContent, never
// innerHTML.

import { ApiError, api, describe } from './api';
import { byId, el } from './dom';
import { clock } from './time';
import type { ChatMessageView } from './wire';

export interface ChatOptions {
  docId: string;
  token: string;
  readOnly: boolean;
  onAuthFailure: (e: unknown) => boolean;
}

const AUTHORS: Record<string, string> = { planner: 'Planner', system: 'Margin' };

export class ChatPanel {
  private destroyed = false;
  private readonly base: string;
  private readonly list = byId<HTMLOListElement>('chat-list');
  private readonly empty = byId<HTMLElement>('chat-empty');
  private readonly form = byId<HTMLFormElement>('chat-form');
  private readonly input = byId<HTMLTextAreaElement>('chat-input');
  private readonly send = byId<HTMLButtonElement>('chat-send');
  private readonly error = byId<HTMLElement>('chat-error');
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

  constructor(private readonly o: ChatOptions) {
    this.base = `/documents/${encodeURIComponent(o.docId)}`;
    this.list.replaceChildren();
    this.empty.hidden = false;
    this.showError(null);
    this.input.value = '';
    this.setReadOnly(o.readOnly);
    this.form.addEventListener('submit', this.onSubmit);
    this.input.addEventListener('keydown', this.onKey);
  }

  destroy(): void {
    this.destroyed = true;
    this.form.removeEventListener('submit', this.onSubmit);
    this.input.removeEventListener('keydown', this.onKey);
    this.list.replaceChildren();
  }

  /** Viewers and archived documents read Chat without posting. */
  setReadOnly(readOnly: boolean): void {
    this.o.readOnly = readOnly;
    this.form.hidden = readOnly;
  }

  /** Shows a line the feed delivered (in order, each once). */
  add(m: ChatMessageView): void {
    const nearBottom = this.list.scrollHeight - this.list.scrollTop - this.list.clientHeight < 40;
    const kind = m.kind === 'member' || m.kind === 'planner' ? m.kind : 'system';
    const li = el('li', `chat-line kind-${kind}`);
    li.dataset.kind = kind;
    li.dataset.seq = String(m.seq);
    const head = el('div', 'chat-head');
    head.append(el('span', 'chat-author', AUTHORS[kind] ?? String(m.author ?? '')));
    if (typeof m.created_at === 'number') {
      const time = el('time', 'chat-time', clock(m.created_at));
      time.dateTime = new Date(m.created_at).toISOString();
      head.append(time);
    }
    li.append(head, el('div', 'chat-text', String(m.text ?? '')));
    this.list.append(li);
    this.empty.hidden = true;
    if (nearBottom || kind === 'member') this.list.scrollTop = this.list.scrollHeight;
  }

  private showError(message: string | null): void {
    this.error.textContent = message ?? '';
    this.error.hidden = message === null;
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
      // The line itself comes back over the feed once it is committed.
      await api('POST', `${this.base}/chat`, this.o.token, { text });
      if (this.destroyed) return;
      this.input.value = '';
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
}
