// The demo Planner on the TypeScript SDK, as server/src/demo.rs is on the
// Rust one: each turn reports a run, reads the document, opens a decision
// card beside every open question (open-questions.ts), keeps a three-step
// plan it marks as it goes, and replies with what it did. No model.
//
//   margin machine pair ACCOUNT NAME --credential-file FILE
//   node dist/examples/demo-planner.js --server http://127.0.0.1:7070 --credential FILE [--no-resume]
//
// The credential file is read at each connect and renewed by the link
// (mode 0600, SPEC L8); the sessions it holds are kept beside it
// (laptop.credential → laptop.sessions.json), so a restarted demo resumes
// them (SPEC L3). Ctrl-C detaches.

import { parseArgs } from 'node:util';
import { basename, dirname, extname, join } from 'node:path';
import { Connector, describeEnded, isRefusal, stderrLogger } from '@margin/connector';
import type { Handler, PlanStep, StepStatus, Turn } from '@margin/connector';
import { openQuestions } from './open-questions.js';

/** Where a turn of the demo is, as its plan shows it. */
type Progress = 'reading' | 'capturing' | { asked: number };

/**
 * The demo's durable plan (SPEC U1–U3): three steps it marks as it goes.
 * Progress reporting only; a refused update is logged and ends the
 * checklist for the turn: the plan is never the work.
 */
class Checklist {
  #revision: number;
  #on = true;

  constructor(private readonly turn: Turn) {
    this.#revision = turn.plan?.revision ?? 0;
  }

  async mark(progress: Progress): Promise<void> {
    if (!this.#on) return;
    const [read, capture, answers]: StepStatus[] =
      progress === 'reading'
        ? ['in_progress', 'pending', 'pending']
        : progress === 'capturing'
          ? ['completed', 'in_progress', 'pending']
          : progress.asked === 0
            ? ['completed', 'completed', 'completed']
            : ['completed', 'completed', 'pending'];
    const steps: PlanStep[] = [
      { id: 'read', description: 'Read the plan', status: read! },
      { id: 'capture', description: 'Open a decision for each open question', status: capture! },
      // No count here: people answer after the turn, so a count would go
      // stale; the editor shows the cards' own states.
      { id: 'answers', description: 'People answer the decisions beside their paragraphs', status: answers! },
    ];
    try {
      const updated = await this.turn.updatePlan({
        expected_revision: this.#revision,
        explanation: 'Reviewing the plan for open questions',
        steps,
      });
      this.#revision = updated.plan.revision;
    } catch (error) {
      if (!isRefusal(error)) throw error;
      stderrLogger.warn("the demo's plan was not updated", { code: error.refusal.code, message: error.refusal.message });
      this.#on = false;
    }
  }
}

/** The demo Planner. */
export const demoPlanner: Handler = {
  async turn(turn) {
    const run = `review-${turn.id}`;
    const name = 'Review the plan for open questions';
    const plan = new Checklist(turn);
    await plan.mark('reading');
    await turn.run(run, name, 'running');
    const read = await turn.readDocument();
    const cards = openQuestions(read.outline);
    if (cards.length === 0) {
      await turn.run(run, name, 'completed');
      await plan.mark({ asked: 0 });
      return 'I read the plan and found no open questions: nothing ends in a question mark or is marked TBD.';
    }
    await plan.mark('capturing');
    const found = cards.length;
    let opened;
    try {
      opened = await turn.openDecisions({ revision: read.revision, cards });
    } catch (error) {
      await turn.run(run, name, 'failed');
      throw error;
    }
    await turn.run(run, name, 'completed');
    await plan.mark({ asked: found });
    return `I read the plan and found ${found} open question${found === 1 ? '' : 's'}: ${opened.summary}.`;
  },
};

/** `laptop.credential` → `laptop.sessions.json`, beside it. */
function heldFileBeside(credential: string): string {
  const name = basename(credential, extname(credential));
  return join(dirname(credential), `${name}.sessions.json`);
}

async function main(): Promise<number> {
  const { values } = parseArgs({
    options: {
      server: { type: 'string', default: process.env.MARGIN_SERVER ?? 'http://127.0.0.1:7070' },
      credential: { type: 'string' },
      'no-resume': { type: 'boolean', default: false },
    },
  });
  if (!values.credential) {
    process.stderr.write('usage: demo-planner --server URL --credential FILE [--no-resume]\n');
    return 2;
  }
  const connector = new Connector({
    server: values.server!,
    credentialFile: values.credential,
    heldFile: heldFileBeside(values.credential),
    resumable: !values['no-resume'],
    planning: true,
    onLink: (welcome) => process.stderr.write(`demo Planner linked as machine ${welcome.machine}\n`),
  });
  await connector.checkCredential();
  const detach = new AbortController();
  for (const signal of ['SIGINT', 'SIGTERM'] as const) process.once(signal, () => detach.abort());
  const ended = await connector.run(demoPlanner, { signal: detach.signal });
  if (ended.kind !== 'detached') {
    process.stderr.write(`the demo Planner stopped linking: ${describeEnded(ended)}\n`);
    return 1;
  }
  return 0;
}

main().then(
  (code) => {
    process.exitCode = code;
  },
  (error: unknown) => {
    process.stderr.write(`demo-planner: ${error instanceof Error ? error.message : String(error)}\n`);
    process.exitCode = 1;
  },
);
