//! The Rust connector SDK (`margin_sdk`) against scripted link servers
//! that do exactly what a test needs at the wire: a refusal to try again
//! or not, an `invoke` sent twice, a call lost with its link and answered
//! `unknown_call` after `resume`, a Stop held across it (SPEC L6, L10,
//! W1). The same SDK against the real server is `connector.rs`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use margin_protocol::decisions::ToolRefusal;
use margin_protocol::RefusalCode;
use margin_sdk::{Connector, Handler, ToolError, Turn};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::connector::Reads;

const PATIENCE: Duration = Duration::from_secs(10);

type Ws = tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>;

/// A frame of `message`, as a scripted server sends it.
fn text(message: &margin_protocol::link::ServerMessage) -> tokio_tungstenite::tungstenite::Message {
    tokio_tungstenite::tungstenite::Message::Text(serde_json::to_string(message).unwrap().into())
}

/// The `invoke` every scripted server starts its turn with.
fn invoke() -> margin_protocol::link::ServerMessage {
    margin_protocol::link::ServerMessage::Invoke {
        session: "s".into(),
        turn: "t".into(),
        document: "d".into(),
        messages: vec![],
        repair: vec![],
        plan: None,
    }
}

/// A scripted server's side of a link's start: accepts the machine on
/// `listener`, reads its `hello` and welcomes it.
async fn welcomed(listener: &tokio::net::TcpListener) -> Ws {
    use futures_util::{SinkExt, StreamExt};
    let (tcp, _) = listener.accept().await.unwrap();
    let mut ws = tokio_tungstenite::accept_async(tcp).await.unwrap();
    let _hello = ws.next().await;
    let welcome = margin_protocol::link::ServerMessage::Welcome {
        protocol_version: 1,
        machine: "m".into(),
        capabilities: margin_protocol::link::Capabilities::default(),
    };
    ws.send(text(&welcome)).await.unwrap();
    ws
}

/// A scripted link server: welcomes one machine, starts one turn, and
/// answers its tool calls with `results` in order. Yields how many tool
/// calls it got and the turn's reply.
async fn scripted_server(
    results: Vec<Result<serde_json::Value, ToolRefusal>>,
) -> (String, tokio::task::JoinHandle<(usize, String)>) {
    use futures_util::{SinkExt, StreamExt};
    use margin_protocol::link::{ClientMessage, ServerMessage};
    use tokio_tungstenite::tungstenite::Message;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let mut ws = welcomed(&listener).await;
        let invoke = invoke();
        ws.send(text(&invoke)).await.unwrap();
        let (mut results, mut calls) = (results.into_iter(), 0);
        loop {
            let frame = match ws.next().await {
                Some(Ok(Message::Text(frame))) => frame,
                // The connector pings a quiet link.
                Some(Ok(Message::Ping(_))) => continue,
                _ => panic!("the machine went away"),
            };
            match serde_json::from_str::<ClientMessage>(&frame).unwrap() {
                ClientMessage::ToolCall { call_id, .. } => {
                    calls += 1;
                    let result = results.next().expect("no more scripted results");
                    let (output, error) = match result {
                        Ok(o) => (Some(serde_json::from_value(o).unwrap()), None),
                        Err(e) => (None, Some(e)),
                    };
                    let answer = ServerMessage::ToolResult {
                        session: "s".into(),
                        turn: "t".into(),
                        call_id,
                        output,
                        error,
                    };
                    ws.send(text(&answer)).await.unwrap();
                }
                ClientMessage::Reply { text, .. } => return (calls, text),
                _ => {}
            }
        }
    });
    (format!("http://{addr}"), task)
}

fn refusal(code: RefusalCode, retry: bool) -> ToolRefusal {
    ToolRefusal {
        code,
        message: format!("{code} happened"),
        read_again: false,
        retry,
    }
}

