//! The wire's names and numbers that no schema carries — the link's
//! version, feature name, bounds and close codes, and the sync socket's —
//! as one table, committed as `docs/protocol/constants.json`, from which
//! the TypeScript packages (the connector SDK and the editor) generate
//! theirs. Each is the constant of [`crate::link`] or [`crate::sync`] of
//! the same name; nothing here is written twice.

use serde_json::{json, Value};

use crate::{link, sync};

/// Every constant a client needs, by module (`link`, `sync`), then by the
/// name it has there; a nested module (`close`, `refused`) is an object.
pub fn all() -> Value {
    json!({
        "link": {
            "PROTOCOL_VERSION": link::PROTOCOL_VERSION,
            "RESUMABLE_SESSIONS": link::RESUMABLE_SESSIONS,
            "MAX_FRAME_BYTES": link::MAX_FRAME_BYTES,
            "MAX_SERVER_FRAME_BYTES": link::MAX_SERVER_FRAME_BYTES,
            "MAX_FEATURES": link::MAX_FEATURES,
            "MAX_FEATURE_BYTES": link::MAX_FEATURE_BYTES,
            "MAX_RUN_CAPACITY": link::MAX_RUN_CAPACITY,
            "MAX_RESUME_SESSIONS": link::MAX_RESUME_SESSIONS,
            "MAX_HELD_QUESTIONS": link::MAX_HELD_QUESTIONS,
            "MAX_HELD_CALLS": link::MAX_HELD_CALLS,
            "close": {
                "DETACHED": link::close::DETACHED,
                "GOING_AWAY": link::close::GOING_AWAY,
                "TOO_BIG": link::close::TOO_BIG,
                "UNRESPONSIVE": link::close::UNRESPONSIVE,
                "BAD_HELLO": link::close::BAD_HELLO,
                "REVOKED": link::close::REVOKED,
                "SUPERSEDED": link::close::SUPERSEDED,
            },
            "refused": {
                "UNAUTHENTICATED": link::refused::UNAUTHENTICATED,
                "MACHINE_REVOKED": link::refused::MACHINE_REVOKED,
                "CREDENTIAL_EXPIRED": link::refused::CREDENTIAL_EXPIRED,
            },
        },
        "sync": {
            "MAX_UPDATE_BYTES": sync::MAX_UPDATE_BYTES,
            "MAX_WAITING_BYTES": sync::MAX_WAITING_BYTES,
            "MAX_MESSAGE_BYTES": sync::MAX_MESSAGE_BYTES,
            "MAX_AWARENESS_BYTES": sync::MAX_AWARENESS_BYTES,
            "MAX_AWARENESS_CLIENTS": sync::MAX_AWARENESS_CLIENTS,
            "close": {
                "NORMAL": sync::close::NORMAL,
                "GOING_AWAY": sync::close::GOING_AWAY,
                "MALFORMED": sync::close::MALFORMED,
                "TOO_BIG": sync::close::TOO_BIG,
                "INTERNAL": sync::close::INTERNAL,
                "TRY_AGAIN": sync::close::TRY_AGAIN,
                "ACCESS_CHANGED": sync::close::ACCESS_CHANGED,
                "TOO_SLOW": sync::close::TOO_SLOW,
                "READ_ONLY": sync::close::READ_ONLY,
                "BAD_UPDATE": sync::close::BAD_UPDATE,
                "REMOVED": sync::close::REMOVED,
                "DELETED": sync::close::DELETED,
            },
        },
    })
}
