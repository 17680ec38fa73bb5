//! `link_message`: the machine-link message decoder,
//! `margin_server::machine::socket::parse` (server/src/machine/socket.rs).
//!
//! Every text frame a paired machine sends on `/machine` goes through it,
//! and its refusal messages quote (truncate) the untrusted `type`, so it
//! must never panic. Only valid UTF-8 reaches it, as over a WebSocket text
//! frame. When it accepts a message, this also pins that serialising the
//! message and parsing that again gives an equal message, so what the
//! server logs or journals of a message means what it received. Messages
//! whose `arguments` hold a float are left out of that check: serde_json
//! parses floats best-effort unless built with `float_roundtrip`, which
//! the server is not.
#![no_main]

use libfuzzer_sys::fuzz_target;
use margin_protocol::link::{ClientMessage, CLIENT_MESSAGE_TYPES};
use margin_server::machine::socket::parse;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(message) = parse(text) else {
        return;
    };
    let json = serde_json::to_string(&message).expect("a parsed message serialises");
    let kind = serde_json::from_str::<Value>(&json).expect("its JSON parses")["type"]
        .as_str()
        .map(str::to_owned);
    assert!(
        kind.as_deref()
            .is_some_and(|kind| CLIENT_MESSAGE_TYPES.contains(&kind)),
        "accepted a message of type {kind:?}"
    );
    if let ClientMessage::ToolCall { arguments, .. } = &message {
        if has_float(arguments) {
            return;
        }
    }
    match parse(&json) {
        Ok(again) => assert_eq!(again, message, "round trip through {json}"),
        Err(refusal) => panic!("{json} is refused: {refusal:?}"),
    }
});

fn has_float(value: &Value) -> bool {
    match value {
        Value::Number(n) => n.is_f64(),
        Value::Array(items) => items.iter().any(has_float),
        Value::Object(map) => map.values().any(has_float),
        _ => false,
    }
}
