//! The link bench's peer: a minimal tokio-tungstenite JSON server on the
//! machine link's messages, the floor cost of a WebSocket JSON round trip
//! and of an idle link on this machine. It answers `hello` with `welcome`
//! and every `tool-call` with one fixed tool output, in this process or as
//! a child process.

use std::net::SocketAddr;
use std::sync::Arc;

use futures_util::{SinkExt, StreamExt};
use margin_protocol::decisions::ReadDocumentOutput;
use margin_protocol::link::{Capabilities, ClientMessage, ServerMessage, PROTOCOL_VERSION};
use margin_protocol::tools::ToolOutput;
use serde_json::Value;
use tokio::net::TcpListener;
use tokio_tungstenite::tungstenite::Message;

use super::peers;

/// The peer: a minimal tokio-tungstenite JSON server. `hello` → `welcome`,
/// `tool-call` → `tool-result` with `output`; everything else is parsed and
/// gets no answer.
async fn serve(listener: TcpListener, output: Arc<ToolOutput>) {
    // Margin's listener leaves Nagle on (axum's default); so does the peer,
    // unless PEER_NODELAY=1.
    let nodelay = peers::nodelay();
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        if nodelay {
            let _ = stream.set_nodelay(true);
        }
        let output = output.clone();
        tokio::spawn(async move {
            let Ok(mut ws) = tokio_tungstenite::accept_async(stream).await else {
                return;
            };
            while let Some(Ok(message)) = ws.next().await {
                let Message::Text(text) = message else {
                    continue;
                };
                let answer = match serde_json::from_str::<ClientMessage>(text.as_str()) {
                    Ok(ClientMessage::Hello { .. }) => ServerMessage::Welcome {
                        protocol_version: PROTOCOL_VERSION,
                        machine: "peer".into(),
                        capabilities: Capabilities::default(),
                    },
                    Ok(ClientMessage::ToolCall {
                        session,
                        turn,
                        call_id,
                        ..
                    }) => ServerMessage::ToolResult {
                        session,
                        turn,
                        call_id,
                        output: Some(ToolOutput::clone(&output)),
                        error: None,
                    },
                    Ok(ClientMessage::Detach {}) => break,
                    // Acks, replies and anything malformed: parsed, no answer.
                    Ok(_) | Err(_) => continue,
                };
                let Ok(text) = serde_json::to_string(&answer) else {
                    break;
                };
                if ws.send(Message::text(text)).await.is_err() {
                    break;
                }
            }
        });
    }
}

/// Starts the peer on its own runtime in this process (as many worker
/// threads as CPUs, like `margin`'s); returns its address.
pub(crate) fn start(output: Value) -> SocketAddr {
    let output: ToolOutput = serde_json::from_value(output).expect("a tool output");
    peers::spawn(move |listener| serve(listener, Arc::new(output)))
}

/// The peer as a child process (`LINK_BENCH_PEER=serve`), so its memory
/// can be read on its own; it answers tool calls with an empty outline.
/// Prints its address and serves until stdin closes.
pub(crate) fn serve_as_child() {
    let empty = ToolOutput::ReadDocument(ReadDocumentOutput {
        revision: 0,
        outline: Vec::new(),
    });
    peers::serve_as_child(|listener| serve(listener, Arc::new(empty)));
}
