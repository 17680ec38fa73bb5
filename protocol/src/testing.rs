//! Test helpers shared by the wire-type tests.

use pretty_assertions::assert_eq;
use serde::de::DeserializeOwned;
use serde::Serialize;

/// `value` serialises to exactly `json` and `json` reads back as `value`.
pub fn round_trip<T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug>(
    value: T,
    json: &str,
) {
    assert_eq!(serde_json::to_string(&value).unwrap(), json);
    assert_eq!(serde_json::from_str::<T>(json).unwrap(), value);
}
