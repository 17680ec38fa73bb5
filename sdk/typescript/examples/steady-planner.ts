// The steady Planner every Margin SDK ships for the cross-SDK proxy matrix:
// the same small turn on every SDK, so a test can break the link at any
// point and compare what each one sent and kept (SPEC L3, L10, W1). Each
// turn prints `turn <session> <turn>`, reports run `review` running, reads
// the document, opens one yes/no card on its first block (key
// `steady-<turn>`), reports the run completed and replies
// `Reviewed <turn>: <N> blocks.`. It prints `linked` at each welcome.
//
//   MARGIN_SERVER=http://127.0.0.1:7070 MARGIN_CREDENTIAL_FILE=laptop.credential \
//   MARGIN_HELD_FILE=laptop.sessions.json [MARGIN_SILENCE_MS=2000] \
//     node dist/examples/steady-planner.js
//
// It serves resumably until SIGTERM or SIGINT, then detaches and exits 0.

import { Connector, describeEnded, type Handler } from '@margin/connector';

const RUN = 'review';
const RUN_NAME = 'Review';

const steadyPlanner: Handler = {
  async turn(turn) {
    process.stdout.write(`turn ${turn.session.id} ${turn.id}\n`);
    await turn.runAttempt(RUN, 1, RUN_NAME, 'running');
    try {
      const read = await turn.readDocument();
      const first = read.outline[0];
      if (!first) throw new Error('the document has no block to ask about');
      await turn.openDecisions({
        revision: read.revision,
        cards: [
          {
            key: `steady-${turn.id}`,
            question: `Ship ${turn.id}?`,
            response: 'yes_no',
            passages: [{ index: first.index, digest: first.digest }],
          },
        ],
      });
      await turn.runAttempt(RUN, 1, RUN_NAME, 'completed');
      return `Reviewed ${turn.id}: ${read.outline.length} blocks.`;
    } catch (error) {
      if (!turn.signal.aborted) await turn.runAttempt(RUN, 1, RUN_NAME, 'failed').catch(() => {});
      throw error;
    }
  },
};

/** An environment variable, or why the planner cannot start. */
function required(name: string): string {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
}

async function main(): Promise<number> {
  const silence = process.env.MARGIN_SILENCE_MS;
  const silenceTimeoutMs = silence === undefined ? undefined : Number(silence);
  if (silenceTimeoutMs !== undefined && !(Number.isInteger(silenceTimeoutMs) && silenceTimeoutMs > 0)) {
    throw new Error(`MARGIN_SILENCE_MS is not a positive whole number of milliseconds: ${silence}`);
  }
  const connector = new Connector({
    server: required('MARGIN_SERVER'),
    credentialFile: required('MARGIN_CREDENTIAL_FILE'),
    heldFile: required('MARGIN_HELD_FILE'),
    ...(silenceTimeoutMs === undefined ? {} : { silenceTimeoutMs }),
    onLink: () => process.stdout.write('linked\n'),
  });
  await connector.checkCredential();
  const detach = new AbortController();
  for (const signal of ['SIGINT', 'SIGTERM'] as const) process.once(signal, () => detach.abort());
  const ended = await connector.run(steadyPlanner, { signal: detach.signal });
  if (ended.kind !== 'detached') {
    process.stderr.write(`the steady Planner stopped linking: ${describeEnded(ended)}\n`);
    return 1;
  }
  return 0;
}

main().then(
  (code) => {
    process.exitCode = code;
  },
  (error: unknown) => {
    process.stderr.write(`steady-planner: ${error instanceof Error ? error.message : String(error)}\n`);
    process.exitCode = 1;
  },
);
