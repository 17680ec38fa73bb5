//! The I/O loop against a socket whose writes fail: what was not written
//! goes again once the link is back.

use super::*;
use margin_protocol::link::HeldSession;
use pretty_assertions::assert_eq;

/// Reads the document, and replies with what it came to.
struct Reads;

impl Handler for Reads {
    async fn turn(&self, turn: Turn) -> Result<String, ToolError> {
        let read = turn.read_document().await?;
        Ok(format!("{} blocks.", read.outline.len()))
    }
}

/// A socket that broke: every write fails (a reset connection, a
/// broken pipe).
struct Broken;

impl futures_util::Sink<Message> for Broken {
    type Error = std::io::Error;

    fn poll_ready(
        self: Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Err(std::io::ErrorKind::BrokenPipe.into()))
    }

    fn start_send(self: Pin<&mut Self>, _: Message) -> Result<(), Self::Error> {
        Err(std::io::ErrorKind::BrokenPipe.into())
    }

    fn poll_flush(
        self: Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Err(std::io::ErrorKind::BrokenPipe.into()))
    }

    fn poll_close(
        self: Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }
}

fn invoke(session: &str, turn: &str) -> ServerMessage {
    ServerMessage::Invoke {
        session: session.into(),
        turn: turn.into(),
        document: "d".into(),
        messages: vec![],
        repair: vec![],
        plan: None,
    }
}

fn held(resume: ClientMessage) -> Vec<HeldSession> {
    match resume {
        ClientMessage::Resume { sessions } => sessions,
        other => panic!("not a resume: {other:?}"),
    }
}

#[tokio::test]
async fn a_call_whose_write_failed_is_named_in_the_next_resume() {
    let mut serving = Serving::new(Reads, None);
    assert_eq!(serving.dispatch(invoke("s", "t")), []);
    let call = serving.outbox.recv().await.expect("the turn calls");
    assert!(matches!(call, ClientMessage::ToolCall { .. }), "{call:?}");

    // The socket broke under the call: it may have reached the server
    // or not; the next `resume` names it, so it gets one answer either
    // way (its result, or `unknown_call` and it goes again).
    assert!(serving.write_all(&mut Broken, vec![call]).await.is_err());
    assert_eq!(
        held(serving.resume_message()),
        [HeldSession {
            session: "s".into(),
            questions: vec![],
            turn: Some("t".into()),
            calls: vec!["c1".into()],
        }]
    );
}

#[tokio::test]
async fn a_reply_whose_write_failed_goes_again_after_resumed() {
    let mut serving = Serving::new(Reads, None);
    let reply = ClientMessage::Reply {
        session: "s".into(),
        turn: "t".into(),
        text: "Done.".into(),
    };
    assert!(serving
        .write_all(&mut Broken, vec![reply.clone()])
        .await
        .is_err());
    let resume = held(serving.resume_message());
    assert_eq!(resume[0].turn.as_deref(), Some("t"));
    let resumed = ServerMessage::Resumed {
        sessions: vec![],
        ended: vec![],
    };
    assert_eq!(serving.dispatch(resumed), [reply]);
}
