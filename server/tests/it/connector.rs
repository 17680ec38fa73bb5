//! The Rust connector SDK (`margin_sdk`) against a real server over real
//! sockets: turns with typed tool calls and replies, Stop, answers to
//! questions, refused calls; replies and run reports written into a link
//! that had died, sent again after `resume` (SPEC L10). The demo Planner
//! built on it is tested in `demo_planner.rs`, on this file's `Scene`.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use margin_protocol::chat::{ChatKind, ChatList};
use margin_protocol::decisions::{
    AnswerBody, CardInput, DecisionList, OpenDecisionInput, PassageAddress,
};
use margin_protocol::link::{PlannerView, RunStatus};
use margin_sdk::{Answer, Connector, Handler, SessionHandle, ToolError, Turn};
use serde_json::json;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::harness::{Api, InProcess, Proxy, Server, SyncClient};
use crate::on_both_backends;

const PATIENCE: Duration = Duration::from_secs(10);

/// A document of ada's with `paragraphs`, and a machine paired to her.
pub(crate) struct Scene {
    pub(crate) server: InProcess,
    pub(crate) token: String,
    pub(crate) doc: String,
    pub(crate) credential: String,
}

impl Scene {
    pub(crate) async fn new(db: &crate::harness::TestDb, paragraphs: &[&str]) -> Scene {
        let server = InProcess::start(db).await;
        let (_, token) = server.account("ada").await;
        let doc = server.create_document(&token, "Plan").await;
        let mut person = SyncClient::connect(&server.sync_url(&doc, &token)).await;
        for text in paragraphs {
            person.append_paragraph(text).await;
        }
        let (status, paired) = server
            .post(Some(&token), "/machines", json!({"name": "laptop"}))
            .await;
        assert_eq!(status, 201, "{paired}");
        let credential = paired["credential"].as_str().unwrap().to_owned();
        Scene {
            server,
            token,
            doc,
            credential,
        }
    }

    /// Links `handler` through the SDK; cancel the token to detach.
    pub(crate) async fn link(&self, handler: impl Handler) -> CancellationToken {
        self.link_served(handler).await.0
    }

    /// As [`Scene::link`], with the serving task, which ends once the link
    /// has.
    async fn link_served(
        &self,
        handler: impl Handler,
    ) -> (
        CancellationToken,
        tokio::task::JoinHandle<margin_sdk::Ended>,
    ) {
        let linked = Connector::new(format!("http://{}", self.server.addr), &self.credential)
            .connect()
            .await
            .expect("the connector links");
        let detach = CancellationToken::new();
        let serving = tokio::spawn(linked.serve(handler, detach.clone().cancelled_owned()));
        (detach, serving)
    }

    /// Serves `handler` through `connector`, linking again after drops;
    /// returns once it has linked. Cancel the token to detach.
    async fn run(
        &self,
        connector: Connector,
        handler: impl Handler,
    ) -> (
        CancellationToken,
        tokio::task::JoinHandle<margin_sdk::Ended>,
    ) {
        let (linked, mut has_linked) = mpsc::unbounded_channel();
        let connector = connector.on_link(move |_| {
            let _ = linked.send(());
        });
        let detach = CancellationToken::new();
        let until = detach.clone().cancelled_owned();
        let running = tokio::spawn(async move { connector.run(handler, until).await });
        tokio::time::timeout(PATIENCE, has_linked.recv())
            .await
            .expect("the connector linked");
        (detach, running)
    }

    pub(crate) async fn say(&self, text: &str) {
        self.server.say(&self.token, &self.doc, text).await;
    }

    /// The Chat lines the server wrote itself.
    async fn system_lines(&self) -> Vec<String> {
        let (_, body) = self
            .server
            .get(Some(&self.token), &format!("/documents/{}/chat", self.doc))
            .await;
        let list: ChatList = serde_json::from_value(body).unwrap();
        list.messages
            .into_iter()
            .filter(|m| m.kind == ChatKind::System)
            .map(|m| m.text)
            .collect()
    }

