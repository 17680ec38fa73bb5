// The LLM Planner example of the TypeScript SDK
// (sdk/typescript/examples/llm-planner.ts) against a real server and a
// stand-in chat-completions endpoint that replays scripted tool calls
// (lib/chat-completions.mjs; no model runs here): Margin's tools reach the
// model as function calls with the catalogue's schemas, each call it makes
// is carried out and its output or refusal handed back, a question becomes
// a decision card and the words become the reply; a reply that asks in
// prose is withheld and the repair turn moves the question into a decision
// (SPEC T1, T2, D1, O3).

import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { serverTest, waitFor } from '../lib/server.mjs';
import { documentWith, decisions } from '../lib/doc.mjs';
import { llmPlannerScript, TOOLS } from '../lib/sdk.mjs';
import { pairToFile, startExample } from '../lib/example.mjs';
import { ScriptedModel, calls, lastToolOutput } from '../lib/chat-completions.mjs';

const PATIENCE = 10000;
const QUESTION = 'Which region do we launch in first?';

/** Pairs a machine, starts the LLM Planner on `model`, and waits for it to link. */
async function startPlanner(server, model, doc, onCleanup) {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'margin-llm-'));
  onCleanup(() => rm(dir, { recursive: true, force: true }));
  const credential = path.join(dir, 'laptop.credential');
  await pairToFile(server, 'alice', 'laptop', credential);
  const planner = startExample(
    llmPlannerScript,
    ['--server', server.baseUrl, '--credential', credential, '--base-url', model.url, '--model', 'scripted-model'],
    onCleanup,
    { MARGIN_LLM_API_KEY: 'test-key', OPENAI_API_KEY: '' },
  );
  try {
    await waitFor(async () => (await server.api('GET', `/documents/${doc}/planner`, { as: 'alice' })).body.state === 'available', PATIENCE, 'the LLM Planner to link');
  } catch (e) {
    process.stderr.write(`\n----- LLM Planner output -----\n${planner.output}\n`);
    throw e;
  }
  return planner;
}

async function chat(server, doc) {
  return (await server.api('GET', `/documents/${doc}/chat`, { as: 'alice' })).body.messages;
}

/** An open_decisions call for the question about `block` (its index and digest) at `revision`. */
function regionCard(revision, block) {
  return {
    revision,
    cards: [
      {
        key: 'launch-region',
        question: QUESTION,
        response: 'single_choice',
        choices: ['EU', 'US'],
        passages: [{ index: block.index, digest: block.digest }],
      },
    ],
  };
}

serverTest("the LLM Planner offers Margin's tools as function calls, hands back outputs and refusals, opens the model's question as a decision and replies", {}, async ({ server, onCleanup }) => {
  const { doc } = await documentWith(server, 'Plan', ['We launch in March.', 'Regions are not settled.']);
  let read;
  const model = await ScriptedModel.start([
    () => calls(1, 'read_document', {}),
    (body) => {
      read = lastToolOutput(body);
      // A digest that names no block: the server refuses the batch.
      return calls(2, 'open_decisions', regionCard(read.revision, { index: 1, digest: '0'.repeat(64) }));
    },
    () => calls(3, 'open_decisions', regionCard(read.revision, read.outline[1])),
    () => ({ content: 'I opened a decision on the launch region beside the paragraph about regions.' }),
  ]);
  onCleanup(() => model.close());
  await startPlanner(server, model, doc.id, onCleanup);

  const said = await server.api('POST', `/documents/${doc.id}/chat`, { as: 'alice', body: { text: '@planner settle the regions' } });
  assert.equal(said.status, 201);
  const reply = await waitFor(
    async () => (await chat(server, doc.id)).find((m) => m.kind === 'planner'),
    PATIENCE,
    'the Planner reply',
  );
  assert.equal(reply.text, 'I opened a decision on the launch region beside the paragraph about regions.');
  const cards = await decisions(server, 'alice', doc.id);
  assert.deepEqual(
    cards.map((c) => [c.key, c.question, c.choices.map((choice) => choice.label), c.state]),
    [['launch-region', QUESTION, ['EU', 'US'], 'open']],
  );

  const [first, , third, last] = model.requests;
  assert.equal(model.requests.length, 4);
  assert.equal(first.authorization, 'Bearer test-key', 'the key from MARGIN_LLM_API_KEY');
  assert.equal(first.body.model, 'scripted-model');
  const offered = ['read_document', 'edit_plan', 'open_decisions', 'open_decision', 'update_plan'];
  assert.deepEqual(first.body.tools.map((t) => t.function.name), offered, 'the tools, in the catalogue order, without ask');
  const catalogue = Object.fromEntries(TOOLS.map((t) => [t.name, t]));
  for (const tool of first.body.tools) {
    const { $schema: _, title: __, ...input } = catalogue[tool.function.name].input;
    assert.deepEqual(tool.function.parameters, input, `${tool.function.name} takes the catalogue's input schema`);
    assert.equal(tool.function.description, catalogue[tool.function.name].description);
  }
  const [system, user] = first.body.messages;
  assert.equal(system.role, 'system');
  assert.match(system.content, /Never ask a question in your reply\. Every question for people goes into open_decisions/);
  assert.deepEqual(user, { role: 'user', content: 'alice: @planner settle the regions' });
  // The refusal came back to the model as the tool's answer, and it tried again.
  const refused = lastToolOutput(third.body);
  assert.equal(typeof refused.error?.code, 'string', JSON.stringify(refused));
  assert.ok(refused.error.message.length > 0);
  assert.equal(lastToolOutput(last.body).captured, 1);
});

serverTest('a reply that asks in prose is withheld, and the repair turn has the model move the question into a decision', {}, async ({ server, onCleanup }) => {
  const { doc } = await documentWith(server, 'Plan', ['We launch in March.', 'Regions are not settled.']);
  let read;
  const model = await ScriptedModel.start([
    () => ({ content: QUESTION }),
    (body) => {
      const repair = body.messages.find((m) => m.role === 'user').content;
      assert.match(repair, /^Your last reply was withheld and not posted, because it asked these questions in prose:\n- Which region do we launch in first\?\n/);
      return calls(1, 'read_document', {});
    },
    (body) => {
      read = lastToolOutput(body);
      return calls(2, 'open_decisions', regionCard(read.revision, read.outline[1]));
    },
    () => ({ content: 'I opened the launch region as a decision.' }),
  ]);
  onCleanup(() => model.close());
  await startPlanner(server, model, doc.id, onCleanup);

  const said = await server.api('POST', `/documents/${doc.id}/chat`, { as: 'alice', body: { text: '@planner where do we launch' } });
  assert.equal(said.status, 201);
  await waitFor(
    async () => (await chat(server, doc.id)).some((m) => m.kind === 'planner'),
    PATIENCE,
    'the repair reply',
  );
  const lines = await chat(server, doc.id);
  assert.deepEqual(
    lines.filter((m) => m.kind === 'planner').map((m) => m.text),
    ['I opened the launch region as a decision.'],
    'the withheld question was never posted',
  );
  assert.ok(!lines.some((m) => m.text.includes(QUESTION)), JSON.stringify(lines));
  assert.deepEqual((await decisions(server, 'alice', doc.id)).map((c) => [c.key, c.state]), [['launch-region', 'open']]);
  assert.equal(model.requests.length, 4);
});
