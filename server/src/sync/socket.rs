//! One sync WebSocket: reads frames into the document task and writes what
//! the task sends back, until either side closes.

use std::future::Future;
use std::time::Duration;

use axum::extract::ws::{CloseFrame, Message, WebSocket};
use futures_util::{SinkExt, StreamExt};
use margin_protocol::sync::close;
use tracing::{debug, Instrument};

use super::command::{Command, JoinRefused};
use super::hub::Joined;
use crate::metrics::COUNTERS;

/// How long a close frame may wait behind a client that is not reading.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves `socket` for `account`'s connection `joined` to document `id`.
///
/// The returned future lives as long as the socket, thousands at once, so
/// it holds each part once: the socket comes boxed and is split, and
/// `joined` taken apart, before it is made (an async fn keeps room for
/// every argument beside what it is moved into).
pub fn serve(
    socket: Box<WebSocket>,
    id: &str,
    account: &str,
    joined: Joined,
) -> impl Future<Output = ()> + Send + use<> {
    let span = tracing::info_span!("sync", document = %id, account = %account);
    let (mut sink, mut stream) = (*socket).split();
    let Joined {
        id: conn,
        mailbox,
        mut outbox,
        closer,
        membership,
    } = joined;
    async move {
        debug!(conn, "connected");

        // The writer is a task of its own: in one task with the reader, every
        // frame sent would poll the reader again, and each poll of a
        // tungstenite socket refills its read buffer.
        let writer_closer = closer.clone();
        let writer = tokio::spawn(
            async move {
                let closer = writer_closer;
                loop {
                    let frame = tokio::select! {
                        biased;
                        _ = closer.closed() => break,
                        frame = outbox.recv() => match frame {
                            Some(frame) => frame,
                            None => break,
                        },
                    };
                    // A client that stops reading blocks this send; the task's
                    // close (too slow, shutdown) must still get through.
                    tokio::select! {
                        sent = sink.send(Message::Binary(frame)) => if sent.is_err() { break },
                        _ = closer.closed() => break,
                    }
                }
                if let Some((code, reason)) = closer.reason() {
                    COUNTERS.closed(code);
                    let farewell = sink.send(close_message(code, &reason));
                    let _ = tokio::time::timeout(CLOSE_TIMEOUT, farewell).await;
                }
                let _ = tokio::time::timeout(CLOSE_TIMEOUT, sink.close()).await;
            }
            .in_current_span(),
        );

        let reader = async {
            loop {
                let message = tokio::select! {
                    message = stream.next() => message,
                    _ = closer.closed() => break,
                };
                match message {
                    Some(Ok(Message::Binary(data)))
                        if crate::sockets::over_limit(
                            data.len(),
                            margin_protocol::sync::MAX_MESSAGE_BYTES,
                        ) =>
                    {
                        let (code, reason) = too_big();
                        closer.close(code, reason);
                        break;
                    }
                    Some(Ok(Message::Binary(data))) => {
                        if mailbox.send(Command::Frame { conn, data }).await.is_err() {
                            closer.close(close::GOING_AWAY, "document unloaded; reconnect");
                            break;
                        }
                    }
                    Some(Ok(Message::Text(_))) => {
                        closer.close(
                            close::MALFORMED,
                            "sync frames are binary y-websocket messages",
                        );
                        break;
                    }
                    Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
                    Some(Ok(Message::Close(_))) | None => {
                        closer.close(close::NORMAL, "");
                        break;
                    }
                    Some(Err(error)) => {
                        let (code, reason) = read_error(&error);
                        debug!(%error, "read failed");
                        closer.close(code, reason);
                        break;
                    }
                }
            }
        };
        reader.await;
        // The writer ends once the closer fires, which every way out of the
        // reader does; a writer that panicked has nothing left to close.
        let _ = writer.await;
        drop(membership);
        debug!(conn, "disconnected");
    }
    .instrument(span)
}

/// The close a member is told when its join was refused.
pub fn refusal(refused: &JoinRefused) -> Message {
    let code = match refused {
        JoinRefused::Deleted => close::DELETED,
        JoinRefused::Elsewhere(_) => close::TRY_AGAIN,
        JoinRefused::Unloading | JoinRefused::LoadFailed(_) => close::INTERNAL,
    };
    close_message(code, &refused.to_string())
}

/// Maps a read failure to the close the client is told.
fn read_error(error: &axum::Error) -> (u16, String) {
    let text = error.to_string();
    if text.contains("Space limit exceeded")
        || text.contains("too long")
        || text.contains("Message too big")
    {
        too_big()
    } else {
        (close::MALFORMED, "unreadable WebSocket frame".into())
    }
}

/// The close a message over the limit gets.
fn too_big() -> (u16, String) {
    (
        close::TOO_BIG,
        format!(
            "message exceeds the {}-byte limit",
            margin_protocol::sync::MAX_MESSAGE_BYTES
        ),
    )
}

/// A close frame with a code and human-readable reason (at most 123 bytes,
/// the WebSocket limit).
pub fn close_message(code: u16, reason: &str) -> Message {
    let mut end = reason.len().min(123);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    Message::Close(Some(CloseFrame {
        code,
        reason: reason[..end].into(),
    }))
}
