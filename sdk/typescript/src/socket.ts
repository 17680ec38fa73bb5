// One WebSocket to /machine, opened with the machine's credential and read
// as a queue: every text frame the server sends is kept, in order, until
// the reader takes it, so nothing is lost between `welcome` and the loop
// that serves the link, and every read waits at most as long as its caller
// says. How a socket ended becomes an `Ended`.

import WebSocket from 'ws';
import { ConnectError } from './errors.js';
import type { Ended } from './ended.js';
import { MAX_SERVER_FRAME_BYTES } from './protocol.js';
import type { ClientMessage, Code } from './wire.js';

/** Most of an error body read from a refused upgrade. */
const MAX_ERROR_BODY_BYTES = 64 * 1024;
/** Most frames kept for a reader that is not reading before the link is cut. */
const MAX_UNREAD = 4096;

/** What a read of the socket gave. */
export type Read =
  | { kind: 'text'; text: string }
  | { kind: 'end'; ended: Ended }
  /** Nothing came for the read's timeout. */
  | { kind: 'silent' }
  /** The read's signal aborted. */
  | { kind: 'aborted' };

/** An open link socket. */
export class LinkSocket {
  readonly #ws: WebSocket;
  readonly #unread: Read[] = [];
  #waiting: ((read: Read) => void) | null = null;
  #ended: Ended | null = null;
  #lastError: string | null = null;

  private constructor(ws: WebSocket) {
    this.#ws = ws;
    ws.on('message', (data, isBinary) => {
      // The link speaks JSON text; binary frames carry nothing for us.
      if (isBinary) return;
      if (this.#unread.length >= MAX_UNREAD) {
        this.terminate();
        return;
      }
      this.#push({ kind: 'text', text: String(data) });
    });
    ws.on('error', (error) => {
      this.#lastError = error.message;
    });
    ws.on('close', (code, reason) => {
      // 1006: the connection went without a close frame.
      const ended: Ended =
        code === 1006
          ? { kind: 'dropped', reason: this.#lastError ?? 'connection closed' }
          : { kind: 'closed', code, reason: reason.toString('utf8') };
      this.#ended = ended;
      this.#push({ kind: 'end', ended });
    });
  }

  /**
   * Connects to `url` with `credential`, within `timeoutMs`. A refused
   * upgrade is a ConnectError `refused` with the error body's code.
   */
  static open(url: string, credential: string, timeoutMs: number, signal?: AbortSignal): Promise<LinkSocket> {
    return new Promise((resolve, reject) => {
      let settled = false;
      const settle = (outcome: () => void) => {
        if (settled) return;
        settled = true;
        signal?.removeEventListener('abort', aborted);
        outcome();
      };
      let ws: WebSocket;
      try {
        ws = new WebSocket(url, {
          headers: { Authorization: `Bearer ${credential}` },
          handshakeTimeout: timeoutMs,
          maxPayload: MAX_SERVER_FRAME_BYTES,
          perMessageDeflate: false,
          followRedirects: false,
        });
      } catch (error) {
        reject(ConnectError.network((error as Error).message));
        return;
      }
      const aborted = () => {
        ws.terminate();
        settle(() => reject(ConnectError.network('connecting was given up')));
      };
      signal?.addEventListener('abort', aborted, { once: true });
      if (signal?.aborted) aborted();
      ws.once('open', () => settle(() => resolve(new LinkSocket(ws))));
      ws.once('unexpected-response', (request, response) => {
        const status = response.statusCode ?? 0;
        readBody(response, timeoutMs).then((body) => {
          request.destroy();
          const { code, message } = errorBody(body);
          settle(() => reject(ConnectError.refused(status, code, message)));
        });
      });
      ws.on('error', (error) => settle(() => reject(ConnectError.network(error.message))));
    });
  }

  /** Sends `message`; false when the socket is no longer open. */
  send(message: ClientMessage): boolean {
    if (this.#ws.readyState !== WebSocket.OPEN) return false;
    this.#ws.send(JSON.stringify(message));
    return true;
  }

  /**
   * The next thing the server sent, or how the socket ended, waiting at
   * most `timeoutMs`, or until `signal` aborts.
   */
  read(timeoutMs: number, signal?: AbortSignal): Promise<Read> {
    const queued = this.#unread.shift();
    if (queued) {
      // An end stays readable: every later read sees it too.
      if (queued.kind === 'end') this.#unread.unshift(queued);
      return Promise.resolve(queued);
    }
    if (signal?.aborted) return Promise.resolve({ kind: 'aborted' });
    return new Promise((resolve) => {
      const done = (read: Read) => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', aborted);
        this.#waiting = null;
        resolve(read);
      };
      const aborted = () => done({ kind: 'aborted' });
      const timer = setTimeout(() => done({ kind: 'silent' }), timeoutMs);
      signal?.addEventListener('abort', aborted, { once: true });
      this.#waiting = (read) => {
        if (read.kind === 'end') this.#unread.unshift(read);
        done(read);
      };
    });
  }

  /** How the socket ended, once it has. */
  get ended(): Ended | null {
    return this.#ended;
  }

  /** Closes the socket with a close frame. */
  close(code: number): void {
    this.#ws.close(code);
  }

  /** Cuts the socket at once, without a close frame. */
  terminate(): void {
    this.#ws.terminate();
  }

  #push(read: Read): void {
    const waiting = this.#waiting;
    if (waiting) waiting(read);
    else this.#unread.push(read);
  }
}

/** An upgrade refusal's body: at most MAX_ERROR_BODY_BYTES, within `timeoutMs`. */
function readBody(response: import('node:http').IncomingMessage, timeoutMs: number): Promise<string> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const done = () => {
      clearTimeout(timer);
      resolve(Buffer.concat(chunks).toString('utf8'));
    };
    const timer = setTimeout(() => {
      response.destroy();
      done();
    }, timeoutMs);
    response.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > MAX_ERROR_BODY_BYTES) {
        response.destroy();
        done();
        return;
      }
      chunks.push(chunk);
    });
    response.on('end', done);
    response.on('error', done);
  });
}

/** The code and message of an `{"error":{"code","message"}}` body (ErrorBody); none when unreadable. */
function errorBody(text: string): { code: Code | undefined; message: string } {
  try {
    const body = JSON.parse(text) as { error?: { code?: unknown; message?: unknown } };
    const { code, message } = body.error ?? {};
    if (typeof code === 'string' && typeof message === 'string') return { code: code as Code, message };
  } catch {
    // Not JSON: the status alone says what happened.
  }
  return { code: undefined, message: '' };
}
