// A scripted Agent Client Protocol agent, written on the official ACP SDK
// (`@agentclientprotocol/sdk`) and run by `margin planner acp -- node
// acp-agent.mjs` as a real subprocess speaking real ACP over stdio. It uses
// the MCP server the client hands it in `session/new` / `session/load` with
// the official MCP client (stdio), so the document tools are reached the way
// a real agent reaches them (SPEC O4). What it does is scripted by the
// prompt's words:
//   every prompt: read the document, report a tool call, send a three-step
//     plan, open a decision for each block ending in `?`, reply in two chunks;
//   "permission": ask permission to "Deploy the draft" first and say the
//     outcome in the reply;
//   "in prose": reply with a question in prose (the reply policy withholds
//     it); a repair prompt: open the questions it lists as decisions;
//   "slow": wait until the client cancels, then, half a second later, end
//     with `cancelled`.
// Each event it sees is appended, one JSON line each, to $ACP_AGENT_LOG.

import { appendFileSync } from 'node:fs';
import { randomUUID } from 'node:crypto';
import { Readable, Writable } from 'node:stream';
import { agent, methods, ndJsonStream, PROTOCOL_VERSION } from '@agentclientprotocol/sdk';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';

const log = (event) => {
  if (process.env.ACP_AGENT_LOG) appendFileSync(process.env.ACP_AGENT_LOG, `${JSON.stringify({ pid: process.pid, ...event })}\n`);
};

/** sessionId → { tools: MCP client, cancelled: AbortController | null } */
const sessions = new Map();

async function attach(sessionId, mcpServers) {
  const server = mcpServers.find((s) => s.name === 'margin');
  if (!server) throw new Error(`no margin MCP server among ${JSON.stringify(mcpServers)}`);
  const transport = new StdioClientTransport({
    command: server.command,
    args: server.args,
    env: Object.fromEntries((server.env ?? []).map((v) => [v.name, v.value])),
    stderr: 'inherit',
  });
  const tools = new Client({ name: 'scripted-acp-agent', version: '0.1.0' });
  await tools.connect(transport);
  sessions.set(sessionId, { tools, prompt: null });
}

/** Calls a Margin tool; throws with the refusal when refused. */
async function call(session, name, args) {
  const result = await session.tools.callTool({ name, arguments: args });
  if (result.isError) throw new Error(`${name} refused: ${JSON.stringify(result.structuredContent)}`);
  return result.structuredContent;
}

const update = (client, sessionId, u) => client.notify(methods.client.session.update, { sessionId, update: u });

