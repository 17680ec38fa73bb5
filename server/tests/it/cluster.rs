//! Several servers on one PostgreSQL (SPEC C1–C4): three `margin serve
//! --cluster` processes on loopback ports, real sockets, `kill -9` and
//! `SIGSTOP`. Cluster mode runs on PostgreSQL only: without
//! `TEST_DATABASE_URL` these fail, and the `sqlite-only` nextest profile
//! skips them.

use std::time::{Duration, Instant};

use margin_protocol::link::{ClientMessage, HeldSession, ServerMessage};
use margin_protocol::sessions::SessionState;
use margin_protocol::sync::close;
use margin_protocol::RefusalCode;
use margin_server::storage::{LeaseFence, SessionOwner, SessionWrite, StorageError, Store, Take};
use tokio::process::Command;

use crate::harness::{LinkClient, Server, Sse, SyncClient, TestDb};

/// The lease settings the tests run with: the defaults, spelled out.
pub(crate) const CLUSTER_ARGS: [&str; 5] = [
    "--cluster",
    "--lease-ttl-ms",
    "1500",
    "--lease-renew-ms",
    "500",
];

/// `n` cluster nodes on `db`, and an account's token.
pub(crate) async fn nodes(db: &TestDb, n: usize) -> (Vec<Server>, String) {
    let mut nodes = Vec::new();
    for _ in 0..n {
        nodes.push(Server::start_limited(db, None, &CLUSTER_ARGS).await);
    }
    let token = Server::account(db, "ada").await;
    (nodes, token)
}

/// Which of `nodes` holds document `doc`'s lease, by its index.
pub(crate) async fn holder(store: &Store, nodes: &[Server], doc: &str) -> Option<usize> {
    let lease = store.lease_holder(doc).await.unwrap()?;
    nodes
        .iter()
        .position(|node| lease.node.advertise == format!("http://{}", node.addr))
}

