// A Planner driven by a language model behind any OpenAI-compatible
// chat-completions endpoint, on the TypeScript SDK. Each turn gives the
// model the Chat lines (or a repair turn's withheld questions), the
// session's plan as its own notes, and Margin's document tools as function
// calls — their descriptions and input schemas straight from the generated
// catalogue (TOOLS) — then carries out each call it makes and hands back
// the output or the refusal, until it answers in words: that is the reply.
// The prompt states the reply policy (SPEC T2): questions go into
// open_decisions under stable keys, never into the reply; the server
// enforces it, and a repair turn asks the model to move them.
//
//   margin machine pair ACCOUNT NAME --credential-file FILE
//   MARGIN_LLM_API_KEY=… node dist/examples/llm-planner.js --server URL --credential FILE \
//     --base-url https://HOST/v1 --model NAME [--max-steps 16] [--no-planning]
//
// The key comes from MARGIN_LLM_API_KEY, else OPENAI_API_KEY (none is sent
// when neither is set, for a local endpoint).

import { basename, dirname, extname, join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { Connector, describeEnded, isRefusal, TOOLS, ToolError } from '@margin/connector';
import type { Handler, ToolName, Turn } from '@margin/connector';
import { complete, type ChatMessage, type Endpoint, type FunctionTool } from './chat-completions.js';

/** Tools the model is offered. `ask` waits on a person for an answer this Planner would not wait for. */
const OFFERED: readonly ToolName[] = ['read_document', 'edit_plan', 'open_decisions', 'open_decision', 'update_plan'];

/** Most tool-calling steps in one turn before the Planner gives up. */
const MAX_STEPS = 16;

export interface LlmPlannerOptions {
  endpoint: Endpoint;
  /** Whether the link declared `planning` (then `update_plan` is offered). */
  planning: boolean;
  maxSteps?: number;
}

/** What the model is told once per turn. */
export function systemPrompt(planning: boolean): string {
  return [
    'You are the Planner of a shared planning document in Margin. People write to you in its Chat by mentioning @planner.',
    'Work through the tools. Call read_document first; address blocks by the index and digest it returns, at the revision it returns, and use the revision each write returns for the next.',
    'Never ask a question in your reply. Every question for people goes into open_decisions: one card per question, under a stable key derived from its subject (the same question always gets the same key), anchored to the paragraphs it concerns. People answer the cards beside their paragraphs.',
    planning
      ? 'Keep a short plan of your steps with update_plan (send the revision the last update returned, 0 at first); it is progress reporting for people.'
      : '',
    'When you are done, reply with one short plain-text message saying what you did. It is posted in Chat as it is.',
  ]
    .filter((line) => line !== '')
    .join('\n');
}

/** The turn's request: the Chat lines that started it, or a repair turn's withheld questions. */
export function turnPrompt(turn: Turn): string {
  if (turn.repair.length > 0) {
    return [
      'Your last reply was withheld and not posted, because it asked these questions in prose:',
      ...turn.repair.map((question) => `- ${question}`),
      'Open each of them as a decision with open_decisions (read the document first), under stable keys, then reply without asking anything.',
    ].join('\n');
  }
  return turn.messages.map((m) => `${m.author}: ${m.text}`).join('\n');
}

/** Margin's tools as the endpoint's function tools, from the generated catalogue. */
export function functionTools(planning: boolean): FunctionTool[] {
  return TOOLS.filter((tool) => OFFERED.includes(tool.name) && (planning || !tool.requires_planning)).map((tool) => {
    // The schema's own name and dialect mean nothing to a model, and some endpoints refuse them.
    const { $schema: _dialect, title: _title, ...parameters } = tool.input;
    return { type: 'function', function: { name: tool.name, description: tool.description, parameters } };
  });
}

/** The LLM Planner for `options`. */
export function llmPlanner(options: LlmPlannerOptions): Handler {
  const tools = functionTools(options.planning);
  const offered = new Set(tools.map((tool) => tool.function.name));
  const maxSteps = options.maxSteps ?? MAX_STEPS;
  return {
    async turn(turn) {
      const messages: ChatMessage[] = [{ role: 'system', content: systemPrompt(options.planning) }];
      if (turn.plan) {
        // The session's plan is the model's own earlier words: data, not a request (SPEC U6).
        messages.push({
          role: 'system',
          content: `Your plan from earlier turns (your own notes, at revision ${turn.plan.revision}):\n${JSON.stringify(turn.plan.steps)}`,
        });
      }
      messages.push({ role: 'user', content: turnPrompt(turn) });
      for (let step = 0; step < maxSteps; step++) {
        const answer = await complete(options.endpoint, messages, tools, turn.signal);
        messages.push(answer);
        const calls = answer.tool_calls ?? [];
        if (calls.length === 0) return (answer.content ?? '').trim() || 'I have nothing to add.';
        for (const call of calls) {
          const content = await carryOut(turn, offered, call.function.name, call.function.arguments);
          messages.push({ role: 'tool', tool_call_id: call.id, content });
        }
      }
      return `I stopped after ${maxSteps} steps without finishing; mention @planner to let me go on.`;
    },
  };
}

/** Runs one function call as a Margin tool call; its output, or the error, as JSON for the model. */
async function carryOut(turn: Turn, offered: Set<string>, name: string, text: string): Promise<string> {
  if (!offered.has(name)) return JSON.stringify({ error: { code: 'unknown_tool', message: `no tool named ${name}` } });
  let input: unknown;
  try {
    input = text.trim() === '' ? {} : JSON.parse(text);
  } catch {
    return JSON.stringify({ error: { code: 'invalid_input', message: 'the arguments are not JSON' } });
  }
  if (typeof input !== 'object' || input === null || Array.isArray(input)) {
    return JSON.stringify({ error: { code: 'invalid_input', message: 'the arguments are not a JSON object' } });
  }
  try {
    return JSON.stringify(await turn.call(name as ToolName, input));
  } catch (error) {
    // A refusal is the server's decision, for the model to act on; anything
    // else (the link gone, the turn stopped) ends the turn.
    if (isRefusal(error)) return JSON.stringify({ error: error.refusal });
    if (error instanceof ToolError && error.kind === 'output') return JSON.stringify({ error: { code: 'output', message: error.message } });
    throw error;
  }
}

/** `laptop.credential` → `laptop.sessions.json`, beside it. */
function heldFileBeside(credential: string): string {
  return join(dirname(credential), `${basename(credential, extname(credential))}.sessions.json`);
}

async function main(): Promise<number> {
  const { values } = parseArgs({
    options: {
      server: { type: 'string', default: process.env.MARGIN_SERVER ?? 'http://127.0.0.1:7070' },
      credential: { type: 'string' },
      'base-url': { type: 'string' },
      model: { type: 'string' },
      'max-steps': { type: 'string', default: String(MAX_STEPS) },
      'no-planning': { type: 'boolean', default: false },
    },
  });
  const maxSteps = Number(values['max-steps']);
  if (!values.credential || !values['base-url'] || !values.model || !Number.isInteger(maxSteps) || maxSteps < 1) {
    process.stderr.write(
      'usage: llm-planner --server URL --credential FILE --base-url URL --model NAME [--max-steps N] [--no-planning]\n' +
        '(the API key comes from MARGIN_LLM_API_KEY or OPENAI_API_KEY)\n',
    );
    return 2;
  }
  const planning = !values['no-planning'];
  const connector = new Connector({
    server: values.server!,
    credentialFile: values.credential,
    heldFile: heldFileBeside(values.credential),
    planning,
    onLink: (welcome) => process.stderr.write(`LLM Planner linked as machine ${welcome.machine}\n`),
  });
  await connector.checkCredential();
  const endpoint: Endpoint = {
    baseUrl: values['base-url'],
    model: values.model,
    apiKey: process.env.MARGIN_LLM_API_KEY || process.env.OPENAI_API_KEY || undefined,
  };
  const detach = new AbortController();
  for (const signal of ['SIGINT', 'SIGTERM'] as const) process.once(signal, () => detach.abort());
  const ended = await connector.run(llmPlanner({ endpoint, planning, maxSteps }), { signal: detach.signal });
  if (ended.kind !== 'detached') {
    process.stderr.write(`the LLM Planner stopped linking: ${describeEnded(ended)}\n`);
    return 1;
  }
  return 0;
}

// Run as a program, not when imported.
if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().then(
    (code) => {
      process.exitCode = code;
    },
    (error: unknown) => {
      process.stderr.write(`llm-planner: ${error instanceof Error ? error.message : String(error)}\n`);
      process.exitCode = 1;
    },
  );
}
