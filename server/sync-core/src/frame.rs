//! A WebSocket frame split into y-websocket messages, read here rather
//! than by yrs.
//!
//! A frame must hold whole messages of the kinds Margin speaks (sync step
//! 1 and 2, update, awareness, awareness query) and nothing else. State
//! vectors and awareness updates are read with [`Reader`], every count
//! bounded by the bytes left, and handed on as yrs values; an update's
//! bytes are handed on unread, for [`crate::update::decode`].

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use yrs::block::ClientID;
use yrs::sync::awareness::{AwarenessUpdate, AwarenessUpdateEntry};
use yrs::StateVector;

use crate::json::is_object_or_null;
use crate::lib0::Reader;
use crate::refusal::Malformed;

/// Most messages one frame may carry (clients send one).
pub const MAX_MESSAGES_PER_FRAME: usize = 64;

/// One y-websocket message.
#[derive(Debug, PartialEq)]
pub enum Message<'a> {
    /// Sync step 1: the sender's state vector.
    SyncStep1(StateVector),
    /// Sync step 2: what the sender holds that the other lacked.
    SyncStep2(&'a [u8]),
    /// A change.
    Update(&'a [u8]),
    /// Awareness states (cursors, names), each JSON or `null`.
    Awareness(AwarenessUpdate),
    /// A request for every awareness state.
    AwarenessQuery,
}

/// Why a frame was refused.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// A value that lib0 would not have written.
    #[error("{0}")]
    Malformed(#[from] Malformed),
    /// The message type is not one Margin speaks.
    #[error("unsupported message type {0}")]
    Unsupported(u64),
    /// A sync message of a step other than 0, 1 or 2.
    #[error("unsupported sync step {0}")]
    UnsupportedStep(u64),
    /// Bytes left inside a message after what it holds.
    #[error("bytes follow the {0} inside its message")]
    Trailing(&'static str),
    /// A client listed twice in one state vector or awareness update.
    #[error("client {0} is listed twice in one {1}")]
    Repeated(u64, &'static str),
    /// An awareness state that is neither a JSON object nor `null`.
    #[error("awareness state of client {0} is not a JSON object or null")]
    NotAwarenessState(u64),
    /// Too many messages in one frame.
    #[error("more than {MAX_MESSAGES_PER_FRAME} messages in one frame")]
    TooMany,
}

const MSG_SYNC: u64 = 0;
const MSG_AWARENESS: u64 = 1;
const MSG_QUERY_AWARENESS: u64 = 3;
const STEP1: u64 = 0;
const STEP2: u64 = 1;
const UPDATE: u64 = 2;

/// Splits `frame` into its messages.
pub fn messages(frame: &[u8]) -> Result<Vec<Message<'_>>, FrameError> {
    let mut reader = Reader::new(frame);
    let mut out = Vec::with_capacity(1);
    while !reader.is_done() {
        if out.len() == MAX_MESSAGES_PER_FRAME {
            return Err(FrameError::TooMany);
        }
        out.push(match reader.var_u53()? {
            MSG_SYNC => match reader.var_u53()? {
                STEP1 => Message::SyncStep1(state_vector(reader.buf()?)?),
                STEP2 => Message::SyncStep2(reader.buf()?),
                UPDATE => Message::Update(reader.buf()?),
                step => return Err(FrameError::UnsupportedStep(step)),
            },
            MSG_AWARENESS => Message::Awareness(awareness(reader.buf()?)?),
            MSG_QUERY_AWARENESS => Message::AwarenessQuery,
            // Auth (2) and custom types included: Margin authenticates the
            // socket before any frame.
            other => return Err(FrameError::Unsupported(other)),
        });
    }
    Ok(out)
}

/// A state vector: `(client, clock)` pairs.
fn state_vector(body: &[u8]) -> Result<StateVector, FrameError> {
    let mut reader = Reader::new(body);
    let count = reader.count(2)?;
    let mut seen = HashSet::with_capacity(count);
    let mut vector = StateVector::default();
    for _ in 0..count {
        let client = reader.var_u53()?;
        let clock = reader.var_u32()?;
        if !seen.insert(client) {
            return Err(FrameError::Repeated(client, "state vector"));
        }
        vector.set_max(ClientID::new(client), clock);
    }
    if !reader.is_done() {
        return Err(FrameError::Trailing("state vector"));
    }
    Ok(vector)
}

/// An awareness update: `(client, clock, state)` triples.
fn awareness(body: &[u8]) -> Result<AwarenessUpdate, FrameError> {
    let mut reader = Reader::new(body);
    let count = reader.count(3)?;
    let mut clients = HashMap::with_capacity(count);
    for _ in 0..count {
        let client = reader.var_u53()?;
        let clock = reader.var_u32()?;
        let json = reader.string()?;
        // Every y-websocket client parses each state it is relayed; one
        // that is not JSON would break them all.
        if !is_object_or_null(json) {
            return Err(FrameError::NotAwarenessState(client));
        }
        let entry = AwarenessUpdateEntry {
            clock,
            json: Arc::from(json),
        };
        if clients.insert(ClientID::new(client), entry).is_some() {
            return Err(FrameError::Repeated(client, "awareness update"));
        }
    }
    if !reader.is_done() {
        return Err(FrameError::Trailing("awareness update"));
    }
    Ok(AwarenessUpdate { clients })
}

#[cfg(test)]
mod tests {
    use super::*;
    use yrs::sync::{Message as YMessage, SyncMessage};
    use yrs::updates::encoder::Encode;

    #[test]
    fn whole_messages_split_as_yrs_wrote_them() {
        let mut frame = YMessage::Sync(SyncMessage::Update(vec![0, 0])).encode_v1();
        frame.extend(YMessage::AwarenessQuery.encode_v1());
        let vector: StateVector = [(ClientID::new(7), 3)].into_iter().collect();
        frame.extend(YMessage::Sync(SyncMessage::SyncStep1(vector.clone())).encode_v1());
        assert_eq!(
            messages(&frame),
            Ok(vec![
                Message::Update(&[0, 0]),
                Message::AwarenessQuery,
                Message::SyncStep1(vector)
            ])
        );
    }

    #[test]
    fn a_truncated_message_is_refused() {
        assert_eq!(
            messages(&[0, 2, 0xff, 0xff, 0x01, 7]),
            Err(Malformed::Truncated(6).into())
        );
        assert_eq!(messages(&[0]), Err(Malformed::Truncated(1).into()));
    }

    #[test]
    fn unknown_and_auth_types_are_refused() {
        assert_eq!(messages(&[9, 0]), Err(FrameError::Unsupported(9)));
        assert_eq!(messages(&[2, 1]), Err(FrameError::Unsupported(2)));
        assert_eq!(messages(&[0, 3, 0]), Err(FrameError::UnsupportedStep(3)));
    }

    #[test]
    fn a_count_the_body_cannot_hold_is_refused_before_anything_is_reserved() {
        // Found by `cargo fuzz run sync_frame`: a state vector of
        // 0x2fffffff entries in 7 bytes.
        let bomb = [0, 0, 7, 0xff, 0xff, 0xff, 0xff, 0x02, 0x0b, 0x07];
        assert_eq!(messages(&bomb), Err(Malformed::CountTooLarge(0).into()));
        assert_eq!(
            messages(&[1, 3, 0xff, 0xff, 0x03]),
            Err(Malformed::CountTooLarge(0).into())
        );
    }

    #[test]
    fn awareness_states_must_be_objects_or_null() {
        let mut body = vec![1, 5, 1];
        body.push(3);
        body.extend_from_slice(b"[1]");
        let mut frame = vec![1, body.len() as u8];
        frame.extend(body);
        assert_eq!(messages(&frame), Err(FrameError::NotAwarenessState(5)));
    }

    #[test]
    fn bytes_left_inside_a_message_are_refused() {
        // A state vector of one entry, and a byte after it.
        assert_eq!(
            messages(&[0, 0, 4, 1, 7, 3, 9]),
            Err(FrameError::Trailing("state vector"))
        );
    }

    #[test]
    fn an_empty_frame_has_no_messages() {
        assert_eq!(messages(&[]), Ok(vec![]));
    }
}
