// The smallest client of an OpenAI-compatible chat-completions endpoint
// that the LLM Planner example needs: one POST per step, bounded in time
// and size, with errors that say what the endpoint answered. These shapes
// are the endpoint's, not Margin's: Margin's wire types are generated.

/** A message of the conversation, as the endpoint takes and gives them. */
export type ChatMessage =
  | { role: 'system' | 'user'; content: string }
  | { role: 'assistant'; content: string | null; tool_calls?: ToolCall[] }
  | { role: 'tool'; tool_call_id: string; content: string };

/** A function call the model asks for; `arguments` is JSON text. */
export interface ToolCall {
  id: string;
  type: 'function';
  function: { name: string; arguments: string };
}

/** A function the model may call: its parameters are a JSON Schema. */
export interface FunctionTool {
  type: 'function';
  function: { name: string; description: string; parameters: { [key: string]: unknown } };
}

export interface Endpoint {
  /** E.g. `http://127.0.0.1:8080/v1`; `/chat/completions` is added. */
  baseUrl: string;
  model: string;
  /** Sent as a bearer token when set. */
  apiKey?: string | undefined;
  /** How long one completion may take (default 120 s). */
  timeoutMs?: number;
}

/** Largest response body read from the endpoint. */
const MAX_RESPONSE_BYTES = 8 * 1024 * 1024;

/**
 * One completion: the assistant's message for `messages` with `tools`
 * offered. Rejects when the endpoint fails, answers with no choice, or
 * `signal` aborts.
 */
export async function complete(
  endpoint: Endpoint,
  messages: ChatMessage[],
  tools: FunctionTool[],
  signal: AbortSignal,
): Promise<Extract<ChatMessage, { role: 'assistant' }>> {
  const url = `${endpoint.baseUrl.replace(/\/+$/, '')}/chat/completions`;
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  if (endpoint.apiKey) headers.authorization = `Bearer ${endpoint.apiKey}`;
  const response = await fetch(url, {
    method: 'POST',
    headers,
    body: JSON.stringify({ model: endpoint.model, messages, tools, tool_choice: 'auto' }),
    signal: AbortSignal.any([signal, AbortSignal.timeout(endpoint.timeoutMs ?? 120_000)]),
  });
  const text = await boundedText(response);
  if (!response.ok) {
    throw new Error(`the model endpoint answered HTTP ${response.status}: ${text.slice(0, 300)}`);
  }
  let body: { choices?: { message?: Extract<ChatMessage, { role: 'assistant' }> }[] };
  try {
    body = JSON.parse(text);
  } catch {
    throw new Error(`the model endpoint answered something other than JSON: ${text.slice(0, 300)}`);
  }
  const message = body.choices?.[0]?.message;
  if (!message || message.role !== 'assistant') {
    throw new Error(`the model endpoint answered no assistant message: ${text.slice(0, 300)}`);
  }
  return message;
}

/** The body as text, refusing one over MAX_RESPONSE_BYTES. */
async function boundedText(response: Response): Promise<string> {
  if (!response.body) return '';
  const chunks: Uint8Array[] = [];
  let size = 0;
  for await (const chunk of response.body as unknown as AsyncIterable<Uint8Array>) {
    size += chunk.byteLength;
    if (size > MAX_RESPONSE_BYTES) throw new Error(`the model endpoint's answer is over ${MAX_RESPONSE_BYTES} bytes`);
    chunks.push(chunk);
  }
  return Buffer.concat(chunks).toString('utf8');
}
