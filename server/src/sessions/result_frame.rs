//! A tool result as a link frame: encoded off the async workers when it
//! carries an outline, a read's JSON spliced in as written, and refused as
//! `too_large` when it would not fit a frame.

use margin_protocol::decisions::{EncodedRead, ToolRefusal};
use margin_protocol::link::{ServerMessage, MAX_SERVER_FRAME_BYTES};
use margin_protocol::tools::ToolOutput;
use margin_protocol::RefusalCode;

/// Whether `message` carries an outline big enough to encode off the async
/// workers.
pub(super) fn is_large(message: &ServerMessage) -> bool {
    matches!(message, ServerMessage::ToolResult { output: Some(output), .. } if encoded_size(output) > LARGE_FRAME)
}

/// What a message to the machine came to.
#[derive(Debug, PartialEq)]
pub(super) enum Framed {
    /// Its encoding, to send.
    Fits(String),
    /// Its encoding was over [`MAX_SERVER_FRAME_BYTES`]: the `too_large`
    /// refusal of the call it answered, and how large it was.
    TooLarge(Box<ServerMessage>, usize),
}

/// `frame`, the encoding of `message`, if it fits a link frame
/// ([`MAX_SERVER_FRAME_BYTES`]); else the `too_large` refusal of the call
/// it answers. A read changed nothing; a write did, and the refusal says
/// so.
pub(super) fn within_frame_limit(message: &ServerMessage, frame: String) -> Framed {
    let ServerMessage::ToolResult {
        session,
        turn,
        call_id,
        output: Some(output),
        ..
    } = message
    else {
        return Framed::Fits(frame);
    };
    if frame.len() <= MAX_SERVER_FRAME_BYTES {
        return Framed::Fits(frame);
    }
    // Only a read changes nothing; every other tool's result is of a
    // change already made.
    let wrote = !matches!(
        output,
        ToolOutput::ReadDocument(_) | ToolOutput::EncodedRead(_)
    );
    let done = if wrote {
        "its changes were made: read the document to see them"
    } else {
        "nothing changed"
    };
    let refusal = ToolRefusal {
        code: RefusalCode::TooLarge,
        message: format!(
            "the call's result is {} bytes, over the {MAX_SERVER_FRAME_BYTES}-byte frame limit, so it was not sent; {done}",
            frame.len()
        ),
        read_again: wrote,
        retry: false,
    };
    let refused = ServerMessage::ToolResult {
        session: session.clone(),
        turn: turn.clone(),
        call_id: call_id.clone(),
        output: None,
        error: Some(refusal),
    };
    Framed::TooLarge(Box::new(refused), frame.len())
}

/// Frames larger than this are encoded on a blocking thread.
const LARGE_FRAME: usize = 256 * 1024;

/// `message` as a frame. A read's result is the frame serde writes with
/// the read's JSON spliced in as written, in a buffer sized for it up
/// front: a read's megabytes are copied into it once, neither checked
/// again ([`EncodedRead::written`]) nor copied again at every doubling of
/// a growing buffer (a sixth of a repeated read's server CPU).
pub(super) fn encoded(message: &ServerMessage) -> Result<String, serde_json::Error> {
    let ServerMessage::ToolResult {
        session,
        turn,
        call_id,
        output: Some(ToolOutput::EncodedRead(read)),
        error,
    } = message
    else {
        return serde_json::to_string(message);
    };
    let envelope = serde_json::to_string(&ServerMessage::ToolResult {
        session: session.clone(),
        turn: turn.clone(),
        call_id: call_id.clone(),
        output: Some(ToolOutput::EncodedRead(EncodedRead::written(
            SPLICED.into(),
        ))),
        error: error.clone(),
    })?;
    // Found nowhere else: inside the ids' strings serde escapes quotes.
    let Some(at) = envelope.find(SPLICED) else {
        return serde_json::to_string(message);
    };
    let mut frame = String::with_capacity(envelope.len() - SPLICED.len() + read.json().len());
    frame.push_str(&envelope[..at]);
    frame.push_str(read.json());
    frame.push_str(&envelope[at + SPLICED.len()..]);
    Ok(frame)
}

/// Where a read's JSON goes in its result's frame.
const SPLICED: &str = r#"{"revision":0,"outline":[]}"#;

