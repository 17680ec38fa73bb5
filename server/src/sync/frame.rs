//! Splitting a WebSocket frame into y-websocket messages, strictly.
//!
//! `yrs`' `MessageReader` stops quietly at a truncated message, which would
//! let a malformed frame pass as "no messages". Margin refuses it instead:
//! a frame must hold whole messages and nothing else.

use yrs::sync::Message;
use yrs::updates::decoder::Decode;

/// Most messages one frame may carry (clients send one).
const MAX_MESSAGES_PER_FRAME: usize = 64;

/// Why a frame was refused.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// A message ends past the end of the frame.
    #[error("truncated message at byte {0}")]
    Truncated(usize),
    /// The message type is not part of the protocol Margin speaks.
    #[error("unsupported message type {0}")]
    Unsupported(u64),
    /// A message's body does not decode.
    #[error("malformed message: {0}")]
    Malformed(String),
    /// Too many messages in one frame.
    #[error("more than {MAX_MESSAGES_PER_FRAME} messages in one frame")]
    TooMany,
}

const MSG_SYNC: u64 = 0;
const MSG_AWARENESS: u64 = 1;
const MSG_AUTH: u64 = 2;
const MSG_QUERY_AWARENESS: u64 = 3;
const SYNC_STEP1: u64 = 0;

/// Decodes every message in `frame`.
pub fn messages(frame: &[u8]) -> Result<Vec<Message>, FrameError> {
    let mut out = Vec::with_capacity(1);
    let mut at = 0;
    while at < frame.len() {
        if out.len() == MAX_MESSAGES_PER_FRAME {
            return Err(FrameError::TooMany);
        }
        let start = at;
        let kind = read_var(frame, &mut at)?;
        match kind {
            MSG_SYNC => {
                let step = read_var(frame, &mut at)?; // step 1, step 2 or update
                let body = read_buf(frame, &mut at)?;
                // A state vector's entries are a client and a clock; an
                // update's clients each name a block count, client and
                // clock.
                counted(body, if step == SYNC_STEP1 { 2 } else { 3 })?;
            }
            MSG_AWARENESS => {
                // Each state: a client, a clock and a JSON string.
                counted(read_buf(frame, &mut at)?, 3)?;
            }
            MSG_QUERY_AWARENESS => {}
            MSG_AUTH => return Err(FrameError::Unsupported(kind)),
            other => return Err(FrameError::Unsupported(other)),
        }
        let message = Message::decode_v1(&frame[start..at])
            .map_err(|e| FrameError::Malformed(e.to_string()))?;
        out.push(message);
    }
    Ok(out)
}

/// Reads a lib0 unsigned varint.
fn read_var(frame: &[u8], at: &mut usize) -> Result<u64, FrameError> {
    let mut value: u64 = 0;
    for shift in (0..64).step_by(7) {
        let byte = *frame.get(*at).ok_or(FrameError::Truncated(*at))?;
        *at += 1;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(FrameError::Malformed("varint longer than 64 bits".into()))
}

/// The first count inside a message body — a state vector's entries, an
/// update's clients, an awareness update's states — must fit the body at
/// `entry_bytes` each at least. yrs reserves room for the count before it
/// reads a single entry: a 15-byte frame claiming 800 million entries had
/// it touch a gigabyte.
fn counted(body: &[u8], entry_bytes: usize) -> Result<(), FrameError> {
    if body.is_empty() {
        return Ok(());
    }
    let mut at = 0;
    let count = read_var(body, &mut at)?;
    let room = (body.len() - at) / entry_bytes;
    if usize::try_from(count).map_or(true, |count| count > room) {
        return Err(FrameError::Malformed(format!(
            "a message declares {count} entries in {} bytes",
            body.len()
        )));
    }
    Ok(())
}

/// Reads a length-prefixed byte buffer.
fn read_buf<'a>(frame: &'a [u8], at: &mut usize) -> Result<&'a [u8], FrameError> {
    let start = *at;
    skip_buf(frame, at)?;
    let mut body = start;
    read_var(frame, &mut body)?;
    Ok(&frame[body..*at])
}

/// Skips a length-prefixed byte buffer.
fn skip_buf(frame: &[u8], at: &mut usize) -> Result<(), FrameError> {
    let len = read_var(frame, at)?;
    let end = usize::try_from(len)
        .ok()
        .and_then(|len| at.checked_add(len))
        .filter(|end| *end <= frame.len())
        .ok_or(FrameError::Truncated(*at))?;
    *at = end;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use yrs::sync::SyncMessage;
    use yrs::updates::encoder::Encode;

    #[test]
    fn whole_messages_decode_back() {
        let one = Message::Sync(SyncMessage::Update(vec![0, 0]));
        let two = Message::AwarenessQuery;
        let mut frame = one.encode_v1();
        frame.extend(two.encode_v1());
        assert_eq!(messages(&frame), Ok(vec![one, two]));
    }

    #[test]
    fn truncated_message_is_refused() {
        assert_eq!(
            messages(&[0, 2, 0xff, 0xff, 0x01, 7]),
            Err(FrameError::Truncated(5))
        );
        assert_eq!(messages(&[0]), Err(FrameError::Truncated(1)));
    }

    #[test]
    fn unknown_and_auth_types_are_refused() {
        assert_eq!(messages(&[9, 0]), Err(FrameError::Unsupported(9)));
        assert_eq!(messages(&[2, 1]), Err(FrameError::Unsupported(2)));
    }

    #[test]
    fn a_count_the_body_cannot_hold_is_refused_before_yrs_reserves_it() {
        // Found by `cargo fuzz run sync_frame`: a state vector of
        // 0x2fffffff entries in 7 bytes.
        let bomb = [0, 0, 7, 0xff, 0xff, 0xff, 0xff, 0x02, 0x0b, 0x07];
        assert!(matches!(messages(&bomb), Err(FrameError::Malformed(m)) if m.contains("declares")));
        // The same for an update's clients and an awareness update's states.
        assert!(matches!(
            messages(&[0, 2, 3, 0xff, 0xff, 0x03]),
            Err(FrameError::Malformed(_))
        ));
        assert!(matches!(
            messages(&[1, 3, 0xff, 0xff, 0x03]),
            Err(FrameError::Malformed(_))
        ));
        // Counts that fit still decode.
        let step1 = Message::Sync(SyncMessage::SyncStep1(yrs::StateVector::default()));
        assert_eq!(messages(&step1.encode_v1()), Ok(vec![step1]));
    }

    #[test]
    fn empty_frame_has_no_messages() {
        assert_eq!(messages(&[]), Ok(vec![]));
    }
}
