//! No client stranded on a node that lost its lease (SPEC C5): what one node
//! carries to a document's owner — a sync socket, an event stream, a
//! machine's link — is closed once that owner is paused past its lease, so
//! the client reconnects to whoever holds the document now; and no
//! transaction of a paused node outlives its lease, so the next owner never
//! waits on it. Real `margin serve --cluster` processes; the owner is
//! `SIGSTOP`ped.

use std::time::{Duration, Instant};

use margin_protocol::link::close as link_close;
use margin_protocol::link::{ClientMessage, ServerMessage};
use margin_protocol::sync::close;

use crate::cluster::{
    committed, holder, linked, nodes, on_postgres, paired, planner_scene, signal, PlannerScene,
    CLUSTER_ARGS,
};
use crate::harness::{LinkClient, Proxy, Server, Sse, SyncClient, TestDb};

/// The longest a client may be left on a paused owner: the lease TTL and
/// one renewal interval the tests' nodes run with (see `cluster.rs`), and
/// room for a loaded machine to schedule the close.
const STRANDED_AT_MOST: Duration = Duration::from_millis(1_500 + 500 + 1_500);

/// Pauses `node` for the rest of the test; it wakes when the guard drops,
/// so a failed assertion leaves no stopped process behind.
struct Paused<'a>(&'a Server);

impl Drop for Paused<'_> {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill")
            .args(["-CONT", &self.0.pid().to_string()])
            .status();
    }
}

async fn pause(node: &Server) -> Paused<'_> {
    signal(node, "-STOP").await;
    Paused(node)
}

/// An editor on node 0, which makes it the document's owner.
async fn owned_by_node_0(db: &TestDb, nodes: &[Server], token: &str, doc: &str) -> SyncClient {
    let direct = SyncClient::connect(&nodes[0].sync_url(doc, token)).await;
    let store = db.open().await;
    assert_eq!(holder(&store, nodes, doc).await, Some(0));
    direct
}