    pub(crate) async fn planner_view(&self) -> PlannerView {
        let (status, body) = self
            .server
            .get(
                Some(&self.token),
                &format!("/documents/{}/planner", self.doc),
            )
            .await;
        assert_eq!(status, 200, "{body}");
        serde_json::from_value(body).unwrap()
    }
}

/// Waits for the `count`th Chat line matching `wanted`; returns them all.
pub(crate) async fn chat_until(
    api: &Api,
    token: &str,
    doc: &str,
    count: usize,
    wanted: impl Fn(ChatKind, &str) -> bool,
) -> Vec<String> {
    let path = format!("/documents/{doc}/chat");
    let mut last = Vec::new();
    for _ in 0..1000 {
        let (_, body) = api.get(Some(token), &path).await;
        let list: ChatList = serde_json::from_value(body).unwrap();
        last = list
            .messages
            .iter()
            .filter(|m| wanted(m.kind, &m.text))
            .map(|m| m.text.clone())
            .collect();
        if last.len() >= count {
            return last;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("chat never had {count} such lines; it has {last:?}");
}

pub(crate) async fn decisions(api: &Api, token: &str, doc: &str) -> DecisionList {
    let (status, body) = api
        .get(Some(token), &format!("/documents/{doc}/decisions"))
        .await;
    assert_eq!(status, 200, "{body}");
    serde_json::from_value(body).unwrap()
}

pub(crate) fn planner_replies(kind: ChatKind, _: &str) -> bool {
    kind == ChatKind::Planner
}

/// Reports a running run, then works until aborted. Records that the turn
/// was dropped (aborted) and that its stop handler ran.
struct Stalls {
    started: mpsc::UnboundedSender<()>,
    aborted: Arc<AtomicBool>,
    stop_ran: Arc<AtomicBool>,
}

struct SetOnDrop(Arc<AtomicBool>);

impl Drop for SetOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

impl Handler for Stalls {
    async fn turn(&self, turn: Turn) -> Result<String, ToolError> {
        let _guard = SetOnDrop(self.aborted.clone());
        turn.run("build", "Build the site", RunStatus::Running)
            .await?;
        let _ = self.started.send(());
        std::future::pending::<()>().await;
        Ok("unreachable".into())
    }

    async fn stop(&self, session: SessionHandle) {
        assert!(!session.id().is_empty());
        self.stop_ran
            .store(self.aborted.load(Ordering::SeqCst), Ordering::SeqCst);
    }
}

/// Asks one question about the first block, and passes answers on.
struct Asks {
    answers: mpsc::UnboundedSender<(String, AnswerBody, String)>,
}

impl Handler for Asks {
    async fn turn(&self, turn: Turn) -> Result<String, ToolError> {
        let read = turn.read_document().await?;
        let block = &read.outline[0];
        let asked = turn
            .ask(&OpenDecisionInput {
                revision: read.revision,
                card: CardInput {
                    key: "region".into(),
                    question: "Which region launches first?".into(),
                    description: None,
                    response: "yes_no".into(),
                    choices: Vec::new(),
                    passages: vec![PassageAddress {
                        index: block.index,
                        digest: block.digest.clone(),
                    }],
                },
            })
            .await?;
        Ok(format!("I asked about the region: {}.", asked.summary))
    }

    async fn answered(&self, answer: Answer) {
        let _ = self
            .answers
            .send((answer.request, answer.answer, answer.answered_by));
    }
}

/// Keeps its turn for the test to call tools on after the reply.
struct Keeps(Arc<Mutex<Option<Turn>>>);

impl Handler for Keeps {
    async fn turn(&self, turn: Turn) -> Result<String, ToolError> {
        *self.0.lock().unwrap() = Some(turn);
        Ok("Done.".into())
    }
}

/// Reads the document and says how many blocks it has.
pub(crate) struct Reads;

impl Handler for Reads {
    async fn turn(&self, turn: Turn) -> Result<String, ToolError> {
        let read = turn.read_document().await?;
        Ok(format!("{} blocks.", read.outline.len()))
    }
}

on_both_backends! {
    async fn connector_stop_aborts_the_turn_runs_the_stop_handler_then_confirms(db) {
        let s = Scene::new(&db, &["Build it."]).await;
        let (started, mut has_started) = mpsc::unbounded_channel();
        let (aborted, stop_ran) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
        let _detach = s.link(Stalls { started, aborted: aborted.clone(), stop_ran: stop_ran.clone() }).await;
        s.say("@planner build the site").await;
        tokio::time::timeout(PATIENCE, has_started.recv()).await.expect("the turn started");
        while s.planner_view().await.runs.is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(s.planner_view().await.runs[0].status, RunStatus::Running);

        let (status, body) = s.server.post(Some(&s.token), &format!("/documents/{}/planner/stop", s.doc), json!({})).await;
        assert_eq!(status, 202, "{body}");
        let lines = chat_until(&s.server, &s.token, &s.doc, 2, |kind, text| kind == ChatKind::System && text.contains("stopped")).await;
        assert_eq!(lines, ["The Planner stopped.", "Build the site was stopped after 0 min."]);
        assert!(stop_ran.load(Ordering::SeqCst), "the stop handler ran after the turn was aborted");
        let view = s.planner_view().await;
        assert!(!view.stop_pending && !view.replying && view.runs.is_empty(), "{view:?}");
    }

    async fn connector_delivers_the_answer_to_a_question_it_asked_to_the_handler(db) {
        let s = Scene::new(&db, &["Launch in one region."]).await;
        let (answers, mut answered) = mpsc::unbounded_channel();
        let _detach = s.link(Asks { answers }).await;
        s.say("@planner ask about the region").await;
        let replies = chat_until(&s.server, &s.token, &s.doc, 1, planner_replies).await;
        assert_eq!(replies[0], "I asked about the region: added 1 decision.");
        let card = decisions(&s.server, &s.token, &s.doc).await.decisions.remove(0);
        assert_eq!(s.planner_view().await.questions, 1);

        let (status, body) = s.server.post(Some(&s.token), &format!("/documents/{}/decisions/{}/answer", s.doc, card.id), json!({"yes": true})).await;
        assert_eq!(status, 200, "{body}");
        let got = tokio::time::timeout(PATIENCE, answered.recv()).await.expect("the answer arrived").unwrap();
        assert_eq!(got, (card.id, AnswerBody::Yes(true), "ada".to_owned()));
    }

    async fn connector_fails_a_tool_call_the_server_refuses_instead_of_waiting_forever(db) {
        let s = Scene::new(&db, &["Text."]).await;
        let kept = Arc::new(Mutex::new(None));
        let _detach = s.link(Keeps(kept.clone())).await;
        s.say("@planner hello").await;
        chat_until(&s.server, &s.token, &s.doc, 1, planner_replies).await;
        let turn = kept.lock().unwrap().take().expect("the turn was kept");

        // The turn ended with its reply: the server refuses the call, naming it.
        let refused = tokio::time::timeout(PATIENCE, turn.read_document()).await.expect("the call settled");
        match refused {
            Err(ToolError::Refused(refusal)) => assert_eq!(refusal.code, "unknown_turn"),
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    async fn connector_fails_tool_calls_once_the_link_has_ended(db) {
        let s = Scene::new(&db, &["Text."]).await;
        let kept = Arc::new(Mutex::new(None));
        let (detach, serving) = s.link_served(Keeps(kept.clone())).await;
        s.say("@planner hello").await;
        chat_until(&s.server, &s.token, &s.doc, 1, planner_replies).await;
        let turn = kept.lock().unwrap().take().expect("the turn was kept");
        detach.cancel();
        // Called once the link has ended: called sooner, it could still
        // reach the server, which refuses it as a turn that ended.
        tokio::time::timeout(PATIENCE, serving).await.expect("the link ended").expect("serving ran");
        let ended = tokio::time::timeout(PATIENCE, turn.read_document()).await.expect("the call settled");
        assert!(matches!(ended, Err(ToolError::LinkClosed)), "{ended:?}");
    }

    async fn connector_run_links_again_after_a_drop_resumes_and_delivers_the_held_answer_once(db) {
        let s = Scene::new(&db, &["Launch in one region."]).await;
        let proxy = Proxy::to(s.server.addr).await;
        let (answers, mut answered) = mpsc::unbounded_channel();
        let links = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = links.clone();
        let connector = Connector::new(format!("http://{}", proxy.addr), &s.credential)
            .on_link(move |_| { counted.fetch_add(1, Ordering::SeqCst); });
        let detach = CancellationToken::new();
        let running = tokio::spawn({
            let detach = detach.clone();
            async move { connector.run(Asks { answers }, detach.cancelled_owned()).await }
        });
        for _ in 0..1000 {
            if links.load(Ordering::SeqCst) >= 1 { break; }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        s.say("@planner ask about the region").await;
        chat_until(&s.server, &s.token, &s.doc, 1, planner_replies).await;
        let card = decisions(&s.server, &s.token, &s.doc).await.decisions.remove(0);

        // Wi-Fi goes: no close frame reaches either side.
        proxy.cut();
        let mut view = s.planner_view().await;
        for _ in 0..500 {
            if view.disconnected { break; }
            tokio::time::sleep(Duration::from_millis(10)).await;
            view = s.planner_view().await;
        }
        // The SDK may already be back; either way nothing was released.
        let (status, body) = s.server.post(Some(&s.token), &format!("/documents/{}/decisions/{}/answer", s.doc, card.id), json!({"yes": true})).await;
        assert_eq!(status, 200, "{body}");
        let got = tokio::time::timeout(PATIENCE, answered.recv()).await.expect("the held answer arrived").unwrap();
        assert_eq!(got.0, card.id);
        assert!(links.load(Ordering::SeqCst) >= 2, "the connector linked again");
        // Acknowledged: a later drop and resume does not deliver it again.
        let before = links.load(Ordering::SeqCst);
        proxy.cut();
        // Wait for the SDK to link and resume again, then for any redelivery.
        let mut view = s.planner_view().await;
        for _ in 0..500 {
            if links.load(Ordering::SeqCst) > before && view.connected && !view.disconnected { break; }
            tokio::time::sleep(Duration::from_millis(10)).await;
            view = s.planner_view().await;
        }
        assert!(links.load(Ordering::SeqCst) > before && view.connected && !view.disconnected, "{view:?}");
        assert!(tokio::time::timeout(Duration::from_millis(300), answered.recv()).await.is_err(), "delivered once");
        assert_eq!(view.questions, 0);
        detach.cancel();
        assert_eq!(running.await.unwrap(), margin_sdk::Ended::Detached);
    }

    async fn connector_posts_a_reply_written_into_a_dead_link_once_after_it_resumes(db) {
        let s = Scene::new(&db, &["Launch in March."]).await;
        let proxy = Arc::new(Proxy::to(s.server.addr).await);
        let turns = Arc::new(AtomicUsize::new(0));
        let handler = DiesBeforeReplying { proxy: proxy.clone(), turns: turns.clone(), reports: false };
        let (detach, running) = s.run(Connector::new(format!("http://{}", proxy.addr), &s.credential).silence_timeout(Duration::from_secs(1)), handler).await;
        s.say("@planner read it").await;

        let replies = chat_until(&s.server, &s.token, &s.doc, 1, planner_replies).await;
        assert_eq!(replies, ["Read 1 blocks."]);
        // Acknowledged now: a later drop sends it no more.
        proxy.cut();
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert_eq!(chat_until(&s.server, &s.token, &s.doc, 1, planner_replies).await, ["Read 1 blocks."], "posted once");
        let ended: Vec<_> = s.system_lines().await.into_iter().filter(|line| line.contains("without")).collect();
        assert_eq!(ended, Vec::<String>::new(), "the turn was handed back, not ended");
        assert_eq!(turns.load(Ordering::SeqCst), 1, "the handler saw the turn once");
        detach.cancel();
        assert_eq!(running.await.unwrap(), margin_sdk::Ended::Detached);
    }

    async fn connector_sends_a_run_report_lost_with_a_dead_link_again_after_it_resumes(db) {
        let s = Scene::new(&db, &["Launch in March."]).await;
        let proxy = Arc::new(Proxy::to(s.server.addr).await);
        let turns = Arc::new(AtomicUsize::new(0));
        let handler = DiesBeforeReplying { proxy: proxy.clone(), turns: turns.clone(), reports: true };
        let (detach, running) = s.run(Connector::new(format!("http://{}", proxy.addr), &s.credential).silence_timeout(Duration::from_secs(1)), handler).await;
        s.say("@planner read it").await;

        let replies = chat_until(&s.server, &s.token, &s.doc, 1, planner_replies).await;
        assert_eq!(replies, ["Read 1 blocks."]);
        let mut view = s.planner_view().await;
        for _ in 0..500 {
            if view.runs.first().is_some_and(|run| run.status == RunStatus::Completed) { break; }
            tokio::time::sleep(Duration::from_millis(10)).await;
            view = s.planner_view().await;
        }
        let runs: Vec<_> = view.runs.iter().map(|run| (run.run.as_str(), run.status)).collect();
        assert_eq!(runs, [("review", RunStatus::Completed)]);
        assert_eq!(turns.load(Ordering::SeqCst), 1, "the handler saw the turn once");
        detach.cancel();
        assert_eq!(running.await.unwrap(), margin_sdk::Ended::Detached);
    }

    async fn a_new_connector_with_the_held_file_sends_the_kept_reply_once(db) {
        let s = Scene::new(&db, &["Launch in March."]).await;
        let proxy = Arc::new(Proxy::to(s.server.addr).await);
        let held = db.data_dir().join("laptop.sessions.json");
        let turns = Arc::new(AtomicUsize::new(0));
        let handler = DiesBeforeReplying { proxy: proxy.clone(), turns: turns.clone(), reports: false };
        // The first machine never notices the link died: it is killed first.
        let first = Connector::new(format!("http://{}", proxy.addr), &s.credential)
            .held_file(&held)
            .silence_timeout(Duration::from_secs(600));
        let (_detach, running) = s.run(first, handler).await;
        s.say("@planner read it").await;
        let mut kept = String::new();
        for _ in 0..1000 {
            kept = std::fs::read_to_string(&held).unwrap_or_default();
            if kept.contains("Read 1 blocks.") { break; }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let kept: serde_json::Value = serde_json::from_str(&kept).unwrap_or_default();
        let session = s.planner_view().await.session.expect("a session");
        let reply = &kept[&session]["reply"];
        assert_eq!(reply["text"], "Read 1 blocks.", "the unacknowledged reply is kept on disk: {kept}");
        running.abort();
        let _ = running.await;

        let again = Arc::new(AtomicUsize::new(0));
        let second = Connector::new(format!("http://{}", proxy.addr), &s.credential).held_file(&held);
        let (detach, running) = s.run(second, Counts(again.clone())).await;
        let replies = chat_until(&s.server, &s.token, &s.doc, 1, planner_replies).await;
        assert_eq!(replies, ["Read 1 blocks."]);
        for _ in 0..500 {
            let kept = std::fs::read_to_string(&held).unwrap_or_default();
            if !kept.contains("reply") { break; }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let kept: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&held).unwrap()).unwrap();
        assert_eq!(kept, json!({ session.clone(): {"questions": []} }), "acknowledged, so no longer kept");
        assert_eq!(chat_until(&s.server, &s.token, &s.doc, 1, planner_replies).await, ["Read 1 blocks."], "posted once");
        let ended: Vec<_> = s.system_lines().await.into_iter().filter(|line| line.contains("without")).collect();
        assert_eq!(ended, Vec::<String>::new(), "the turn was handed back, not ended");
        assert_eq!((turns.load(Ordering::SeqCst), again.load(Ordering::SeqCst)), (1, 0), "the turn ran once");
        detach.cancel();
        assert_eq!(running.await.unwrap(), margin_sdk::Ended::Detached);
    }

    async fn connector_gets_one_answer_for_a_call_in_flight_across_a_server_restart(db) {
        let mut server = Server::start(&db).await;
        let token = Server::account(&db, "ada").await;
        let doc = server.create_document(&token, "Plan").await;
        let (status, paired) = server.post(Some(&token), "/machines", json!({"name": "laptop"})).await;
        assert_eq!(status, 201);
        let proxy = Proxy::to(server.addr).await;
        let (started, mut calling) = mpsc::unbounded_channel();
        let connector = Connector::new(format!("http://{}", proxy.addr), paired["credential"].as_str().unwrap());
        let detach = CancellationToken::new();
        let running = tokio::spawn({
            let detach = detach.clone();
            async move { connector.run(ReadsOnce { started }, detach.cancelled_owned()).await }
        });
        // Linked: the view names the machine a `@planner` would start on.
        let view = format!("/documents/{doc}/planner");
        for _ in 0..1000 {
            if server.get(Some(&token), &view).await.1["machine"] == "laptop" {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(server.get(Some(&token), &view).await.1["machine"], "laptop", "the connector linked");
        server.say(&token, &doc, "@planner read it").await;
        tokio::time::timeout(PATIENCE, calling.recv()).await.expect("the turn started").unwrap();
        // The call is on its way: the server dies under it.
        server.kill().await;
        server.restart().await;
        proxy.retarget(server.addr);
        proxy.cut();
        let replies = chat_until(&server, &token, &doc, 1, planner_replies).await;
        assert!(
            ["read: ok", "read: interrupted", "read: unknown_call"].contains(&replies[0].as_str()),
            "the call in flight got one answer after resume, and the turn replied: {replies:?}"
        );
        detach.cancel();
        assert_eq!(running.await.unwrap(), margin_sdk::Ended::Detached);
    }
}

/// A turn that reads once and replies with what the read came to.
struct ReadsOnce {
    started: mpsc::UnboundedSender<()>,
}

impl Handler for ReadsOnce {
    async fn turn(&self, turn: Turn) -> Result<String, ToolError> {
        let _ = self.started.send(());
        Ok(match turn.read_document().await {
            Ok(_) => "read: ok".into(),
            Err(ToolError::Refused(refusal)) => format!("read: {}", refusal.code),
            Err(other) => format!("read failed: {other}"),
        })
    }
}

/// Reads the document; then the link dies under the turn — partitioned,
/// so neither end is told — before it reports its run completed (with
/// `reports`) and replies: both are written into the dead link.
struct DiesBeforeReplying {
    proxy: Arc<Proxy>,
    turns: Arc<AtomicUsize>,
    reports: bool,
}

impl Handler for DiesBeforeReplying {
    async fn turn(&self, turn: Turn) -> Result<String, ToolError> {
        self.turns.fetch_add(1, Ordering::SeqCst);
        if self.reports {
            turn.run("review", "Review", RunStatus::Running).await?;
        }
        let read = turn.read_document().await?;
        self.proxy.partition();
        if self.reports {
            turn.run("review", "Review", RunStatus::Completed).await?;
        }
        Ok(format!("Read {} blocks.", read.outline.len()))
    }
}

/// Counts its turns and replies at once.
struct Counts(Arc<AtomicUsize>);

impl Handler for Counts {
    async fn turn(&self, _: Turn) -> Result<String, ToolError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok("Counted.".into())
    }
}
