// A stand-in for an OpenAI-compatible chat-completions endpoint, on
// loopback, for the LLM Planner example's tests: each POST
// /v1/chat/completions is answered by the next step of a script — a
// function of the request's body returning the assistant's message (tool
// calls, or words) — and every request is kept for the test to look at. No
// model runs here. Bodies are bounded; a request past the script's end is
// answered 500, saying so.

import http from 'node:http';

const MAX_BODY = 4 * 1024 * 1024;

export class ScriptedModel {
  /** Listens on 127.0.0.1 (a free port); `steps` answer the requests in order. */
  static async start(steps) {
    const model = new ScriptedModel(steps);
    await new Promise((resolve, reject) => {
      model.server.once('error', reject);
      model.server.listen(0, '127.0.0.1', resolve);
    });
    return model;
  }

  constructor(steps) {
    this.steps = [...steps];
    /** Each request: { authorization, body }. */
    this.requests = [];
    this.server = http.createServer((req, res) => this.#answer(req, res));
    this.server.requestTimeout = 10000;
  }

  /** The base URL a client is given (`…/v1`). */
  get url() {
    return `http://127.0.0.1:${this.server.address().port}/v1`;
  }

  close() {
    this.server.closeAllConnections();
    return new Promise((resolve) => this.server.close(resolve));
  }

  async #answer(req, res) {
    const reply = (status, body) => {
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(JSON.stringify(body));
    };
    if (req.method !== 'POST' || req.url !== '/v1/chat/completions') {
      return reply(404, { error: { message: `no route ${req.method} ${req.url}` } });
    }
    let size = 0;
    const chunks = [];
    for await (const chunk of req) {
      size += chunk.length;
      if (size > MAX_BODY) return reply(413, { error: { message: 'body too large' } });
      chunks.push(chunk);
    }
    const body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
    this.requests.push({ authorization: req.headers.authorization ?? null, body });
    const step = this.steps.shift();
    if (!step) return reply(500, { error: { message: `the script has no step for request ${this.requests.length}` } });
    let message;
    try {
      message = await step(body);
    } catch (e) {
      return reply(500, { error: { message: `the script's step ${this.requests.length} failed: ${e.message}` } });
    }
    reply(200, {
      id: `chatcmpl-${this.requests.length}`,
      object: 'chat.completion',
      model: body.model,
      choices: [{ index: 0, message: { role: 'assistant', content: null, ...message }, finish_reason: message.tool_calls ? 'tool_calls' : 'stop' }],
    });
  }
}

/** An assistant message calling `name` with `args` (one tool call, id `call_N`). */
export function calls(n, name, args) {
  return { tool_calls: [{ id: `call_${n}`, type: 'function', function: { name, arguments: JSON.stringify(args) } }] };
}

/** The last tool message's content in a request body, parsed. */
export function lastToolOutput(body) {
  const tool = body.messages.filter((m) => m.role === 'tool').at(-1);
  if (!tool) throw new Error('no tool message in the conversation');
  return JSON.parse(tool.content);
}