/// How many bytes `output` takes as JSON: what decides whether a read's
/// result is kept (`KEPT_READ_BYTES`). A read comes encoded already.
pub(super) fn encoded_size(output: &ToolOutput) -> usize {
    match output {
        ToolOutput::EncodedRead(read) => read.json().len(),
        other => serde_json::to_vec(other).map_or(0, |v| v.len()),
    }
}

#[cfg(test)]
mod tests {
    use margin_protocol::decisions::EditPlanOutput;

    use super::*;

    fn result(output: ToolOutput) -> ServerMessage {
        ServerMessage::ToolResult {
            session: "s1".into(),
            turn: "t1".into(),
            call_id: "c1".into(),
            output: Some(output),
            error: None,
        }
    }

    fn read() -> ToolOutput {
        let json = r#"{"revision":3,"outline":[]}"#.to_string();
        ToolOutput::EncodedRead(EncodedRead::new(json).unwrap())
    }

    #[test]
    fn a_read_result_is_framed_as_serde_frames_it_in_a_buffer_sized_ahead() {
        let text = "x".repeat(100_000);
        let json = format!(r#"{{"revision":3,"outline":[{{"text":"{text}"}}]}}"#);
        let message = result(ToolOutput::EncodedRead(EncodedRead::new(json).unwrap()));
        let frame = encoded(&message).unwrap();
        assert_eq!(frame, serde_json::to_string(&message).unwrap());
        assert_eq!(frame.capacity(), frame.len());
        // Ids holding the placeholder's words do not move the read.
        let ServerMessage::ToolResult { output, .. } = message else {
            unreachable!()
        };
        let tricky = ServerMessage::ToolResult {
            session: SPLICED.into(),
            turn: format!("{SPLICED}\"{SPLICED}"),
            call_id: "c1".into(),
            output,
            error: None,
        };
        assert_eq!(
            encoded(&tricky).unwrap(),
            serde_json::to_string(&tricky).unwrap()
        );
        let other = ServerMessage::Refusal {
            code: RefusalCode::Internal,
            message: "m".into(),
            call_id: None,
            session: None,
            turn: None,
            run: None,
        };
        assert_eq!(
            encoded(&other).unwrap(),
            serde_json::to_string(&other).unwrap()
        );
    }

    #[test]
    fn a_result_within_the_frame_limit_is_sent_as_encoded() {
        let frame = "x".repeat(MAX_SERVER_FRAME_BYTES);
        let sent = within_frame_limit(&result(read()), frame.clone());
        assert_eq!(sent, Framed::Fits(frame));
    }

    #[test]
    fn a_read_over_the_frame_limit_is_refused_as_too_large_and_changed_nothing() {
        let frame = "x".repeat(MAX_SERVER_FRAME_BYTES + 1);
        let Framed::TooLarge(refused, bytes) = within_frame_limit(&result(read()), frame) else {
            panic!("a frame over the limit was let through");
        };
        assert_eq!(bytes, MAX_SERVER_FRAME_BYTES + 1);
        let ServerMessage::ToolResult {
            call_id,
            output: None,
            error: Some(error),
            ..
        } = *refused
        else {
            panic!("not a refused result");
        };
        assert_eq!(call_id, "c1");
        assert_eq!(error.code, RefusalCode::TooLarge);
        assert!(
            error.message.ends_with("nothing changed"),
            "{}",
            error.message
        );
        assert!(!error.read_again && !error.retry);
    }

    #[test]
    fn an_edit_over_the_frame_limit_is_refused_as_too_large_saying_it_was_made() {
        let edit = ToolOutput::EditPlan(EditPlanOutput {
            revision: 4,
            outline: Vec::new(),
        });
        let frame = "x".repeat(MAX_SERVER_FRAME_BYTES + 1);
        let Framed::TooLarge(refused, _) = within_frame_limit(&result(edit), frame) else {
            panic!("a frame over the limit was let through");
        };
        let ServerMessage::ToolResult {
            error: Some(error), ..
        } = *refused
        else {
            panic!("not a refused result");
        };
        assert_eq!(error.code, RefusalCode::TooLarge);
        assert!(
            error.message.contains("its changes were made"),
            "{}",
            error.message
        );
        assert!(error.read_again);
    }
}