#[tokio::test]
async fn connector_tries_again_only_a_call_the_server_could_not_decide() {
    let empty = json!({"revision": 1, "outline": []});
    let (server, seen) = scripted_server(vec![
        Err(refusal(RefusalCode::Internal, true)),
        Err(refusal(RefusalCode::Internal, true)),
        Ok(empty),
    ])
    .await;
    let linked = Connector::new(server, "mgm_x").connect().await.unwrap();
    tokio::spawn(linked.serve(Reads, std::future::pending()));
    let (calls, reply) = tokio::time::timeout(PATIENCE, seen).await.unwrap().unwrap();
    assert_eq!((calls, reply.as_str()), (3, "0 blocks."));

    // A decision is returned at once, never tried again.
    let (server, seen) =
        scripted_server(vec![Err(refusal(RefusalCode::StaleRevision, false))]).await;
    let linked = Connector::new(server, "mgm_x").connect().await.unwrap();
    tokio::spawn(linked.serve(Reads, std::future::pending()));
    let (calls, reply) = tokio::time::timeout(PATIENCE, seen).await.unwrap().unwrap();
    assert_eq!(calls, 1);
    assert_eq!(
        reply,
        "The Planner could not finish this turn: refused (stale_revision): stale_revision happened"
    );
}

/// A scripted link server that sends the same `invoke` again while the
/// turn runs, and once more after its reply (never acknowledged): yields
/// the replies it got.
async fn invokes_twice() -> (String, tokio::task::JoinHandle<Vec<String>>) {
    use futures_util::{SinkExt, StreamExt};
    use margin_protocol::link::ClientMessage;
    use tokio_tungstenite::tungstenite::Message;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let mut ws = welcomed(&listener).await;
        let invoke = invoke();
        ws.send(text(&invoke)).await.unwrap();
        ws.send(text(&invoke)).await.unwrap();
        let mut replies = Vec::new();
        while replies.len() < 2 {
            let frame = match ws.next().await {
                Some(Ok(Message::Text(frame))) => frame,
                Some(Ok(Message::Ping(_))) => continue,
                _ => panic!("the machine went away"),
            };
            if let ClientMessage::Reply { text: reply, .. } = serde_json::from_str(&frame).unwrap()
            {
                replies.push(reply);
                ws.send(text(&invoke)).await.unwrap();
            }
        }
        replies
    });
    (format!("http://{addr}"), task)
}

/// Counts its turns and replies after a pause.
struct CountsSlowly(Arc<AtomicUsize>);

impl Handler for CountsSlowly {
    async fn turn(&self, _: Turn) -> Result<String, ToolError> {
        let n = self.0.fetch_add(1, Ordering::SeqCst) + 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
        Ok(format!("Turn {n}."))
    }
}

#[tokio::test]
async fn connector_runs_an_invoke_sent_again_once_and_answers_it_with_the_kept_reply() {
    let (server, seen) = invokes_twice().await;
    let turns = Arc::new(AtomicUsize::new(0));
    let linked = Connector::new(server, "mgm_x").connect().await.unwrap();
    tokio::spawn(linked.serve(CountsSlowly(turns.clone()), std::future::pending()));
    let replies = tokio::time::timeout(PATIENCE, seen).await.unwrap().unwrap();
    assert_eq!(replies, ["Turn 1.", "Turn 1."]);
    assert_eq!(
        turns.load(Ordering::SeqCst),
        1,
        "the handler saw the turn once"
    );
}

/// What [`loses_a_call`]'s second link saw: the calls its `resume` named,
/// the tool calls that came after `resumed` (by id), and the reply — or
/// `stopped` when the script held a Stop.
#[derive(Debug, PartialEq)]
struct AfterResume {
    named: Vec<String>,
    calls: Vec<String>,
    reply: String,
}

