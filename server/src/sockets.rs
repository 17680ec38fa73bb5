//! How every WebSocket this server serves or opens is sized.
//!
//! tungstenite's defaults are made for a few busy sockets: a 128 KiB read
//! buffer per socket, filled with zeros before every read, and writes held
//! back until 128 KiB have gathered. A document server holds thousands of
//! mostly idle sockets, so each one starts small instead: the read buffer
//! is a few KiB and grows only for a message that needs more (tungstenite
//! reserves a frame's whole length once its header is read), and each
//! frame is written as soon as it is sent, which is what the sync and link
//! writers want anyway (they flush after every frame).

use axum::extract::ws::WebSocketUpgrade;
use futures_util::{Stream, StreamExt};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tracing::Instrument;

/// Bytes a socket reads at a time, and so keeps while idle. Sync messages
/// from editors are mostly a few hundred bytes; a larger frame has its
/// whole length reserved once its header is read. With 4 KiB, an idle
/// sync connection cost more memory than one on the npm server
/// (server/benches/results/).
pub const READ_BUFFER_BYTES: usize = 1024;

/// An accepted upgrade sized as above, refusing frames and messages over
/// `max_message` bytes.
pub fn serving(upgrade: WebSocketUpgrade, max_message: usize) -> WebSocketUpgrade {
    upgrade
        .read_buffer_size(READ_BUFFER_BYTES)
        .write_buffer_size(0)
        .max_message_size(max_message)
        .max_frame_size(max_message)
}

/// [`serving`] for a member's or a machine's socket, which reads whole a
/// message up to a quarter over `max_message`: the caller refuses it
/// ([`over_limit`]) with 1009, and the peer, done sending, reads that
/// close. Cut off at its header, a peer still sending meets a reset and
/// sees only 1006. Past the quarter the message is cut off all the same.
pub fn serving_peers(upgrade: WebSocketUpgrade, max_message: usize) -> WebSocketUpgrade {
    let read_whole = max_message + max_message / 4;
    serving(upgrade, read_whole)
}

/// Whether a message of `len` bytes, read by a socket from
/// [`serving_peers`], is over `max_message` and must be refused.
pub fn over_limit(len: usize, max_message: usize) -> bool {
    len > max_message
}

/// The configuration of a socket this server opens to another node, sized
/// as above, refusing frames and messages over `max_message` bytes.
pub fn opening(max_message: usize) -> WebSocketConfig {
    WebSocketConfig::default()
        .read_buffer_size(READ_BUFFER_BYTES)
        .write_buffer_size(0)
        .max_message_size(Some(max_message))
        .max_frame_size(Some(max_message))
}

/// Messages read from a socket by a task of its own.
pub type Inbound<T> = mpsc::Receiver<T>;

/// Reads `stream` in a task of its own and hands each message over one at
/// a time, so a loop that also sends can wait on its messages without
/// polling the socket again every time it wakes to send. The task ends
/// when the stream does or when the receiver is dropped.
pub fn read_ahead<S>(mut stream: S) -> Inbound<S::Item>
where
    S: Stream + Unpin + Send + 'static,
    S::Item: Send,
{
    // One message waits here at most: the socket's own buffers, and TCP
    // behind them, hold the rest back from a peer that sends faster than
    // the loop reads.
    let (tx, rx) = mpsc::channel(1);
    tokio::spawn(
        async move {
            loop {
                let message = tokio::select! {
                    message = stream.next() => message,
                    _ = tx.closed() => return,
                };
                let Some(message) = message else { return };
                if tx.send(message).await.is_err() {
                    return;
                }
            }
        }
        .in_current_span(),
    );
    rx
}