/// Waits until a node other than `not` holds `doc`; returns its index.
pub(crate) async fn until_held(
    store: &Store,
    nodes: &[Server],
    doc: &str,
    not: Option<usize>,
) -> usize {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(at) = holder(store, nodes, doc)
            .await
            .filter(|at| Some(*at) != not)
        {
            return at;
        }
        assert!(Instant::now() < deadline, "no node took {doc} within 10 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Three nodes; a document node 0 owns, holding one committed paragraph
/// ("Ship on March 3") and an editor on node 0; and a planning machine
/// linked to node 1, which owns nothing.
pub(crate) struct PlannerScene {
    pub(crate) nodes: Vec<Server>,
    pub(crate) token: String,
    pub(crate) doc: String,
    pub(crate) editor: SyncClient,
    pub(crate) machine: String,
    pub(crate) credential: String,
    pub(crate) link: LinkClient,
}

pub(crate) async fn planner_scene(db: &TestDb) -> PlannerScene {
    let (nodes, token) = nodes(db, 3).await;
    let doc = nodes[0].create_document(&token, "Plan").await;
    let mut editor = SyncClient::connect(&nodes[0].sync_url(&doc, &token)).await;
    editor.append_paragraph("Ship on March 3").await;
    committed(&nodes[1], &token, &doc, 1).await;
    let (machine, credential) = paired(&nodes[1], &token).await;
    let link = linked(&nodes[1], &credential).await;
    PlannerScene {
        nodes,
        token,
        doc,
        editor,
        machine,
        credential,
        link,
    }
}

/// A person answers `card` "yes" through `node`; the machine on `link`
/// gets the answer.
async fn answered_through(
    node: &Server,
    token: &str,
    doc: &str,
    card: &str,
    link: &mut LinkClient,
) {
    let (status, _) = node
        .post(
            Some(token),
            &format!("/documents/{doc}/decisions/{card}/answer"),
            serde_json::json!({"yes": true}),
        )
        .await;
    assert_eq!(status, 200);
    match link.next_work().await {
        Some(ServerMessage::InputResult { request, .. }) => assert_eq!(request, card),
        other => panic!("expected the answer, got {other:?}"),
    }
}

/// A machine paired through `node` by `token`'s account: its id and
/// credential.
pub(crate) async fn paired(node: &Server, token: &str) -> (String, String) {
    let (status, paired) = node
        .post(
            Some(token),
            "/machines",
            serde_json::json!({"name": "laptop"}),
        )
        .await;
    assert_eq!(status, 201, "{paired}");
    let machine = paired["machine"]["id"].as_str().unwrap().to_owned();
    (machine, paired["credential"].as_str().unwrap().to_owned())
}

/// A planning link with `credential` to `node`, past its `hello`.
pub(crate) async fn linked(node: &Server, credential: &str) -> LinkClient {
    let mut link = LinkClient::connect(node.addr, credential).await.unwrap();
    assert!(matches!(
        link.hello_planning().await,
        ServerMessage::Welcome { .. }
    ));
    link
}

/// Waits until document `doc`, read through `node`, holds `blocks` blocks
/// (an editor's update is committed).
pub(crate) async fn committed(node: &Server, token: &str, doc: &str, blocks: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while node.block_texts(token, doc).await.1.len() < blocks {
        assert!(
            Instant::now() < deadline,
            "{doc} never held {blocks} blocks"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until session `id`'s state, read through `node`, is `wanted`.
async fn until_state(node: &Server, token: &str, id: &str, wanted: impl Fn(SessionState) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let state = crate::crash::snapshot(node, token, id).await.state;
        if wanted(state) {
            return;
        }
        assert!(Instant::now() < deadline, "session {id} stayed {state:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub(crate) async fn signal(node: &Server, signal: &str) {
    let status = Command::new("kill")
        .args([signal, &node.pid().to_string()])
        .status()
        .await
        .unwrap();
    assert!(status.success());
}

macro_rules! on_postgres {
    ($(async fn $name:ident($db:ident) $body:block)*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                let $db = TestDb::postgres_or_fail().await;
                $body
            }
        )*
    };
}
pub(crate) use on_postgres;

/// The value `node`'s `/metrics` gives `gauge`.
async fn gauge(node: &Server, gauge: &str) -> f64 {
    let text = reqwest::get(format!("http://{}/metrics", node.addr))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|line| {
            line.strip_prefix(gauge)?
                .strip_prefix(' ')?
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no gauge {gauge} in:\n{text}"))
}

on_postgres! {
    async fn each_node_counts_the_sockets_it_serves_and_those_it_forwards_apart(db) {
        let (nodes, token) = nodes(&db, 2).await;
        let doc = nodes[0].create_document(&token, "Plan").await;
        let mut direct = SyncClient::connect(&nodes[0].sync_url(&doc, &token)).await;
        direct.append_paragraph("held by node 0").await;
        let store = db.open().await;
        assert_eq!(until_held(&store, &nodes, &doc, None).await, 0);
        let mut forwarded = SyncClient::connect(&nodes[1].sync_url(&doc, &token)).await;
        assert!(forwarded.until(|c| c.texts().len() == 1).await);
        let counts = || async {
            (
                gauge(&nodes[0], "margin_sync_connections").await,
                gauge(&nodes[0], "margin_sync_connections_forwarded").await,
                gauge(&nodes[1], "margin_sync_connections").await,
                gauge(&nodes[1], "margin_sync_connections_forwarded").await,
            )
        };
        // The owner serves both; node 1 carries one to it (SPEC C2, O1).
        assert_eq!(counts().await, (2.0, 0.0, 0.0, 1.0));
        drop(forwarded);
        for _ in 0..200 {
            if counts().await == (1.0, 0.0, 0.0, 0.0) {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        panic!("a closed forwarded socket is still counted: {:?}", counts().await);
    }

    async fn edits_made_through_every_node_converge_on_one_owner(db) {
        let (nodes, token) = nodes(&db, 3).await;
        let doc = nodes[0].create_document(&token, "Plan").await;
        let mut clients = Vec::new();
        for node in &nodes {
            clients.push(SyncClient::connect(&node.sync_url(&doc, &token)).await);
        }
        for round in 0..4 {
            for (at, client) in clients.iter_mut().enumerate() {
                client.append_paragraph(&format!("node {at} line {round}")).await;
            }
        }
        for client in &mut clients {
            assert!(client.until(|c| c.texts().len() == 12).await, "{:?}", client.texts());
        }
        let expected = clients[0].texts();
        for client in &clients {
            assert_eq!(client.texts(), expected);
        }
        // One node owns the document; the other two forwarded to it.
        let store = db.open().await;
        assert!(holder(&store, &nodes, &doc).await.is_some());
        // Every node serves what is committed, whoever owns it.
        for node in &nodes {
            assert_eq!(node.block_texts(&token, &doc).await.1, expected);
        }
    }

    async fn calls_on_a_document_through_any_node_reach_its_owner_and_every_editor(db) {
        let (nodes, token) = nodes(&db, 3).await;
        let doc = nodes[0].create_document(&token, "Plan").await;
        let store = db.open().await;
        let mut on_owner = SyncClient::connect(&nodes[0].sync_url(&doc, &token)).await;
        on_owner.append_paragraph("Which region first?").await;
        let mut elsewhere = SyncClient::connect(&nodes[2].sync_url(&doc, &token)).await;
        assert!(elsewhere.until(|c| c.texts().len() == 1).await);
        assert_eq!(holder(&store, &nodes, &doc).await, Some(0));

        // The Planner's tools, called on node 1, which does not own it.
        let tools = |tool: &str| format!("/documents/{doc}/tools/{tool}");
        let (status, read) = nodes[1].post(Some(&token), &tools("read_document"), serde_json::json!({})).await;
        assert_eq!(status, 200, "{read}");
        let card = serde_json::json!({
            "key": "region", "question": "Which region first?", "response": "single_choice",
            "choices": ["EU", "US"],
            "passages": [{"index": 0, "digest": read["outline"][0]["digest"]}],
        });
        let (status, opened) = nodes[1]
            .post(Some(&token), &tools("open_decisions"), serde_json::json!({"revision": read["revision"], "cards": [card]}))
            .await;
        assert_eq!(status, 200, "{opened}");
        let id = opened["captures"][0]["card_id"].as_str().unwrap().to_owned();
        // Every editor sees it, on whichever node.
        for client in [&mut on_owner, &mut elsewhere] {
            assert!(client.until(|c| c.projected_cards().iter().any(|(card, _)| *card == id)).await);
        }
        // A person answers on node 2; the owner's editor sees it answered.
        let (status, listed) = nodes[2].get(Some(&token), &format!("/documents/{doc}/decisions")).await;
        assert_eq!(status, 200, "{listed}");
        let choice = listed["decisions"][0]["choices"][0]["id"].clone();
        let (status, answered) = nodes[2]
            .post(Some(&token), &format!("/documents/{doc}/decisions/{id}/answer"), serde_json::json!({"choices": [choice]}))
            .await;
        assert_eq!((status, answered["state"].as_str()), (200, Some("answered")), "{answered}");
        assert!(on_owner.until(|c| c.projected_cards().iter().any(|(card, json)| *card == id && json.contains("\"answered\""))).await);
        // A bad token is refused by the node it reached, not relayed.
        let (status, _) = nodes[1].post(Some("mgn_nope"), &tools("read_document"), serde_json::json!({})).await;
        assert_eq!(status, 401);
    }

    async fn a_killed_owner_is_replaced_and_nothing_acknowledged_is_lost(db) {
        let (mut nodes, token) = nodes(&db, 3).await;
        let doc = nodes[0].create_document(&token, "Plan").await;
        let store = db.open().await;
        // The first connection makes node 0 the owner; the writer and the
        // reader reach it through nodes 1 and 2.
        let first = SyncClient::connect(&nodes[0].sync_url(&doc, &token)).await;
        assert_eq!(holder(&store, &nodes, &doc).await, Some(0));
        let mut writer = SyncClient::connect(&nodes[1].sync_url(&doc, &token)).await;
        let mut reader = SyncClient::connect(&nodes[2].sync_url(&doc, &token)).await;
        for i in 0..20 {
            writer.append_paragraph(&format!("line {i}")).await;
        }
        assert!(reader.until(|c| c.texts().len() == 20).await);
        // Mid-edit: more changes are on their way as the owner dies.
        for i in 20..30 {
            writer.append_paragraph(&format!("line {i}")).await;
        }
        nodes[0].kill().await;
        let killed = Instant::now();
        drop(first);
        // Acknowledged: what a client saw broadcast before its connection
        // ended with the owner.
        let (code, _) = reader.wait_closed().await;
        assert_eq!(code, close::GOING_AWAY);
        let acknowledged = reader.texts();
        assert!(acknowledged.len() >= 20, "{acknowledged:?}");
        // A client reconnecting to another node is served once a node took
        // the document over.
        let after = SyncClient::connect(&nodes[1].sync_url(&doc, &token)).await;
        let failover = killed.elapsed();
        eprintln!("failover: a new owner served {} ms after kill -9", failover.as_millis());
        assert!(matches!(holder(&store, &nodes, &doc).await, Some(1 | 2)));
        let texts = after.texts();
        assert!(texts.starts_with(&acknowledged), "lost: {acknowledged:?} is not in {texts:?}");
        // The writer resyncs what it holds and everyone converges.
        let mut writer = {
            let mut again = SyncClient::connect_raw(&nodes[2].sync_url(&doc, &token)).await;
            again.doc = writer.doc;
            again.handshake().await;
            again
        };
        let mut after = after;
        assert!(after.until(|c| c.texts().len() == 30).await, "{:?}", after.texts());
        assert!(writer.until(|c| c.texts().len() == 30).await);
        assert_eq!(after.texts(), writer.texts());
    }

    async fn a_paused_owner_that_wakes_writes_nothing_and_closes_its_clients(db) {
        let (nodes, token) = nodes(&db, 3).await;
        let doc = nodes[0].create_document(&token, "Plan").await;
        let store = db.open().await;
        let mut direct = SyncClient::connect(&nodes[0].sync_url(&doc, &token)).await;
        let mut forwarded = SyncClient::connect(&nodes[1].sync_url(&doc, &token)).await;
        direct.append_paragraph("before").await;
        assert!(forwarded.until(|c| c.texts() == ["before"]).await);
        assert_eq!(holder(&store, &nodes, &doc).await, Some(0));
        let epoch = store.lease_holder(&doc).await.unwrap().unwrap().epoch;

        signal(&nodes[0], "-STOP").await;
        // Past its lease, another node takes the document for a newcomer.
        let mut newcomer = SyncClient::connect(&nodes[2].sync_url(&doc, &token)).await;
        assert_eq!(holder(&store, &nodes, &doc).await, Some(2));
        newcomer.append_paragraph("after").await;
        // What the paused owner's client sends waits in its socket.
        direct.append_paragraph("stale").await;
        signal(&nodes[0], "-CONT").await;

        // It wakes, finds the document gone from it, and closes its
        // clients — the forwarded one too — so they reconnect.
        assert_eq!(direct.wait_closed().await.0, close::GOING_AWAY);
        assert_eq!(forwarded.wait_closed().await.0, close::GOING_AWAY);
        let check = SyncClient::connect(&nodes[1].sync_url(&doc, &token)).await;
        assert_eq!(check.texts(), ["before", "after"]);
        assert!(store.lease_holder(&doc).await.unwrap().unwrap().epoch.0 > epoch.0);
        // Once awake it serves again, through the new owner.
        let mut again = SyncClient::connect(&nodes[0].sync_url(&doc, &token)).await;
        assert!(again.until(|c| c.texts() == ["before", "after"]).await, "{:?}", again.texts());
        assert_eq!(nodes[0].get(None, "/readyz").await.0, 200);
    }

    async fn a_node_stopped_gracefully_hands_its_documents_over_with_one_reconnect(db) {
        let (mut nodes, token) = nodes(&db, 3).await;
        let doc = nodes[0].create_document(&token, "Plan").await;
        let store = db.open().await;
        let direct = SyncClient::connect(&nodes[0].sync_url(&doc, &token)).await;
        let mut writer = SyncClient::connect(&nodes[1].sync_url(&doc, &token)).await;
        let mut reader = SyncClient::connect(&nodes[2].sync_url(&doc, &token)).await;
        for i in 0..10 {
            writer.append_paragraph(&format!("line {i}")).await;
        }
        assert!(reader.until(|c| c.texts().len() == 10).await);
        assert_eq!(holder(&store, &nodes, &doc).await, Some(0));
        drop(direct);
        nodes[0].terminate().await;
        assert_eq!(writer.wait_closed().await.0, close::GOING_AWAY);
        assert_eq!(reader.wait_closed().await.0, close::GOING_AWAY);
        // The node left: no lease names it, and nothing of it lingers.
        assert_eq!(store.live_nodes().await.unwrap().len(), 2);
        // One reconnect each, served by the next owner and kept.
        let mut writer = {
            let mut again = SyncClient::connect_raw(&nodes[1].sync_url(&doc, &token)).await;
            again.doc = writer.doc;
            again.handshake().await;
            again
        };
        let mut reader = SyncClient::connect(&nodes[2].sync_url(&doc, &token)).await;
        assert_eq!(reader.texts().len(), 10);
        writer.append_paragraph("after the hand-off").await;
        assert!(reader.until(|c| c.texts().len() == 11).await);
        assert!(matches!(holder(&store, &nodes, &doc).await, Some(1 | 2)));
        assert!(writer.stays_open(Duration::from_millis(300)).await);
        assert!(reader.stays_open(Duration::from_millis(300)).await);
    }

    async fn a_session_write_is_refused_once_another_node_took_its_document(db) {
        let store = db.open().await;
        let ada = store.create_account("ada").await.unwrap();
        let doc = store.create_document(&ada, "Plan").await.unwrap();
        let machine = store.pair_machine(&ada, "laptop", "hash", i64::MAX).await.unwrap();
        // Node A holds the document, then stops renewing (a 500 ms lease).
        let a = store.register_node("http://127.0.0.1:1", 500).await.unwrap();
        assert!(matches!(store.take_document(&doc.id, &a.id).await.unwrap(), Take::Taken(_)));
        let fence = |node: &str| Some(LeaseFence { document: doc.id.clone(), node: node.to_owned() });
        let first = SessionWrite {
            session: "s1".into(),
            owner: Some(SessionOwner { document: doc.id.clone(), account: ada.id.clone(), machine: machine.id.clone() }),
            records: vec![(1, "{}".into())],
            snapshot: "{}".into(),
            state: "active",
            lease: fence(&a.id),
            ..SessionWrite::default()
        };
        store.commit_sessions(&[first]).await.unwrap();
        tokio::time::sleep(Duration::from_millis(600)).await;
        let b = store.register_node("http://127.0.0.1:2", 60_000).await.unwrap();
        assert!(matches!(store.take_document(&doc.id, &b.id).await.unwrap(), Take::Taken(_)));
        let next = |node: &str| SessionWrite {
            session: "s1".into(),
            base: 1,
            records: vec![(2, "{}".into())],
            snapshot: "{}".into(),
            state: "active",
            lease: fence(node),
            ..SessionWrite::default()
        };
        let refused = store.commit_sessions(&[next(&a.id)]).await;
        assert!(matches!(&refused, Err(StorageError::LeaseLost { document }) if *document == doc.id), "{refused:?}");
        assert_eq!(store.session("s1").await.unwrap().unwrap().journal_seq, 1);
        store.commit_sessions(&[next(&b.id)]).await.unwrap();
        assert_eq!(store.session("s1").await.unwrap().unwrap().journal_seq, 2);
    }

    async fn a_planner_session_left_open_is_taken_back_by_a_node_and_moves_when_it_dies(db) {
        // A session a server alone left open when it was killed.
        let mut alone = Server::start(&db).await;
        let token = Server::account(&db, "ada").await;
        let doc = alone.create_document(&token, "Plan").await;
        let mut link = crate::crash::linked_planner(&alone, &token).await;
        alone.say(&token, &doc, "@planner look").await;
        let (session, _, _, _) = crate::turns::invoked(&mut link).await;
        alone.kill().await;
        let store = db.open().await;
        assert_eq!(store.lease_holder(&doc).await.unwrap(), None);

        // A node of a cluster takes it back, holding its document with
        // nobody viewing it.
        let mut nodes = vec![
            Server::start_limited(&db, None, &CLUSTER_ARGS).await,
            Server::start_limited(&db, None, &CLUSTER_ARGS).await,
        ];
        let first = until_held(&store, &nodes, &doc, None).await;
        let snapshot = crate::crash::snapshot(&nodes[1 - first], &token, &session).await;
        assert_eq!(snapshot.state, SessionState::Disconnected);
        // Its node dies; the other takes the session over.
        nodes[first].kill().await;
        let second = until_held(&store, &nodes, &doc, Some(first)).await;
        assert_eq!(second, 1 - first);
        let snapshot = crate::crash::snapshot(&nodes[second], &token, &session).await;
        assert_eq!(snapshot.state, SessionState::Disconnected);
        assert_eq!(store.open_sessions().await.unwrap().len(), 1);
    }

    async fn a_server_alone_and_a_cluster_refuse_each_others_database(db) {
        let (mut nodes, _) = nodes(&db, 1).await;
        let alone = refused(&db, &[]).await;
        assert!(alone.contains("another margin server is using"), "{alone}");
        assert!(alone.contains("a cluster of 1 node(s)"), "{alone}");
        assert!(alone.contains(&format!("http://{}", nodes[0].addr)), "{alone}");
        assert!(alone.contains("--cluster"), "{alone}");
        nodes[0].terminate().await;

        let mut server = Server::start(&db).await;
        let node = refused(&db, &CLUSTER_ARGS).await;
        assert!(node.contains(&format!("pid {}", server.pid())), "{node}");
        assert!(node.contains("restart it with --cluster"), "{node}");
        server.kill().await;
    }

    async fn a_planner_linked_to_a_node_that_owns_nothing_works_the_document_and_resumes_elsewhere_when_the_owner_dies(db) {
        // The machine links to node 1, which owns nothing.
        let PlannerScene { mut nodes, token, doc, mut editor, credential, mut link, .. } = planner_scene(&db).await;
        let store = db.open().await;
        let mut viewer = SyncClient::connect(&nodes[2].sync_url(&doc, &token)).await;
        assert_eq!(viewer.texts().len(), 1);
        assert_eq!(holder(&store, &nodes, &doc).await, Some(0));

        // `@planner` through node 2: the session runs on node 0, the owner,
        // and its question's card reaches every editor.
        nodes[2].say(&token, &doc, "@planner ask about the date").await;
        let (session, turn, _, _) = crate::turns::invoked(&mut link).await;
        let card = crate::turns::ask_first_paragraph(&mut link, &session, &turn).await;
        for client in [&mut editor, &mut viewer] {
            assert!(client.until(|c| c.projected_cards().iter().any(|(id, _)| *id == card)).await);
        }
        assert_eq!(holder(&store, &nodes, &doc).await, Some(0));
        let plan = serde_json::json!({"expected_revision": 0, "steps": [{"id": "a", "description": "Ask about the date", "status": "in_progress"}]});
        assert!(matches!(
            crate::turns::call(&mut link, &session, &turn, "update_plan", plan).await,
            ServerMessage::ToolResult { error: None, .. }
        ));

        // A call in flight as the owner dies.
        let in_flight = crate::turns::fresh_call_id();
        link.send_message(&ClientMessage::ToolCall {
            session: session.clone(), turn: turn.clone(), call_id: in_flight.clone(),
            name: "read_document".into(), arguments: serde_json::json!({}),
        }).await;
        nodes[0].kill().await;
        drop(editor);
        // The machine's link is closed so it resumes where its session goes.
        let (code, _) = link.wait_closed().await;
        assert_eq!(code, margin_protocol::link::close::UNRESPONSIVE);

        let mut back = linked(&nodes[2], &credential).await;
        back.send_message(&ClientMessage::Resume { sessions: vec![HeldSession {
            session: session.clone(), questions: vec![card.clone()], turn: Some(turn.clone()), calls: vec![in_flight.clone()],
        }] }).await;
        match back.next_work().await {
            Some(ServerMessage::Resumed { sessions, ended }) => {
                assert_eq!((sessions.len(), ended.len()), (1, 0), "{sessions:?} {ended:?}");
                assert_eq!(sessions[0].session, session);
                assert!(sessions[0].withdrawn.is_empty(), "the question still waits: {sessions:?}");
            }
            other => panic!("expected resumed, got {other:?}"),
        }
        // The call in flight gets one answer: its stored result,
        // `interrupted`, or — when it never reached the owner — that it
        // never ran (W1).
        match back.next_work().await {
            Some(ServerMessage::ToolResult { call_id, output, error, .. }) => {
                assert_eq!(call_id, in_flight);
                assert!(output.is_some() || error.is_some_and(|e| e.message.contains("interrupted")));
            }
            Some(ServerMessage::Refusal { code: RefusalCode::UnknownCall, call_id, .. }) => {
                assert_eq!(call_id, Some(in_flight.clone()));
            }
            other => panic!("expected the call's result, got {other:?}"),
        }
        assert!(matches!(holder(&store, &nodes, &doc).await, Some(1 | 2)));
        let snapshot = crate::crash::snapshot(&nodes[1], &token, &session).await;
        assert_eq!(snapshot.host_requests, std::slice::from_ref(&card));
        assert_eq!(snapshot.plan.flatten().map(|plan| plan.revision), Some(1));
        // A person answers through node 1; the answer reaches the machine.
        answered_through(&nodes[1], &token, &doc, &card, &mut back).await;
    }

    async fn a_planner_whose_owner_stops_gracefully_resumes_on_another_node_and_chat_says_nothing_false(db) {
        let PlannerScene { mut nodes, token, doc, editor, credential, mut link, .. } = planner_scene(&db).await;
        nodes[1].say(&token, &doc, "@planner ask about the date").await;
        let (session, turn, _, _) = crate::turns::invoked(&mut link).await;
        let card = crate::turns::ask_first_paragraph(&mut link, &session, &turn).await;
        let before = nodes[1].get(Some(&token), &format!("/documents/{doc}/chat")).await.1["messages"].as_array().unwrap().len();

        drop(editor);
        nodes[0].terminate().await;
        // One reconnect, to any node, and the session carries on there.
        assert_eq!(link.wait_closed().await.0, margin_protocol::link::close::UNRESPONSIVE);
        let mut back = linked(&nodes[2], &credential).await;
        back.send_message(&ClientMessage::Resume { sessions: vec![HeldSession {
            session: session.clone(), questions: vec![card.clone()], turn: Some(turn), calls: vec![],
        }] }).await;
        match back.next_work().await {
            Some(ServerMessage::Resumed { sessions, ended }) => {
                assert_eq!((sessions.len(), ended.len()), (1, 0), "{sessions:?} {ended:?}");
                assert!(sessions[0].withdrawn.is_empty(), "the question still waits: {sessions:?}");
            }
            other => panic!("expected resumed, got {other:?}"),
        }
        // Nothing was stopped or ended, and Chat says no such thing (L9).
        let chat = nodes[2].get(Some(&token), &format!("/documents/{doc}/chat")).await.1;
        let after: Vec<&str> = chat["messages"].as_array().unwrap()[before..]
            .iter()
            .map(|m| m["text"].as_str().unwrap())
            .collect();
        assert!(after.iter().all(|line| !line.contains("stopped") && !line.contains("ended")), "{after:?}");
        let snapshot = crate::crash::snapshot(&nodes[2], &token, &session).await;
        assert_eq!(snapshot.host_requests, std::slice::from_ref(&card));
    }

    async fn a_planner_that_relinks_to_another_node_resumes_its_session_where_it_runs_and_carries_on(db) {
        let PlannerScene { nodes, token, doc, credential, mut link, .. } = planner_scene(&db).await;
        nodes[1].say(&token, &doc, "@planner ask about the date").await;
        let (session, turn, _, _) = crate::turns::invoked(&mut link).await;
        let card = crate::turns::ask_first_paragraph(&mut link, &session, &turn).await;
        // The machine's link drops; it relinks to node 2. The session stays
        // on node 0, which owns the document.
        drop(link);
        let mut back = linked(&nodes[2], &credential).await;
        back.send_message(&ClientMessage::Resume { sessions: vec![HeldSession {
            session: session.clone(), questions: vec![card.clone()], turn: Some(turn.clone()), calls: vec![],
        }] }).await;
        match back.next_work().await {
            Some(ServerMessage::Resumed { sessions, ended }) => {
                assert_eq!((sessions.len(), ended.len()), (1, 0), "{sessions:?} {ended:?}");
            }
            other => panic!("expected resumed, got {other:?}"),
        }
        // Its next call reaches node 0 through node 2, and so does a
        // person's answer to its question, through node 1.
        let ServerMessage::ToolResult { error: None, output: Some(_), .. } =
            crate::turns::call(&mut back, &session, &turn, "read_document", serde_json::json!({})).await
        else {
            panic!("the call after resume did not reach the session")
        };
        answered_through(&nodes[1], &token, &doc, &card, &mut back).await;
        let store = db.open().await;
        assert_eq!(holder(&store, &nodes, &doc).await, Some(0));
    }

    async fn a_sessions_event_stream_read_through_any_node_is_live(db) {
        let PlannerScene { nodes, token, doc, mut link, .. } = planner_scene(&db).await;
        nodes[1].say(&token, &doc, "@planner plan").await;
        let (session, turn, _, _) = crate::turns::invoked(&mut link).await;
        // The session runs on node 0; its feed is followed through node 2.
        let cursor = crate::crash::snapshot(&nodes[2], &token, &session).await.cursor;
        let mut events = Sse::open(nodes[2].addr, &token, &format!("/sessions/{session}/events"), Some(&cursor.to_string()))
            .await
            .unwrap_or_else(|(status, body)| panic!("{status}: {body}"));
        let plan = serde_json::json!({"expected_revision": 0, "steps": [{"id": "a", "description": "Draft", "status": "in_progress"}]});
        assert!(matches!(
            crate::turns::call(&mut link, &session, &turn, "update_plan", plan).await,
            ServerMessage::ToolResult { error: None, .. }
        ));
        let mut seen = Vec::new();
        while let Some(event) = events.next().await {
            seen.push(event.event.clone());
            if event.event == "plan_updated" {
                return;
            }
        }
        panic!("no live plan_updated through node 2; saw {seen:?}");
    }

    async fn a_documents_feed_read_through_any_node_is_live(db) {
        let PlannerScene { nodes, token, doc, mut link, .. } = planner_scene(&db).await;
        // Node 0 owns the document; its feed is followed through node 2.
        let mut feed = Sse::open(nodes[2].addr, &token, &format!("/documents/{doc}/events"), None)
            .await
            .unwrap_or_else(|(status, body)| panic!("{status}: {body}"));
        nodes[1].say(&token, &doc, "@planner plan").await;
        let (session, turn, _, _) = crate::turns::invoked(&mut link).await;
        link.send_message(&margin_protocol::link::ClientMessage::Reply {
            session,
            turn,
            text: "Planned.".into(),
        })
        .await;
        let mut seen = Vec::new();
        while let Some(event) = feed.next().await {
            if event.event == "chat" && event.data.contains("\"Planned.\"") {
                assert!(seen.iter().any(|e: &String| e.contains("@planner plan")), "the member's line first: {seen:?}");
                return;
            }
            seen.push(format!("{}: {}", event.event, event.data));
        }
        panic!("no live reply through node 2; saw {seen:?}");
    }

    async fn revoking_a_machine_through_any_node_ends_its_sessions_on_every_node(db) {
        let PlannerScene { nodes, token, doc, machine, mut link, .. } = planner_scene(&db).await;
        nodes[2].say(&token, &doc, "@planner look").await;
        let (session, _, _, _) = crate::turns::invoked(&mut link).await;
        // The machine drops away; its session on node 0 waits for it.
        drop(link);
        let away = |state: SessionState| state == SessionState::Disconnected;
        until_state(&nodes[0], &token, &session, away).await;
        // Revoked through node 2, which neither holds its link nor runs
        // its session: the session ends where it runs.
        let (status, _) = nodes[2].delete(Some(&token), &format!("/machines/{machine}")).await;
        assert_eq!(status, 204);
        until_state(&nodes[0], &token, &session, |state| state == SessionState::Ended).await;
    }

    async fn an_access_change_made_through_any_node_closes_the_members_forwarded_sockets(db) {
        let (nodes, ada) = nodes(&db, 2).await;
        let bo = Server::account(&db, "bo").await;
        let doc = nodes[0].create_document(&ada, "Plan").await;
        let members = format!("/documents/{doc}/members");
        let share = serde_json::json!({"account": "bo", "role": "editor"});
        assert_eq!(nodes[0].post(Some(&ada), &members, share).await.0, 200);
        let mut on_owner = SyncClient::connect(&nodes[0].sync_url(&doc, &ada)).await;
        let store = db.open().await;
        assert_eq!(holder(&store, &nodes, &doc).await, Some(0));
        // bo's socket lands on node 1 and is forwarded to the owner; the
        // owner's calls too, through node 1.
        let mut forwarded = SyncClient::connect(&nodes[1].sync_url(&doc, &bo)).await;
        let demote = serde_json::json!({"account": "bo", "role": "viewer"});
        assert_eq!(nodes[1].post(Some(&ada), &members, demote).await.0, 200);
        let (code, reason) = forwarded.wait_closed().await;
        assert_eq!(code, close::ACCESS_CHANGED, "{reason}");
        let mut forwarded = SyncClient::connect(&nodes[1].sync_url(&doc, &bo)).await;
        assert_eq!(nodes[1].delete(Some(&ada), &format!("{members}/bo")).await.0, 204);
        let (code, reason) = forwarded.wait_closed().await;
        assert_eq!(code, close::REMOVED, "{reason}");
        assert!(reason.contains("no longer a member"), "{reason}");
        assert!(on_owner.stays_open(Duration::from_millis(300)).await, "{:?}", on_owner.closed);
    }

    async fn readyz_names_the_node_and_healthz_still_answers(db) {
        let (nodes, _) = nodes(&db, 2).await;
        for node in &nodes {
            let (status, body) = node.get(None, "/readyz").await;
            assert_eq!(status, 200, "{body}");
            assert_eq!(body["advertise"], format!("http://{}", node.addr));
            assert_eq!(node.get(None, "/healthz").await.0, 200);
        }
        let store = db.open().await;
        assert_eq!(store.live_nodes().await.unwrap().len(), 2);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_mode_on_sqlite_is_refused_with_the_reason() {
    let db = TestDb::sqlite();
    let stderr = refused(&db, &CLUSTER_ARGS).await;
    assert!(stderr.contains("cluster mode needs PostgreSQL"), "{stderr}");
}

/// Starts `margin serve` on `db` with `extra` arguments, expecting it to
/// be refused; returns what it printed on stderr.
async fn refused(db: &TestDb, extra: &[&str]) -> String {
    let output = tokio::time::timeout(
        Duration::from_secs(30),
        Command::new(env!("CARGO_BIN_EXE_margin"))
            .arg("serve")
            .args(db.cli_args())
            .args(extra)
            .args(["--listen", "127.0.0.1:0"])
            .env("RUST_LOG", "off")
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the server did not stop within 30 s: it was not refused")
    .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(!output.status.success(), "the server started: {stderr}");
    assert!(!String::from_utf8_lossy(&output.stdout).contains("listening"));
    stderr
}
