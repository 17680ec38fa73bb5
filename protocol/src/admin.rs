//! What the command line prints with `--json` for scripts (SPEC O2):
//! `margin account list`, `margin token list ACCOUNT` (machines print as
//! [`crate::link::MachineInfo`], as `GET /machines` answers).
//!
//! ```
//! use margin_protocol::admin::TokenSummary;
//! let token = TokenSummary { id: "3f1a09c2b7de".into(), created_at: 5 };
//! assert_eq!(serde_json::to_string(&token).unwrap(), r#"{"id":"3f1a09c2b7de","created_at":5}"#);
//! ```

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One account, in `margin account list --json` (an array of these).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct AccountSummary {
    /// Its name.
    pub name: String,
    /// When it was created, in milliseconds since the Unix epoch.
    pub created_at: i64,
}

/// One bearer token, in `margin token list ACCOUNT --json` (an array of
/// these). The token itself is never stored, so never shown: `id` is the
/// start of its hash, which `margin token revoke ACCOUNT ID` takes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct TokenSummary {
    /// The first 12 hex digits of the token's `blake3` hash.
    pub id: String,
    /// When it was issued, in milliseconds since the Unix epoch.
    pub created_at: i64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::round_trip;

    #[test]
    fn command_line_listings_round_trip() {
        round_trip(
            AccountSummary {
                name: "ada".into(),
                created_at: 7,
            },
            r#"{"name":"ada","created_at":7}"#,
        );
        round_trip(
            TokenSummary {
                id: "3f1a09c2b7de".into(),
                created_at: 7,
            },
            r#"{"id":"3f1a09c2b7de","created_at":7}"#,
        );
    }
}
