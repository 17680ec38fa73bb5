//! The one error body every HTTP endpoint returns (SPEC A2).
//!
//! ```
//! use margin_protocol::ErrorBody;
//! let body = ErrorBody::new("document_not_found", "no document with id d9");
//! assert_eq!(
//!     serde_json::to_string(&body).unwrap(),
//!     r#"{"error":{"code":"document_not_found","message":"no document with id d9"}}"#
//! );
//! ```

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `{"error":{"code","message"}}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ErrorBody {
    /// The error.
    pub error: ErrorDetail,
}

/// A stable machine-readable code and a human message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ErrorDetail {
    /// Stable, snake_case; clients branch on this.
    pub code: String,
    /// For people; never contains internals.
    pub message: String,
}

impl ErrorBody {
    /// Builds an error body.
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        ErrorBody {
            error: ErrorDetail {
                code: code.into(),
                message: message.into(),
            },
        }
    }
}
