// The link's names and numbers that the committed schemas do not carry:
// constants of `margin_protocol::link` (protocol/src/link.rs), repeated here
// under the same names. The shapes themselves are generated (wire.ts).

/** The protocol version this SDK speaks (`PROTOCOL_VERSION`). */
export const PROTOCOL_VERSION = 1;

/** The feature that keeps a session's work through a dropped link (SPEC L1). */
export const RESUMABLE_SESSIONS = 'resumable-sessions';

/** Largest frame the server accepts from a machine (`MAX_FRAME_BYTES`). */
export const MAX_FRAME_BYTES = 1024 * 1024;

/**
 * Largest frame the server sends (`MAX_SERVER_FRAME_BYTES`): a tool's result
 * carries a whole outline, which for a large document is more than 1 MiB.
 */
export const MAX_SERVER_FRAME_BYTES = 64 * 1024 * 1024;

/** Most sessions a `resume` may name (`MAX_RESUME_SESSIONS`). */
export const MAX_RESUME_SESSIONS = 256;
/** Most questions a `resume` may name per session (`MAX_HELD_QUESTIONS`). */
export const MAX_HELD_QUESTIONS = 256;
/** Most calls a `resume` may name per session (`MAX_HELD_CALLS`). */
export const MAX_HELD_CALLS = 64;

/** Close codes on the machine link (`margin_protocol::link::close`). */
export const Close = {
  /** The machine detached. */
  DETACHED: 1000,
  /** The server is shutting down. */
  GOING_AWAY: 1001,
  /** A frame over the limit. */
  TOO_BIG: 1009,
  /** Missed heartbeats: the server stopped waiting. */
  UNRESPONSIVE: 4002,
  /** The first message was not a valid `hello` (or came too late). */
  BAD_HELLO: 4400,
  /** The machine's credential was revoked while linked. */
  REVOKED: 4403,
  /** Another link of the same account took this link's work over (SPEC L3). */
  SUPERSEDED: 4409,
} as const;

/** The codes of a `401` refusing the upgrade (`margin_protocol::link::refused`, SPEC L8). */
export const Refused = {
  /** No credential, or one the server does not know. */
  UNAUTHENTICATED: 'unauthenticated',
  /** The machine was revoked: all its credentials are refused. */
  MACHINE_REVOKED: 'machine_revoked',
  /** The credential's lifetime is over: use a newer one, or pair again. */
  CREDENTIAL_EXPIRED: 'credential_expired',
} as const;
