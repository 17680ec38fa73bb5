// What a `resume` names that outlives a link: the sessions this machine
// holds, the questions each waits on (SPEC L3, L5), and what it sent that
// the server has not acknowledged yet — a turn's reply and the latest
// report of each run (L10). Kept in memory, and with a held file also on
// disk (private, replaced atomically on each change), so a machine that
// restarts resumes them. The file is margin_protocol::kept's KeptSessions,
// the one every SDK writes: {"session": {"questions": […], "reply"?: …,
// "runs"?: […]}, …}, sorted; an entry that is a bare array of questions
// (the format before L10) still reads.

import { readFileSync } from 'node:fs';
import { writePrivateFile } from './credential.js';
import type { Logger } from './log.js';
import type { KeptReply, KeptRun, KeptSession, KeptSessions, RunStatus } from './wire.js';

/** One session held: its questions, its kept reply, its runs' kept reports by run. */
interface Entry {
  questions: Set<string>;
  reply: KeptReply | null;
  runs: Map<string, KeptRun>;
}

const STATUSES: readonly RunStatus[] = ['running', 'paused', 'completed', 'failed', 'stopped'];

export class Held {
  readonly #sessions = new Map<string, Entry>();
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
      for (const [session, entry] of Object.entries(parsed)) this.#sessions.set(session, readEntry(session, entry));
    } catch (error) {
      this.#sessions.clear();
      log.warn('the held sessions file is unreadable; resuming none', { path: file, error: String(error) });
    }
  }

  /** Each session held, sorted, as the held file spells it (questions and runs sorted). */
  entries(): [string, KeptSession][] {
    return [...this.#sessions.keys()].sort().map((session) => {
      const entry = this.#sessions.get(session)!;
      const kept: KeptSession = { questions: [...entry.questions].sort() };
      if (entry.reply) kept.reply = { turn: entry.reply.turn, text: entry.reply.text };
      if (entry.runs.size > 0) {
        kept.runs = [...entry.runs.keys()].sort().map((run) => {
          const { name, status, attempt } = entry.runs.get(run)!;
          return { run, name, status, attempt };
        });
      }
      return [session, kept];
    });
  }

  /** The reply of `session` not yet acknowledged, if any. */
  reply(session: string): KeptReply | null {
    return this.#sessions.get(session)?.reply ?? null;
  }

  /** The latest report of `run` in `session` not yet acknowledged, if any. */
  run(session: string, run: string): KeptRun | null {
    return this.#sessions.get(session)?.runs.get(run) ?? null;
  }

  holdSession(session: string): void {
    this.#change(() => {
      if (this.#sessions.has(session)) return false;
      this.#entry(session);
      return true;
    });
  }

  holdQuestion(session: string, request: string): void {
    this.#change(() => {
      const { questions } = this.#entry(session);
      if (questions.has(request)) return false;
      questions.add(request);
      return true;
    });
  }

  settleQuestion(session: string, request: string): void {
    this.#change(() => this.#sessions.get(session)?.questions.delete(request) ?? false);
  }

  /** Keeps `reply` as the session's reply owed, in place of any earlier one. */
  keepReply(session: string, reply: KeptReply): void {
    this.#change(() => {
      this.#entry(session).reply = { turn: reply.turn, text: reply.text };
      return true;
    });
  }

  /** Settles the session's kept reply when `which` says it is the one meant. */
  settleReply(session: string, which: (reply: KeptReply) => boolean): void {
    this.#change(() => {
      const entry = this.#sessions.get(session);
      if (!entry?.reply || !which(entry.reply)) return false;
      entry.reply = null;
      return true;
    });
  }

  /** Keeps `report` as its run's latest, in place of any earlier one. */
  keepRun(session: string, report: KeptRun): void {
    this.#change(() => {
      this.#entry(session).runs.set(report.run, { ...report });
      return true;
    });
  }

  /** Settles the kept report of `run` when `which` says it is the one meant. */
  settleRun(session: string, run: string, which: (report: KeptRun) => boolean): void {
    this.#change(() => {
      const runs = this.#sessions.get(session)?.runs;
      const kept = runs?.get(run);
      if (!runs || !kept || !which(kept)) return false;
      runs.delete(run);
      return true;
    });
  }

  forgetSession(session: string): void {
    this.#change(() => this.#sessions.delete(session));
  }

  /** Lets go of the sessions that owe the server nothing; the others stay, with their questions. */
  forgetSettled(): void {
    this.#change(() => {
      let any = false;
      for (const [session, entry] of this.#sessions) {
        if (entry.reply || entry.runs.size > 0) continue;
        this.#sessions.delete(session);
        any = true;
      }
      return any;
    });
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

  #entry(session: string): Entry {
    let entry = this.#sessions.get(session);
    if (!entry) {
      entry = { questions: new Set(), reply: null, runs: new Map() };
      this.#sessions.set(session, entry);
    }
    return entry;
  }

  /** Applies `change`; when it changed anything, the file is written again, in order. */
  #change(change: () => boolean): void {
    if (!change() || !this.file) return;
    const file = this.file;
    const kept: KeptSessions = Object.fromEntries(this.entries());
    const json = JSON.stringify(kept);
    this.#writing = this.#writing.then(() =>
      writePrivateFile(file, json).catch((error) =>
        this.log.warn('cannot save the held sessions', { path: file, error: String(error) }),
      ),
    );
  }
}

/** One session of a held file, in either format; throws naming what is wrong. */
function readEntry(session: string, entry: unknown): Entry {
  const strings = (value: unknown): value is string[] => Array.isArray(value) && value.every((v) => typeof v === 'string');
  if (strings(entry)) return { questions: new Set(entry), reply: null, runs: new Map() };
  if (typeof entry !== 'object' || entry === null) throw new Error(`session ${session} is neither a kept session nor its questions`);
  const { questions = [], reply = null, runs = [] } = entry as Record<string, unknown>;
  if (!strings(questions)) throw new Error(`session ${session} does not list its questions`);
  const isReply =
    reply === null ||
    (typeof reply === 'object' &&
      typeof (reply as KeptReply).turn === 'string' &&
      typeof (reply as KeptReply).text === 'string');
  if (!isReply) throw new Error(`session ${session} keeps a reply without its turn and text`);
  if (!Array.isArray(runs)) throw new Error(`session ${session} does not list its runs`);
  const kept = new Map<string, KeptRun>();
  for (const report of runs as unknown[]) {
    const r = report as Partial<KeptRun> | null;
    const valid =
      typeof r === 'object' &&
      r !== null &&
      typeof r.run === 'string' &&
      typeof r.name === 'string' &&
      STATUSES.includes(r.status as RunStatus) &&
      Number.isInteger(r.attempt) &&
      (r.attempt as number) >= 1;
    if (!valid) throw new Error(`session ${session} keeps a run report that is not one`);
    kept.set(r.run!, { run: r.run!, name: r.name!, status: r.status!, attempt: r.attempt! });
  }
  const keptReply = reply === null ? null : { turn: (reply as KeptReply).turn, text: (reply as KeptReply).text };
  return { questions: new Set(questions), reply: keptReply, runs: kept };
}