const app = agent({ name: 'scripted-acp-agent' })
  .onRequest(methods.agent.initialize, () => ({
    protocolVersion: PROTOCOL_VERSION,
    agentCapabilities: { loadSession: true },
    agentInfo: { name: 'scripted-acp-agent', version: '0.1.0' },
  }))
  .onRequest(methods.agent.session.new, async ({ params }) => {
    const sessionId = `acp-${randomUUID()}`;
    await attach(sessionId, params.mcpServers);
    log({ event: 'new', sessionId });
    return { sessionId };
  })
  .onRequest(methods.agent.session.load, async ({ params }) => {
    await attach(params.sessionId, params.mcpServers);
    log({ event: 'load', sessionId: params.sessionId });
    return {};
  })
  .onNotification(methods.agent.session.cancel, ({ params }) => {
    log({ event: 'cancel', sessionId: params.sessionId });
    sessions.get(params.sessionId)?.prompt?.abort();
  })
  .onRequest(methods.agent.session.prompt, async ({ params, client }) => {
    const { sessionId } = params;
    const session = sessions.get(sessionId);
    if (!session) throw new Error(`no session ${sessionId}`);
    const text = params.prompt.filter((b) => b.type === 'text').map((b) => b.text).join('\n');
    log({ event: 'prompt', sessionId, text });
    const prompt = new AbortController();
    session.prompt = prompt;
    try {
      if (text.includes('slow')) {
        await update(client, sessionId, { sessionUpdate: 'agent_message_chunk', content: { type: 'text', text: 'Working slowly…' } });
        await new Promise((resolve) => prompt.signal.addEventListener('abort', resolve, { once: true }));
        // Winding down takes a moment, as real work does: a client that
        // said "stopped" at the cancel would say it too soon.
        await new Promise((resolve) => setTimeout(resolve, 500));
        log({ event: 'stopped', sessionId, stopReason: 'cancelled' });
        return { stopReason: 'cancelled' };
      }
      const repair = text.split('Your last reply asked these questions')[1];
      if (repair !== undefined) {
        // Told back what the reply policy withheld: open the questions as
        // decisions, and reply without asking.
        const asked = repair.split('\n').filter((l) => l.startsWith('- ')).map((l) => l.slice(2));
        const read = await call(session, 'read_document', {});
        const first = read.outline[0];
        const result = await call(session, 'open_decisions', {
          revision: read.revision,
          cards: asked.map((question, i) => ({
            key: `repair-${i + 1}`,
            question,
            response: 'free_text',
            passages: [{ index: first.index, digest: first.digest }],
          })),
        });
        await update(client, sessionId, { sessionUpdate: 'agent_message_chunk', content: { type: 'text', text: `Opened ${result.captured} decisions for what I asked.` } });
        log({ event: 'stopped', sessionId, stopReason: 'end_turn' });
        return { stopReason: 'end_turn' };
      }
      if (text.includes('in prose')) {
        await update(client, sessionId, { sessionUpdate: 'agent_message_chunk', content: { type: 'text', text: 'Which region should we launch in first?' } });
        log({ event: 'stopped', sessionId, stopReason: 'end_turn' });
        return { stopReason: 'end_turn' };
      }
      let permission = null;
      if (text.includes('permission')) {
        const asked = await client.request(methods.client.session.requestPermission, {
          sessionId,
          toolCall: { toolCallId: 'deploy-1', title: 'Deploy the draft' },
          options: [
            { optionId: 'allow', name: 'Allow once', kind: 'allow_once' },
            { optionId: 'reject', name: 'Reject', kind: 'reject_once' },
          ],
        });
        permission = asked.outcome.outcome === 'selected' ? asked.outcome.optionId : 'cancelled';
        log({ event: 'permission', sessionId, outcome: permission });
      }
      await update(client, sessionId, { sessionUpdate: 'tool_call', toolCallId: 'scan-1', title: 'Scan for questions', kind: 'read', status: 'in_progress' });
      const read = await call(session, 'read_document', {});
      await update(client, sessionId, {
        sessionUpdate: 'plan',
        entries: [
          { content: 'Read the plan', priority: 'high', status: 'completed' },
          { content: 'Open the questions', priority: 'high', status: 'in_progress' },
          { content: 'Reply', priority: 'medium', status: 'pending' },
        ],
      });
      const questions = read.outline.filter((b) => b.text.trim().endsWith('?'));
      let opened = 0;
      if (questions.length > 0) {
        const result = await call(session, 'open_decisions', {
          revision: read.revision,
          cards: questions.map((b) => ({
            key: `q-${b.digest.slice(0, 12)}`,
            question: b.text.trim(),
            response: 'free_text',
            passages: [{ index: b.index, digest: b.digest }],
          })),
        });
        opened = result.captured;
      }
      await update(client, sessionId, { sessionUpdate: 'tool_call_update', toolCallId: 'scan-1', status: 'completed' });
      await update(client, sessionId, { sessionUpdate: 'agent_message_chunk', content: { type: 'text', text: `I read ${read.outline.length} blocks ` } });
      const said = permission ? ` Permission: ${permission}.` : '';
      await update(client, sessionId, { sessionUpdate: 'agent_message_chunk', content: { type: 'text', text: `and opened ${opened} decisions.${said}` } });
      log({ event: 'stopped', sessionId, stopReason: 'end_turn' });
      return { stopReason: 'end_turn' };
    } finally {
      session.prompt = null;
    }
  });

const connection = app.connect(ndJsonStream(Writable.toWeb(process.stdout), Readable.toWeb(process.stdin)));
log({ event: 'started' });
await connection.closed;
for (const { tools } of sessions.values()) await tools.close().catch(() => {});
