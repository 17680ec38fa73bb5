// Margin's TypeScript connector SDK: links a Planner machine to Margin at
// /machine and runs a Handler for its Planner (SPEC O3), as margin-sdk does
// for Rust. It owns the link's mechanics — hello (resumable by default,
// SPEC L1), heartbeats, credential renewal (L8), one turn per invoke with
// typed tool calls, the reply, answers acknowledged and delivered once
// (L5), Stop (L4), resume after a drop (L3, W1), and replies and run
// reports kept and sent again until acknowledged (L10) — so a Planner
// writes only its work. It knows only the wire schemas (src/wire.ts, generated).

export { Connector, Linked } from './connector.js';
export type { ConnectorOptions, ServeOptions, Welcome } from './connector.js';
export { SessionHandle, Turn } from './handler.js';
export type { Answer, Handler } from './handler.js';
export { ConnectError, ToolError, isRefusal } from './errors.js';
export type { ConnectErrorKind, ToolErrorKind } from './errors.js';
export { describeEnded, isFinal } from './ended.js';
export type { Ended } from './ended.js';
export { writeCredentialFile } from './credential.js';
export { backoff, FIRST_PAUSE_MS, MAX_PAUSE_MS } from './backoff.js';
export { silentLogger, stderrLogger } from './log.js';
export type { Logger } from './log.js';
export * from './protocol.js';
export { TOOLS } from './tools.js';
export type { ToolName, ToolSpec } from './tools.js';
export type * from './wire.js';