/// A scripted link server whose first link dies under the turn's first
/// tool call, which it never records (written into a dead socket); on the
/// next link it answers `resumed`, then (with `stop`) a Stop held for the
/// session, then `unknown_call` naming each call the `resume` named (SPEC
/// W1), then each tool call with an empty outline.
async fn loses_a_call(stop: bool) -> (String, tokio::task::JoinHandle<AfterResume>) {
    use futures_util::{SinkExt, StreamExt};
    use margin_protocol::link::{ClientMessage, ResumedSession, ServerMessage};
    use tokio_tungstenite::tungstenite::Message;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let next = |frame: Option<Result<Message, _>>| match frame {
            Some(Ok(Message::Text(frame))) => {
                Some(serde_json::from_str::<ClientMessage>(&frame).unwrap())
            }
            Some(Ok(_)) => None,
            other => panic!("the machine went away: {other:?}"),
        };

        let mut ws = welcomed(&listener).await;
        ws.send(text(&invoke())).await.unwrap();
        while !matches!(next(ws.next().await), Some(ClientMessage::ToolCall { .. })) {}
        // The link dies with the call: the server never saw it.
        drop(ws);

        let mut ws = welcomed(&listener).await;
        let named = loop {
            if let Some(ClientMessage::Resume { sessions }) = next(ws.next().await) {
                break sessions
                    .into_iter()
                    .flat_map(|s| s.calls)
                    .collect::<Vec<_>>();
            }
        };
        let resumed = ServerMessage::Resumed {
            sessions: vec![ResumedSession {
                session: "s".into(),
                document: "d".into(),
                withdrawn: vec![],
            }],
            ended: vec![],
        };
        ws.send(text(&resumed)).await.unwrap();
        if stop {
            let stop = ServerMessage::Stop {
                session: "s".into(),
            };
            ws.send(text(&stop)).await.unwrap();
        }
        for call in &named {
            let unknown = ServerMessage::Refusal {
                code: RefusalCode::UnknownCall,
                message: format!("no record of call {call:?} in this turn: it never ran, and calling it again is safe"),
                call_id: Some(call.clone()),
                session: None,
                turn: None,
                run: None,
            };
            ws.send(text(&unknown)).await.unwrap();
        }
        let mut calls = Vec::new();
        loop {
            match next(ws.next().await) {
                Some(ClientMessage::ToolCall { call_id, .. }) => {
                    calls.push(call_id.clone());
                    let answer = ServerMessage::ToolResult {
                        session: "s".into(),
                        turn: "t".into(),
                        call_id,
                        output: Some(
                            serde_json::from_value(json!({"revision": 1, "outline": []})).unwrap(),
                        ),
                        error: None,
                    };
                    ws.send(text(&answer)).await.unwrap();
                }
                Some(ClientMessage::Reply { text: reply, .. }) => {
                    return AfterResume {
                        named,
                        calls,
                        reply,
                    };
                }
                Some(ClientMessage::Stopped { .. }) => {
                    // Anything sent again would have come before `stopped`;
                    // give a late one time to show all the same.
                    let late = tokio::time::timeout(Duration::from_millis(300), async {
                        loop {
                            if let Some(ClientMessage::ToolCall { call_id, .. }) =
                                next(ws.next().await)
                            {
                                break call_id;
                            }
                        }
                    })
                    .await;
                    calls.extend(late);
                    return AfterResume {
                        named,
                        calls,
                        reply: "stopped".into(),
                    };
                }
                _ => {}
            }
        }
    });
    (format!("http://{addr}"), task)
}

#[tokio::test]
async fn connector_sends_again_a_resumed_call_the_server_never_recorded() {
    let (server, seen) = loses_a_call(false).await;
    let connector = Connector::new(server, "mgm_x").silence_timeout(Duration::from_secs(1));
    let detach = CancellationToken::new();
    let running = tokio::spawn({
        let until = detach.clone().cancelled_owned();
        async move { connector.run(Reads, until).await }
    });
    let after = tokio::time::timeout(PATIENCE, seen).await.unwrap().unwrap();
    // Named in `resume`, answered `unknown_call`: it never ran, so it goes
    // again (the same call) and the turn carries on with its result.
    assert_eq!(
        after,
        AfterResume {
            named: vec!["c1".into()],
            calls: vec!["c1".into()],
            reply: "0 blocks.".into(),
        }
    );
    detach.cancel();
    let _ = tokio::time::timeout(PATIENCE, running).await;
}

#[tokio::test]
async fn connector_does_not_send_again_a_call_of_a_turn_stopped_after_resume() {
    let (server, seen) = loses_a_call(true).await;
    let connector = Connector::new(server, "mgm_x").silence_timeout(Duration::from_secs(1));
    let detach = CancellationToken::new();
    let running = tokio::spawn({
        let until = detach.clone().cancelled_owned();
        async move { connector.run(Reads, until).await }
    });
    let after = tokio::time::timeout(PATIENCE, seen).await.unwrap().unwrap();
    // The held Stop came first after `resumed` and ended the turn: its call
    // answered `unknown_call` next belongs to no turn, and is not made.
    assert_eq!(
        after,
        AfterResume {
            named: vec!["c1".into()],
            calls: vec![],
            reply: "stopped".into(),
        }
    );
    detach.cancel();
    let _ = tokio::time::timeout(PATIENCE, running).await;
}
