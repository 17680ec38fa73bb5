// A document's feed (GET /documents/{id}/events, docs/protocol.md): its
// Chat lines, its Planner's status and the document itself (title, archive
// state, the reader's role), pushed by the server the moment they are
// committed. The browser's EventSource reconnects by itself and
// sends Last-Event-ID (a Chat line's seq); if it gives up (a refusal, the
// server gone for long) the feed opens a new one after the last line it
// delivered, so no line is shown twice or skipped — unless the document is
// gone for this reader (deleted, or they were removed), which it says.

import { ApiError, api } from './api';
import type { ChatMessageView, DocumentInfo, PlannerView } from './wire';

/** Wait before opening a new stream after the browser gave one up. */
const RETRY_MS = 2000;

export interface FeedHandlers {
  chat: (line: ChatMessageView) => void;
  planner: (view: PlannerView) => void;
  document: (doc: DocumentInfo) => void;
  /** The reader may no longer open the document (404). */
  gone: () => void;
}

export class DocumentFeed {
  private source: EventSource | null = null;
  private retry: ReturnType<typeof setTimeout> | null = null;
  private lastSeq = 0;
  private destroyed = false;

  constructor(
    private readonly docId: string,
    private readonly token: string,
    private readonly on: FeedHandlers,
  ) {
    this.open();
  }

  destroy(): void {
    this.destroyed = true;
    this.pause();
  }

  /**
   * Closes the stream while the tab is hidden: a browser keeps at most six
   * connections to a server over HTTP/1.1, and a stream per background tab
   * would soon hold them all. [`resume`] catches up from the last line.
   */
  pause(): void {
    this.source?.close();
    this.source = null;
    if (this.retry) clearTimeout(this.retry);
    this.retry = null;
  }

  /** Opens the stream again after [`pause`], from the last line shown. */
  resume(): void {
    if (!this.destroyed && !this.source && !this.retry) this.open();
  }

  private async retryOrGone(): Promise<void> {
    try {
      await api('GET', `/documents/${encodeURIComponent(this.docId)}`, this.token);
    } catch (e) {
      if (e instanceof ApiError && (e.status === 404 || e.status === 401)) {
        if (!this.destroyed) this.on.gone();
        return;
      }
    }
    if (this.destroyed) return;
    this.retry = setTimeout(() => {
      this.retry = null;
      this.open();
    }, RETRY_MS);
  }

  private open(): void {
    if (this.destroyed) return;
    const url =
      `/documents/${encodeURIComponent(this.docId)}/events` +
      `?after=${this.lastSeq}&token=${encodeURIComponent(this.token)}`;
    const source = new EventSource(url);
    this.source = source;
    source.addEventListener('chat', (ev) => {
      const line = parse((ev as MessageEvent).data) as ChatMessageView | null;
      if (!line || typeof line.seq !== 'number' || line.seq <= this.lastSeq) return;
      this.lastSeq = line.seq;
      this.on.chat(line);
    });
    source.addEventListener('planner', (ev) => {
      const view = parse((ev as MessageEvent).data) as PlannerView | null;
      if (view && typeof view === 'object') this.on.planner(view);
    });
    source.addEventListener('document', (ev) => {
      const doc = parse((ev as MessageEvent).data) as DocumentInfo | null;
      if (doc && typeof doc === 'object' && doc.id === this.docId) this.on.document(doc);
    });
    source.onerror = () => {
      // CONNECTING: the browser retries itself. CLOSED: it gave up, which
      // a 404 also does; ask why before trying again.
      if (source.readyState !== EventSource.CLOSED || this.destroyed) return;
      this.source = null;
      void this.retryOrGone();
    };
  }
}

function parse(data: unknown): unknown {
  try {
    return typeof data === 'string' ? JSON.parse(data) : null;
  } catch {
    return null;
  }
}
