//! Document sync at `/documents/{id}/sync`: the y-websocket protocol (SPEC S2).
//!
//! Frames are binary y-websocket messages (sync step 1, sync step 2, update,
//! awareness). Margin adds nothing to them; what it defines are the limits and
//! the close codes with which it ends a connection. Every close carries a
//! human-readable reason as well as its code. The npm `y-websocket` client
//! reconnects and resynchronises after any close except codes 4400–4499,
//! which it treats as final: Margin uses that range for refusals a retry
//! would only repeat (a viewer's edit, an edit to an archived document, an
//! update that does not apply, a deleted document, a member removed), and
//! other codes where reconnecting is the cure (too slow, restarting, a
//! role that changed).

/// Largest document update accepted in one message, in bytes (16 MiB).
pub const MAX_UPDATE_BYTES: usize = 16 * 1024 * 1024;

/// Most bytes of one connection's updates that wait for changes it has
/// not sent yet (16 MiB): a y-websocket client that reconnects may send a
/// new edit before the sync step 2 its edits offline are in. Past it the
/// connection is closed with `BAD_UPDATE` and what waited is dropped.
pub const MAX_WAITING_BYTES: usize = 16 * 1024 * 1024;

/// Largest WebSocket message accepted: an update plus its message header.
pub const MAX_MESSAGE_BYTES: usize = MAX_UPDATE_BYTES + 64;

/// Largest awareness payload (cursor, name, colour) per message, in bytes.
pub const MAX_AWARENESS_BYTES: usize = 64 * 1024;

/// Most awareness client ids one connection may announce (an editor tab
/// uses one).
pub const MAX_AWARENESS_CLIENTS: usize = 16;

/// Close codes Margin uses on the sync socket.
pub mod close {
    /// The connection ended normally.
    pub const NORMAL: u16 = 1000;
    /// The server is shutting down or restarting; reconnect later.
    pub const GOING_AWAY: u16 = 1001;
    /// A frame could not be decoded as a y-websocket message.
    pub const MALFORMED: u16 = 1007;
    /// A message exceeded [`super::MAX_MESSAGE_BYTES`].
    pub const TOO_BIG: u16 = 1009;
    /// The server failed (for example storage); nothing was acknowledged.
    pub const INTERNAL: u16 = 1011;
    /// No server could take the document just now (in a cluster, its
    /// owner stopped and no other node took it in time); reconnect.
    pub const TRY_AGAIN: u16 = 1013;
    /// The member's role on the document changed (the owner made an
    /// editor a viewer, or a viewer an editor): reconnect, and the new
    /// connection joins with the new role.
    pub const ACCESS_CHANGED: u16 = 4001;
    /// The client fell too far behind; reconnect to resynchronise.
    pub const TOO_SLOW: u16 = 4008;
    /// A viewer sent an edit, or anyone did while the document is
    /// archived; nothing changed. The reason says which.
    pub const READ_ONLY: u16 = 4403;
    /// An update no Yjs client would send (SPEC A3a): it breaks an
    /// invariant of the Yjs v1 format, does not fit the document, or
    /// writes under another account's client id. Nothing of it changed.
    pub const BAD_UPDATE: u16 = 4400;
    /// The owner removed this member from the document. Final: a
    /// reconnect would get 404.
    pub const REMOVED: u16 = 4404;
    /// The document was deleted by its owner. Final: it is gone, and a
    /// reconnect would get 404.
    pub const DELETED: u16 = 4410;
}
