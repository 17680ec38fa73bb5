// What a `resume` names that outlives a link: the sessions this machine
// holds and the questions each waits on (SPEC L3, L5). Kept in memory, and
// with a held file also on disk (private, replaced atomically on each
// change), so a machine that restarts resumes them. The file's JSON is the
// Rust SDK's: {"session": ["question", …], …}, sorted.

import { readFileSync } from 'node:fs';
import { writePrivateFile } from './credential.js';
import type { Logger } from './log.js';

export class Held {
  readonly #sessions = new Map<string, Set<string>>();
  #writing: Promise<void> = Promise.resolve();

  /** What `file` holds (nothing when it is missing or unreadable). */
  constructor(
    private readonly file: string | undefined,
    private readonly log: Logger,
  ) {
    if (!file) return;
    let text: string;
    try {
      text = readFileSync(file, 'utf8');
    } catch {
      return;
    }
    try {
      const parsed: unknown = JSON.parse(text);
      if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) throw new Error('not an object');
      for (const [session, questions] of Object.entries(parsed)) {
        if (!Array.isArray(questions) || !questions.every((q) => typeof q === 'string')) {
          throw new Error(`session ${session} does not list its questions`);
        }
        this.#sessions.set(session, new Set(questions));
      }
    } catch (error) {
      this.#sessions.clear();
      log.warn('the held sessions file is unreadable; resuming none', { path: file, error: String(error) });
    }
  }

  /** Each session held, sorted, with its questions, sorted. */
  entries(): [string, string[]][] {
    return [...this.#sessions.keys()].sort().map((session) => [session, [...this.#sessions.get(session)!].sort()]);
  }

  holdSession(session: string): void {
    this.#change(() => {
      if (this.#sessions.has(session)) return false;
      this.#sessions.set(session, new Set());
      return true;
    });
  }

  holdQuestion(session: string, request: string): void {
    this.#change(() => {
      const questions = this.#sessions.get(session) ?? new Set<string>();
      this.#sessions.set(session, questions);
      if (questions.has(request)) return false;
      questions.add(request);
      return true;
    });
  }

  settleQuestion(session: string, request: string): void {
    this.#change(() => this.#sessions.get(session)?.delete(request) ?? false);
  }

  forgetSession(session: string): void {
    this.#change(() => this.#sessions.delete(session));
  }

  forgetAll(): void {
    this.#change(() => {
      const any = this.#sessions.size > 0;
      this.#sessions.clear();
      return any;
    });
  }

  /** Resolves once every change so far is on disk (or failed and was logged). */
  saved(): Promise<void> {
    return this.#writing;
  }

  /** Applies `change`; when it changed anything, the file is written again, in order. */
  #change(change: () => boolean): void {
    if (!change() || !this.file) return;
    const file = this.file;
    const json = JSON.stringify(Object.fromEntries(this.entries()));
    this.#writing = this.#writing.then(() =>
      writePrivateFile(file, json).catch((error) =>
        this.log.warn('cannot save the held sessions', { path: file, error: String(error) }),
      ),
    );
  }
}
