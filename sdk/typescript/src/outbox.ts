// What a Planner's turns, runs and Stops send, in order: queued while no
// link is up (a resumable drop), written once one is, after its `resume`.
// Bounded: a sender waits for room once OUTBOX messages are waiting.

import { ToolError } from './errors.js';
import type { ClientMessage } from './wire.js';

/** Messages that may wait before a sender waits for room. */
export const OUTBOX = 256;

/** Writes one message to the open link; false when it is not open. */
export type Sink = (message: ClientMessage) => boolean;

export class Outbox {
  readonly #queue: ClientMessage[] = [];
  readonly #room: { resolve: () => void; reject: (e: Error) => void }[] = [];
  #sink: Sink | null = null;
  #closed: ToolError | null = null;

  /**
   * Queues `message`; resolves once it is queued (not written), and
   * rejects with a `link-closed` ToolError once the outbox is closed.
   */
  async push(message: ClientMessage): Promise<void> {
    while (this.#queue.length >= OUTBOX && !this.#closed) {
      await new Promise<void>((resolve, reject) => this.#room.push({ resolve, reject }));
    }
    if (this.#closed) throw this.#closed;
    this.#queue.push(message);
    this.flush();
  }

  /** Writes what waits to `sink`, and from now on each message as it is queued. */
  open(sink: Sink): void {
    this.#sink = sink;
    this.flush();
  }

  /** The link is down: messages wait for the next one. */
  pause(): void {
    this.#sink = null;
  }

  /** Forgets what waits: it was for a link whose work is gone. */
  clear(): void {
    this.#queue.length = 0;
    this.#release();
  }

  /** No link will come: every send from now on fails, naming `why`. */
  close(why: string): void {
    this.#closed = ToolError.linkClosed(why);
    this.#sink = null;
    this.#queue.length = 0;
    for (const waiter of this.#room.splice(0)) waiter.reject(this.#closed);
  }

  flush(): void {
    while (this.#sink && this.#queue.length > 0) {
      const message = this.#queue[0]!;
      if (!this.#sink(message)) {
        this.#sink = null;
        break;
      }
      this.#queue.shift();
      this.#release();
    }
  }

  #release(): void {
    while (this.#room.length > 0 && this.#queue.length < OUTBOX) this.#room.shift()!.resolve();
  }
}
