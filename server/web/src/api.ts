// The server's JSON API: bearer-token requests and its error shape
// (`{"error":{"code","message"}}`, docs/protocol.md).

import type { Code } from './wire';

/** What failed: the error body's code, or `network` / `http_<status>` when there was none. */
export type ApiErrorCode = Code | 'network' | `http_${number}`;

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: ApiErrorCode,
    message: string,
  ) {
    super(message);
  }
}

export async function api<T>(method: string, path: string, token: string, body?: unknown): Promise<T> {
  const headers: Record<string, string> = { Authorization: `Bearer ${token}` };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  let res: Response;
  try {
    res = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (e) {
    throw new ApiError(0, 'network', `Could not reach the server (${String(e)}).`);
  }
  const text = await res.text();
  let data: unknown = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = null;
  }
  if (!res.ok) {
    const err = (data as { error?: { code?: unknown; message?: unknown } } | null)?.error;
    const code: ApiErrorCode = typeof err?.code === 'string' ? (err.code as Code) : `http_${res.status}`;
    const message = typeof err?.message === 'string' ? err.message : `${res.status} ${res.statusText}`;
    throw new ApiError(res.status, code, message);
  }
  return data as T;
}

/** A one-line description of a failure, with the HTTP status when there is one. */
export function describe(e: unknown): string {
  if (e instanceof ApiError) return e.status ? `${e.message} (${e.status})` : e.message;
  return String(e);
}