on_postgres! {
    async fn an_editor_forwarded_to_a_paused_owner_is_closed_once_its_lease_lapses(db) {
        let (nodes, token) = nodes(&db, 3).await;
        let doc = nodes[0].create_document(&token, "Plan").await;
        let _direct = owned_by_node_0(&db, &nodes, &token, &doc).await;
        let mut forwarded = SyncClient::connect(&nodes[1].sync_url(&doc, &token)).await;
        forwarded.append_paragraph("before").await;
        let mut writer = SyncClient::connect(&nodes[2].sync_url(&doc, &token)).await;
        assert!(writer.until(|c| c.texts() == ["before"]).await);

        let _paused = pause(&nodes[0]).await;
        let since = Instant::now();
        closed_going_away_in_time(&mut forwarded, since).await;

        // Through the same node again, it reaches the new owner and sees
        // what is written through another.
        let mut back = SyncClient::connect(&nodes[1].sync_url(&doc, &token)).await;
        assert!(back.until(|c| c.texts() == ["before"]).await, "{:?}", back.texts());
        let mut writer = SyncClient::connect(&nodes[2].sync_url(&doc, &token)).await;
        writer.append_paragraph("after").await;
        assert!(back.until(|c| c.texts() == ["before", "after"]).await, "{:?}", back.texts());
    }

    async fn a_documents_feed_followed_through_a_node_ends_once_its_paused_owner_lapses(db) {
        let (nodes, token) = nodes(&db, 3).await;
        let doc = nodes[0].create_document(&token, "Plan").await;
        let _direct = owned_by_node_0(&db, &nodes, &token, &doc).await;
        let path = format!("/documents/{doc}/events");
        let mut feed = Sse::open(nodes[2].addr, &token, &path, None)
            .await
            .unwrap_or_else(|(status, body)| panic!("{status}: {body}"));

        let _paused = pause(&nodes[0]).await;
        let since = Instant::now();
        while feed.within(STRANDED_AT_MOST * 2).await.is_some() {}
        let stranded = since.elapsed();
        assert!(stranded < STRANDED_AT_MOST, "the feed stayed open {stranded:?}");

        // Followed again through the same node, it is live on the new owner.
        let mut feed = Sse::open(nodes[2].addr, &token, &path, None)
            .await
            .unwrap_or_else(|(status, body)| panic!("{status}: {body}"));
        nodes[1].say(&token, &doc, "after the pause").await;
        while let Some(event) = feed.next().await {
            if event.event == "chat" && event.data.contains("after the pause") {
                return;
            }
        }
        panic!("the feed followed again is not live");
    }

    async fn a_machine_link_relayed_to_a_paused_node_is_closed_once_that_node_lapses(db) {
        let PlannerScene { nodes, token, doc, mut link, .. } = planner_scene(&db).await;
        // The machine links to node 1; its session runs on node 0.
        nodes[1].say(&token, &doc, "@planner plan").await;
        crate::turns::invoked(&mut link).await;

        let _paused = pause(&nodes[0]).await;
        let since = Instant::now();
        closed_unresponsive_in_time(&mut link, since).await;
    }

    async fn a_node_paused_in_the_middle_of_a_commit_does_not_hold_up_the_takeover(db) {
        let (nodes, token) = nodes(&db, 3).await;
        let doc = nodes[0].create_document(&token, "Plan").await;
        let mut direct = owned_by_node_0(&db, &nodes, &token, &doc).await;
        direct.append_paragraph("before").await;
        committed(&nodes[1], &token, &doc, 1).await;

        // The next commit stops half done, holding the document's row, and
        // its node is paused right there.
        let gate = db.hold_appends().await;
        direct.append_paragraph("in flight").await;
        until_sessions(&db, "active", true).await;
        let paused = pause(&nodes[0]).await;
        gate.open().await;
        until_sessions(&db, "idle in transaction", false).await;

        // Another node takes the document all the same, once the lease
        // lapsed: PostgreSQL ended the paused node's transaction.
        let since = Instant::now();
        let newcomer = SyncClient::connect(&nodes[2].sync_url(&doc, &token)).await;
        let waited = since.elapsed();
        assert!(waited < STRANDED_AT_MOST, "the takeover waited {waited:?}");
        // What was never acknowledged is not there.
        assert_eq!(newcomer.texts(), ["before"]);
        assert_eq!(db.sessions_in("idle in transaction", APPEND, false).await, 0);
        // Woken, the old owner finds its commit gone and closes its client.
        drop(paused);
        assert_eq!(direct.wait_closed().await.0, close::GOING_AWAY);
        let mut newcomer = newcomer;
        assert!(newcomer.stays_open(Duration::from_millis(500)).await);
        assert_eq!(newcomer.texts(), ["before"]);
    }

    async fn a_takeover_that_meets_a_held_row_tries_again_and_says_so_in_time(db) {
        let (nodes, token) = nodes(&db, 1).await;
        let doc = nodes[0].create_document(&token, "Plan").await;
        let stuck = db.lock_document_row(&doc).await;
        // The take waits on the row no longer than its lock deadline, and
        // tries again until its patience (twice the TTL and a second) runs
        // out; then the editor is told to try again, not left hanging.
        let mut editor = SyncClient::connect_raw(&nodes[0].sync_url(&doc, &token)).await;
        let since = Instant::now();
        let (code, reason) = editor.wait_closed().await;
        let waited = since.elapsed();
        assert_eq!(code, close::TRY_AGAIN, "{reason}");
        assert!(waited < Duration::from_millis(2 * 1_500 + 1_000 + 1_500), "{waited:?}");
        stuck.release().await;
        let mut editor = SyncClient::connect(&nodes[0].sync_url(&doc, &token)).await;
        editor.append_paragraph("served").await;
        committed(&nodes[0], &token, &doc, 1).await;
    }

    async fn an_editor_forwarded_to_an_owner_cut_off_from_its_node_is_closed_in_time(db) {
        let (owner, internal) = reached_through_a_proxy(&db).await;
        let (others, token) = nodes(&db, 1).await;
        let doc = owner.create_document(&token, "Plan").await;
        let _direct = SyncClient::connect(&owner.sync_url(&doc, &token)).await;
        let mut forwarded = SyncClient::connect(&others[0].sync_url(&doc, &token)).await;
        forwarded.append_paragraph("before").await;
        committed(&owner, &token, &doc, 1).await;
        // Quiet is not silence: the owner answers the pings meanwhile.
        assert!(forwarded.stays_open(STRANDED_AT_MOST).await, "{:?}", forwarded.closed);

        internal.partition();
        let since = Instant::now();
        closed_going_away_in_time(&mut forwarded, since).await;
    }

    async fn a_machine_link_relayed_to_a_node_cut_off_from_it_is_closed_in_time(db) {
        // Linked to the other node; its session runs on the owner.
        // Every part is kept: a node or an editor dropped would stop.
        let MachineElsewhere { owner, internal, other: _other, token, doc, direct: _direct, credential: _credential, mut link } =
            machine_elsewhere(&db, &[]).await;
        owner.say(&token, &doc, "@planner plan").await;
        crate::turns::invoked(&mut link).await;
        assert!(link.stays_open_answering(STRANDED_AT_MOST).await, "{:?}", link.closed);

        internal.partition();
        let since = Instant::now();
        closed_unresponsive_in_time(&mut link, since).await;
    }

    async fn a_node_cut_off_from_the_database_closes_its_clients_once_its_lease_runs_out(db) {
        let (cut_off, database) = reaching_the_database_through_a_proxy(&db).await;
        let (others, token) = nodes(&db, 1).await;
        let doc = cut_off.create_document(&token, "Plan").await;
        let mut direct = SyncClient::connect(&cut_off.sync_url(&doc, &token)).await;
        direct.append_paragraph("before").await;
        committed(&others[0], &token, &doc, 1).await;

        database.black_hole();
        let since = Instant::now();
        // A commit goes out into the dark, and is never answered.
        direct.append_paragraph("in flight").await;
        closed_going_away_in_time(&mut direct, since).await;
        // The others serve the document meanwhile.
        let mut elsewhere = SyncClient::connect(&others[0].sync_url(&doc, &token)).await;
        assert!(elsewhere.until(|c| c.texts() == ["before"]).await, "{:?}", elsewhere.texts());
    }

    async fn a_turn_whose_invoke_died_with_its_node_is_invoked_by_the_node_that_takes_its_document(db) {
        let MachineElsewhere { mut owner, internal, other, token, doc, direct, credential, mut link } =
            machine_elsewhere(&db, &[]).await;
        // The owner's `invoke` goes out on the relay, into the dark, and
        // the owner dies: the machine never hears of the session.
        internal.black_hole();
        owner.say(&token, &doc, "@planner plan").await;
        owner.kill().await;
        drop(direct);
        link.wait_closed().await;
        let mut back = linked(&other, &credential).await;
        back.send_message(&ClientMessage::Resume { sessions: vec![] }).await;
        assert!(
            matches!(back.next_work().await, Some(ServerMessage::Resumed { ref sessions, .. }) if sessions.is_empty())
        );
        // A person reads the document through the node left, which takes
        // it the moment the owner lapses (before the sweep of orphaned
        // sessions would) and with it the session, whose turn it invokes.
        let _editor = SyncClient::connect(&other.sync_url(&doc, &token)).await;
        let (_, turn, messages, _) = crate::turns::invoked(&mut back).await;
        assert_eq!((turn.as_str(), messages), ("t1", vec!["@planner plan".to_owned()]));
    }

    async fn a_machine_resuming_while_a_sessions_node_is_cut_off_goes_on_hearing_heartbeats(db) {
        let MachineElsewhere { owner, internal, other, token, doc, direct: _direct, credential, mut link } =
            machine_elsewhere(&db, &["--heartbeat-ms", "200"]).await;
        owner.say(&token, &doc, "@planner plan").await;
        let (session, turn, _, _) = crate::turns::invoked(&mut link).await;

        // The owner is cut off from the other node; the machine relinks
        // there and resumes, and where its session runs cannot be known
        // until the owner answers or lapses (it does neither).
        internal.black_hole();
        link.wait_closed().await;
        let mut back = linked(&other, &credential).await;
        back.send_message(&ClientMessage::Resume {
            sessions: vec![margin_protocol::link::HeldSession {
                session,
                questions: vec![],
                turn: Some(turn),
                calls: vec![],
            }],
        })
        .await;
        // Meanwhile the link is kept alive: a machine that heard nothing
        // would give it up, and resume again elsewhere while this resume
        // still runs.
        let mut heartbeats = 0;
        while let Ok(Some(message)) = tokio::time::timeout(Duration::from_secs(1), back.next_raw()).await {
            match message {
                ServerMessage::Heartbeat { seq } => {
                    heartbeats += 1;
                    back.send_text(&format!(r#"{{"type":"heartbeat-ack","seq":{seq}}}"#)).await;
                }
                ServerMessage::Credential { .. } => {}
                other => panic!("{other:?} after {heartbeats} heartbeats"),
            }
        }
        assert!(heartbeats >= 5, "{heartbeats} heartbeats while the resume ran; closed {:?}", back.closed);
    }

    async fn a_machine_linked_to_a_node_cut_off_from_the_database_is_closed_once_it_lapses(db) {
        let (cut_off, database) = reaching_the_database_through_a_proxy(&db).await;
        let token = Server::account(&db, "ada").await;
        let (_, credential) = paired(&cut_off, &token).await;
        let mut link = linked(&cut_off, &credential).await;
        // Its sessions leave the node as it lapses, for others to take
        // back: the machine must come back elsewhere and resume.
        database.black_hole();
        let since = Instant::now();
        closed_unresponsive_in_time(&mut link, since).await;
    }

    async fn a_planner_linked_elsewhere_is_bound_on_a_node_that_just_joined(db) {
        let (nodes, token) = nodes(&db, 1).await;
        let (_, credential) = paired(&nodes[0], &token).await;
        let mut link = linked(&nodes[0], &credential).await;
        // A node joins (or comes back under a new id) and owns a document
        // at once, before the machine's link is relayed to it.
        let newcomer = Server::start_limited(&db, None, &CLUSTER_ARGS).await;
        let doc = newcomer.create_document(&token, "Plan").await;
        newcomer.say(&token, &doc, "@planner plan").await;
        let (_, turn, messages, _) = crate::turns::invoked(&mut link).await;
        assert_eq!((turn.as_str(), messages), ("t1", vec!["@planner plan".to_owned()]));
    }
}

/// A cluster node the others reach through a proxy that can cut it off
/// from them while it keeps its database, and its leases.
async fn reached_through_a_proxy(db: &TestDb) -> (Server, Proxy) {
    let internal = Proxy::to("127.0.0.1:9".parse().unwrap()).await;
    let advertise = format!("http://{}", internal.addr);
    let mut args = CLUSTER_ARGS.to_vec();
    args.extend(["--advertise", &advertise]);
    let node = Server::start_limited(db, None, &args).await;
    internal.retarget(node.addr);
    (node, internal)
}

/// An owner the other node reaches through a proxy, holding a document of
/// one paragraph its `direct` editor keeps open, and a machine linked to
/// the other node, which runs with `extra` arguments.
struct MachineElsewhere {
    owner: Server,
    internal: Proxy,
    other: Server,
    token: String,
    doc: String,
    direct: SyncClient,
    credential: String,
    link: LinkClient,
}

async fn machine_elsewhere(db: &TestDb, extra: &[&str]) -> MachineElsewhere {
    let (owner, internal) = reached_through_a_proxy(db).await;
    let mut args = CLUSTER_ARGS.to_vec();
    args.extend(extra);
    let other = Server::start_limited(db, None, &args).await;
    let token = Server::account(db, "ada").await;
    let doc = owner.create_document(&token, "Plan").await;
    let mut direct = SyncClient::connect(&owner.sync_url(&doc, &token)).await;
    direct.append_paragraph("Ship on March 3").await;
    committed(&owner, &token, &doc, 1).await;
    let (_, credential) = paired(&other, &token).await;
    let link = linked(&other, &credential).await;
    MachineElsewhere {
        owner,
        internal,
        other,
        token,
        doc,
        direct,
        credential,
        link,
    }
}

/// A cluster node that reaches PostgreSQL through a proxy that can cut it
/// off from the database, while the others reach it directly.
async fn reaching_the_database_through_a_proxy(db: &TestDb) -> (Server, Proxy) {
    let url = db.url();
    let authority = url
        .split("://")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .unwrap();
    let authority = authority.rsplit('@').next().unwrap();
    let database = Proxy::to(authority.parse().unwrap()).await;
    let mut args = vec!["--data".to_owned(), db.data_dir().display().to_string()];
    args.extend([
        "--database-url".to_owned(),
        url.replacen(authority, &database.addr.to_string(), 1),
    ]);
    args.extend(CLUSTER_ARGS.iter().map(|a| a.to_string()));
    (Server::start_with(args).await, database)
}

/// Waits for `client` to be told to reconnect (1001), no later than
/// [`STRANDED_AT_MOST`] after `since`.
async fn closed_going_away_in_time(client: &mut SyncClient, since: Instant) {
    let (code, reason) = client.wait_closed().await;
    let stranded = since.elapsed();
    assert_eq!(code, close::GOING_AWAY, "{reason}");
    assert!(stranded < STRANDED_AT_MOST, "stranded for {stranded:?}");
}

/// Waits, answering heartbeats (the node the machine linked to is fine),
/// for `link` to be closed as unresponsive (4002), no later than
/// [`STRANDED_AT_MOST`] after `since`.
async fn closed_unresponsive_in_time(link: &mut LinkClient, since: Instant) {
    link.collect_for(STRANDED_AT_MOST * 2).await;
    let stranded = since.elapsed();
    let (code, reason) = link.closed.clone().expect("the link stayed open");
    assert_eq!(code, link_close::UNRESPONSIVE, "{reason}");
    assert!(
        stranded < STRANDED_AT_MOST,
        "the link stayed open {stranded:?}"
    );
}

/// The statement a commit of an editor's update waits in.
const APPEND: &str = "INSERT INTO document_updates";

/// Waits until one of the database's sessions is in `state` in the middle of
/// an append, waiting on a lock or not.
async fn until_sessions(db: &TestDb, state: &str, waiting: bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while db.sessions_in(state, APPEND, waiting).await == 0 {
        assert!(
            Instant::now() < deadline,
            "no append {state} (waiting: {waiting})"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
