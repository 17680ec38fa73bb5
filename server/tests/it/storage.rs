//! The storage suite: the same cases on SQLite and PostgreSQL (SPEC S3, W3).

use margin_protocol::Role;
use margin_server::storage::{
    Alongside, ClientBinding, SessionOwner, SessionWrite, StorageError, StoredCard, StoredEvent,
    StoredState,
};

use crate::on_both_backends;

on_both_backends! {
    async fn a_restart_reads_the_open_sessions_through_their_index_not_every_session(db) {
        // SPEC O5: what a restart reads grows with what is live. Every
        // session ever held stays in the table; the query must reach the
        // open ones through the state index, not scan them all.
        let _migrated = db.open().await;
        let pool = sqlx::AnyPool::connect(&db.url()).await.unwrap();
        let query = margin_server::storage::open_sessions_query();
        let plan: Vec<String> = if db.is_postgres() {
            let mut conn = pool.acquire().await.unwrap();
            // On a table this small a scan is cheapest whatever the query;
            // with scans priced out, one is chosen only where no index
            // serves the condition.
            sqlx::query("SET enable_seqscan = off").execute(&mut *conn).await.unwrap();
            let rows = sqlx::query(&format!("EXPLAIN {query}")).fetch_all(&mut *conn).await.unwrap();
            rows.iter().map(|row| sqlx::Row::try_get::<String, _>(row, 0).unwrap()).collect()
        } else {
            let rows = sqlx::query(&format!("EXPLAIN QUERY PLAN {query}")).fetch_all(&pool).await.unwrap();
            rows.iter().map(|row| sqlx::Row::try_get::<String, _>(row, "detail").unwrap()).collect()
        };
        let plan = plan.join("\n");
        assert!(plan.contains("planner_sessions_state"), "the restart's query scans every session:\n{plan}");
        assert!(!plan.contains("Seq Scan on planner_sessions"), "{plan}");
    }

    async fn account_names_are_unique(db) {
        let store = db.open().await;
        let ada = store.create_account("ada").await.unwrap();
        assert_eq!(store.account_by_name("ada").await.unwrap(), ada);
        assert!(matches!(store.create_account("ada").await, Err(StorageError::Conflict(_))));
        assert!(matches!(store.account_by_name("bo").await, Err(StorageError::NotFound("account"))));
    }

    async fn tokens_resolve_to_their_account(db) {
        let store = db.open().await;
        let ada = store.create_account("ada").await.unwrap();
        let token = margin_server::auth::issue_token(&store, &ada).await.unwrap();
        assert_eq!(margin_server::auth::authenticate(&store, &token).await.unwrap(), ada);
        assert!(margin_server::auth::authenticate(&store, "mgn_unknown").await.is_err());
    }

    async fn documents_and_roles(db) {
        let store = db.open().await;
        let ada = store.create_account("ada").await.unwrap();
        let bo = store.create_account("bo").await.unwrap();
        let doc = store.create_document(&ada, "Plan").await.unwrap();
        assert_eq!(doc.role, Role::Owner);
        assert!(matches!(store.document_for(&bo, &doc.id).await, Err(StorageError::NotFound(_))));
        store.set_member(&doc.id, &bo, Role::Viewer).await.unwrap();
        assert_eq!(store.document_for(&bo, &doc.id).await.unwrap().role, Role::Viewer);
        store.set_member(&doc.id, &bo, Role::Editor).await.unwrap();
        assert_eq!(store.document_for(&bo, &doc.id).await.unwrap().role, Role::Editor);
        assert!(matches!(store.set_member(&doc.id, &ada, Role::Viewer).await, Err(StorageError::Conflict(_))));
        assert_eq!(store.documents_of(&bo).await.unwrap(), vec![store.document_for(&bo, &doc.id).await.unwrap()]);
    }

    async fn appends_advance_the_revision_in_order(db) {
        let store = db.open().await;
        let ada = store.create_account("ada").await.unwrap();
        let doc = store.create_document(&ada, "Plan").await.unwrap();
        let epoch = store.claim_document(&doc.id).await.unwrap();
        assert_eq!(store.append_updates(&doc.id, epoch, 0, &[vec![1], vec![2]]).await.unwrap(), 2);
        assert_eq!(store.append_updates(&doc.id, epoch, 2, &[vec![3]]).await.unwrap(), 3);
        assert_eq!(
            store.load_state(&doc.id, None).await.unwrap(),
            StoredState { revision: 3, snapshot: None, updates: vec![vec![1], vec![2], vec![3]], clients: vec![] }
        );
        assert_eq!(store.load_state(&doc.id, Some(1)).await.unwrap().updates, vec![vec![1]]);
        assert!(matches!(store.load_state(&doc.id, Some(4)).await, Err(StorageError::NotFound("revision"))));
    }

    async fn a_stale_writer_is_fenced_and_writes_nothing(db) {
        let store = db.open().await;
        let ada = store.create_account("ada").await.unwrap();
        let doc = store.create_document(&ada, "Plan").await.unwrap();
        let epoch = store.claim_document(&doc.id).await.unwrap();
        store.append_updates(&doc.id, epoch, 0, &[vec![1]]).await.unwrap();
        let stale = store.append_updates(&doc.id, epoch, 0, &[vec![9], vec![9]]).await;
        assert!(matches!(stale, Err(StorageError::RevisionMoved { expected: 0, found: 1 })), "{stale:?}");
        assert_eq!(store.load_state(&doc.id, None).await.unwrap().updates, vec![vec![1]]);
    }

    async fn an_append_that_fails_part_way_writes_nothing_and_the_next_one_lands(db) {
        // On SQLite an append is one multi-statement round trip: a statement
        // failing in its middle must not leave its transaction open to be
        // committed by the next write.
        let store = db.open().await;
        let ada = store.create_account("ada").await.unwrap();
        let doc = store.create_document(&ada, "Plan").await.unwrap();
        let epoch = store.claim_document(&doc.id).await.unwrap();
        store.append_updates(&doc.id, epoch, 0, &[vec![1]]).await.unwrap();
        let raw = sqlx::AnyPool::connect(&db.url()).await.unwrap();
        let stray = "INSERT INTO document_updates (document_id, revision, data) VALUES ($1, 3, $2)";
        sqlx::query(stray).bind(&doc.id).bind(vec![9u8]).execute(&raw).await.unwrap();
        let failed = store.append_updates(&doc.id, epoch, 1, &[vec![2], vec![3]]).await;
        assert!(failed.is_err(), "{failed:?}");
        sqlx::query("DELETE FROM document_updates WHERE revision = 3").execute(&raw).await.unwrap();
        raw.close().await;
        assert_eq!(store.revision(&doc.id).await.unwrap(), 1);
        assert_eq!(store.log_len(&doc.id).await.unwrap(), 1, "the failed append left a row");
        assert_eq!(store.append_updates(&doc.id, epoch, 1, &[vec![4]]).await.unwrap(), 2);
        assert_eq!(store.load_state(&doc.id, None).await.unwrap().updates, vec![vec![1], vec![4]]);
    }

    async fn compaction_replaces_covered_rows_and_never_goes_back(db) {
        let store = db.open().await;
        let ada = store.create_account("ada").await.unwrap();
        let doc = store.create_document(&ada, "Plan").await.unwrap();
        let epoch = store.claim_document(&doc.id).await.unwrap();
        store.append_updates(&doc.id, epoch, 0, &[vec![1], vec![2], vec![3]]).await.unwrap();
        store.compact(&doc.id, epoch, 2, b"snap2").await.unwrap();
        assert_eq!(
            store.load_state(&doc.id, None).await.unwrap(),
            StoredState { revision: 3, snapshot: Some((2, b"snap2".to_vec())), updates: vec![vec![3]], clients: vec![] }
        );
        assert_eq!(store.log_len(&doc.id).await.unwrap(), 1);
        // An older snapshot arriving late does not replace the newer one.
        store.compact(&doc.id, epoch, 1, b"snap1").await.unwrap();
        assert_eq!(store.load_state(&doc.id, None).await.unwrap().snapshot, Some((2, b"snap2".to_vec())));
        assert!(matches!(
            store.load_state(&doc.id, Some(1)).await,
            Err(StorageError::Compacted { requested: 1, snapshot: 2 })
        ));
        assert_eq!(store.load_state(&doc.id, Some(2)).await.unwrap().updates, Vec::<Vec<u8>>::new());
    }

    async fn a_load_racing_a_compaction_always_sees_every_revision(db) {
        // Read skew: a load that read the old snapshot and then the log
        // after a compaction deleted its rows would lose those updates.
        let store = db.open().await;
        let ada = store.create_account("ada").await.unwrap();
        let doc = store.create_document(&ada, "Plan").await.unwrap();
        let epoch = store.claim_document(&doc.id).await.unwrap();
        for revision in 0..150i64 {
            store.append_updates(&doc.id, epoch, revision, &[vec![revision as u8]]).await.unwrap();
            let snapshot = format!("snap{}", revision + 1);
            let compact = store.compact(&doc.id, epoch, revision + 1, snapshot.as_bytes());
            let (compacted, loaded) = tokio::join!(compact, store.load_state(&doc.id, None));
            compacted.unwrap();
            let loaded = loaded.unwrap();
            let covered = loaded.snapshot.as_ref().map_or(0, |(at, _)| *at) + loaded.updates.len() as i64;
            assert_eq!(covered, loaded.revision, "revision {}: {loaded:?}", revision + 1);
        }
    }

    async fn reopening_the_store_keeps_everything(db) {
        let store = db.open().await;
        let ada = store.create_account("ada").await.unwrap();
        let doc = store.create_document(&ada, "Plan").await.unwrap();
        let epoch = store.claim_document(&doc.id).await.unwrap();
        store.append_updates(&doc.id, epoch, 0, &[vec![7]]).await.unwrap();
        store.close().await;
        // Migrations run again on open and must be a no-op.
        let reopened = db.open().await;
        assert_eq!(reopened.load_state(&doc.id, None).await.unwrap().updates, vec![vec![7]]);
        assert_eq!(reopened.documents_of(&ada).await.unwrap().len(), 1);
    }
}

on_both_backends! {
    async fn member_changes_during_document_writes_never_fail(db) {
        let store = db.open().await;
        let ada = store.create_account("ada").await.unwrap();
        let bo = store.create_account("bo").await.unwrap();
        let doc = store.create_document(&ada, "Plan").await.unwrap();
        let epoch = store.claim_document(&doc.id).await.unwrap();
        let writer = {
            let (store, id) = (store.clone(), doc.id.clone());
            tokio::spawn(async move {
                for revision in 0..200 {
                    store.append_updates(&id, epoch, revision, &[vec![1]]).await.unwrap();
                }
            })
        };
        for i in 0..200 {
            let role = if i % 2 == 0 { Role::Editor } else { Role::Viewer };
            store.set_member(&doc.id, &bo, role).await.unwrap();
        }
        writer.await.unwrap();
        assert_eq!(store.document_for(&bo, &doc.id).await.unwrap().role, Role::Viewer);
    }
}

/// An open free-text card `id` asking about `key`.
fn open_card(id: &str, key: &str) -> margin_decisions::DecisionCard {
    margin_decisions::DecisionCard {
        id: id.into(),
        key: margin_decisions::Key::parse(key).unwrap(),
        question: format!("Which {key}?"),
        description: None,
        response: margin_decisions::ResponseKind::FreeText,
        choices: vec![],
        criteria: vec![],
        anchors: vec![],
        state: margin_decisions::CardState::Open,
        answer: None,
        answered_by: None,
        excerpt: Some(format!("Which {key} first?")),
    }
}

/// How many rows each table holds for document `id`, read straight from the
/// database.
async fn rows_of(db: &crate::harness::TestDb, id: &str) -> Vec<(&'static str, i64)> {
    use sqlx::Row;
    let pool = sqlx::AnyPool::connect(&db.url()).await.unwrap();
    let mut counts = Vec::new();
    for (table, column) in [
        ("documents", "id"),
        ("members", "document_id"),
        ("document_updates", "document_id"),
        ("document_snapshots", "document_id"),
        ("decision_cards", "document_id"),
        ("chat_messages", "document_id"),
    ] {
        let sql = format!("SELECT COUNT(*) AS n FROM {table} WHERE {column} = $1");
        let row = sqlx::query(&sql).bind(id).fetch_one(&pool).await.unwrap();
        counts.push((table, row.try_get::<i64, _>("n").unwrap()));
    }
    pool.close().await;
    counts
}

on_both_backends! {
    async fn archiving_is_recorded_and_reversible(db) {
        let store = db.open().await;
        let ada = store.create_account("ada").await.unwrap();
        let bo = store.create_account("bo").await.unwrap();
        let doc = store.create_document(&ada, "Plan").await.unwrap();
        store.set_member(&doc.id, &bo, Role::Editor).await.unwrap();
        assert!(!doc.archived);
        assert!(!store.is_archived(&doc.id).await.unwrap());
        // The first archive changes it; a second is a no-op.
        assert!(store.set_archived(&doc.id, true).await.unwrap());
        assert!(!store.set_archived(&doc.id, true).await.unwrap());
        assert!(store.is_archived(&doc.id).await.unwrap());
        assert!(store.document_for(&bo, &doc.id).await.unwrap().archived);
        assert!(store.documents_of(&ada).await.unwrap()[0].archived);
        assert!(store.set_archived(&doc.id, false).await.unwrap());
        assert!(!store.document_for(&ada, &doc.id).await.unwrap().archived);
        assert!(matches!(store.set_archived("missing", true).await, Err(StorageError::NotFound("document"))));
        assert!(matches!(store.is_archived("missing").await, Err(StorageError::NotFound("document"))));
    }

    async fn deleting_a_document_removes_every_row_under_it(db) {
        let store = db.open().await;
        let ada = store.create_account("ada").await.unwrap();
        let bo = store.create_account("bo").await.unwrap();
        let doc = store.create_document(&ada, "Plan").await.unwrap();
        let epoch = store.claim_document(&doc.id).await.unwrap();
        let other = store.create_document(&ada, "Other").await.unwrap();
        store.set_member(&doc.id, &bo, Role::Editor).await.unwrap();
        store.append_updates(&doc.id, epoch, 0, &[vec![1], vec![2], vec![3]]).await.unwrap();
        store.compact(&doc.id, epoch, 2, b"snap").await.unwrap();
        store.append_chat(&doc.id, "ada", margin_protocol::chat::ChatKind::Member, "hi").await.unwrap();
        store.append_chat(&other.id, "ada", margin_protocol::chat::ChatKind::Member, "kept").await.unwrap();
        store.create_cards(&doc.id, &[open_card("card-1", "region")]).await.unwrap();
        let before = rows_of(&db, &doc.id).await;
        assert!(before.iter().all(|(_, n)| *n > 0), "{before:?}");

        store.delete_document(&doc.id).await.unwrap();
        assert!(rows_of(&db, &doc.id).await.iter().all(|(_, n)| *n == 0), "{:?}", rows_of(&db, &doc.id).await);
        assert!(matches!(store.document_for(&ada, &doc.id).await, Err(StorageError::NotFound(_))));
        assert!(matches!(store.load_state(&doc.id, None).await, Err(StorageError::NotFound("document"))));
        assert!(store.documents_of(&bo).await.unwrap().is_empty());
        // Other documents are untouched; a second delete finds nothing.
        assert_eq!(store.documents_of(&ada).await.unwrap().len(), 1);
        assert_eq!(store.chat(&other.id, 0, 10).await.unwrap().len(), 1);
        assert!(matches!(store.delete_document(&doc.id).await, Err(StorageError::NotFound("document"))));
    }

    // SPEC W2a, E2: one write longer than one multi-row INSERT keeps every
    // journal record and feed event, in order and unchanged (quotes and
    // all), and the next write is fenced on where it left off.
    async fn a_session_write_longer_than_one_statement_keeps_every_row_in_order(db) {
        let store = db.open().await;
        let ada = store.create_account("ada").await.unwrap();
        let doc = store.create_document(&ada, "Plan").await.unwrap();
        let machine = store.pair_machine(&ada, "laptop", "hash", i64::MAX).await.unwrap();
        let rows = 450u64;
        let records: Vec<(u64, String)> = (1..=rows).map(|seq| (seq, format!("{{\"record\":{seq},\"text\":\"it's \\\"{seq}\\\"\"}}"))).collect();
        let events: Vec<StoredEvent> = (1..=rows)
            .map(|seq| StoredEvent { seq, kind: format!("kind-{}", seq % 3), body: format!("{{\"event\":{seq}}}") })
            .collect();
        let first = SessionWrite {
            session: "s1".into(),
            owner: Some(SessionOwner { document: doc.id.clone(), account: ada.id.clone(), machine: machine.id.clone() }),
            records: records.clone(),
            events: events.clone(),
            snapshot: "{}".into(),
            state: "active",
            ..SessionWrite::default()
        };
        store.commit_sessions(&[first]).await.unwrap();
        assert_eq!(store.session_journal("s1", 0).await.unwrap(), records);
        assert_eq!(store.session_events("s1", 0, 1_000).await.unwrap(), events);
        let stored = store.session("s1").await.unwrap().unwrap();
        assert_eq!((stored.journal_seq, stored.cursor), (rows, rows));
        let stale = SessionWrite {
            session: "s1".into(),
            base: rows - 1,
            cursor: rows,
            records: vec![(rows, "{}".into())],
            snapshot: "{}".into(),
            state: "active",
            ..SessionWrite::default()
        };
        assert!(matches!(
            store.commit_sessions(&[stale]).await,
            Err(StorageError::JournalMoved { expected, found }) if expected == rows - 1 && found == rows
        ));
        assert_eq!(store.session_journal("s1", 0).await.unwrap().len() as u64, rows);
    }

    // SPEC W1, W2a: sessions' writes committed at once (on SQLite, in one
    // group of the commit thread) land each whose fence holds — rows, prunes and domain snapshot — and refuse a stale
    // one alone, writing nothing of it; a session created twice is refused.
    async fn a_group_of_session_writes_refuses_only_the_stale_one(db) {
        let store = db.open().await;
        let ada = store.create_account("ada").await.unwrap();
        let doc = store.create_document(&ada, "Plan").await.unwrap();
        let machine = store.pair_machine(&ada, "laptop", "hash", i64::MAX).await.unwrap();
        let owner = SessionOwner { document: doc.id.clone(), account: ada.id.clone(), machine: machine.id.clone() };
        let event = |seq: u64| StoredEvent { seq, kind: "turn_started".into(), body: format!("{{\"event\":{seq}}}") };
        let first = |session: &str| SessionWrite {
            session: session.into(),
            owner: Some(owner.clone()),
            records: vec![(1, format!("{{\"it's\":\"{session}\"}}"))],
            events: vec![event(1)],
            snapshot: "{\"at\":1}".into(),
            state: "active",
            ..SessionWrite::default()
        };
        let (s1, s2) = ([first("s1")], [first("s2")]);
        let (s1, s2) = tokio::join!(store.commit_sessions(&s1), store.commit_sessions(&s2));
        assert!(s1.is_ok() && s2.is_ok(), "{s1:?} {s2:?}");

        let next = SessionWrite {
            session: "s1".into(),
            base: 1,
            cursor: 1,
            records: vec![(2, "{\"record\":2}".into())],
            events: vec![event(2)],
            snapshot: "{\"at\":2}".into(),
            state: "disconnected",
            domain: Some("{\"domain\":2}".into()),
            prune_journal: Some(1),
            prune_events: Some(1),
            ..SessionWrite::default()
        };
        let stale = SessionWrite {
            session: "s2".into(),
            base: 0,
            cursor: 0,
            records: vec![(1, "{\"stale\":true}".into())],
            events: vec![event(1)],
            snapshot: "{\"stale\":true}".into(),
            state: "ended",
            prune_journal: Some(1),
            ..SessionWrite::default()
        };
        let (next, stale) = ([next], [stale]);
        let fates = tokio::join!(store.commit_sessions(&next), store.commit_sessions(&stale));
        assert!(fates.0.is_ok(), "{fates:?}");
        assert!(matches!(fates.1, Err(StorageError::JournalMoved { expected: 0, found: 1 })), "{fates:?}");
        // The landed write, whole: its rows, its prunes, its row.
        assert_eq!(store.session_journal("s1", 0).await.unwrap(), vec![(2, "{\"record\":2}".to_owned())]);
        assert_eq!(store.session_events("s1", 0, 10).await.unwrap(), vec![event(2)]);
        let s1 = store.session("s1").await.unwrap().unwrap();
        assert_eq!((s1.journal_seq, s1.cursor, s1.snapshot.as_str()), (2, 2, "{\"at\":2}"));
        assert_eq!(s1.domain, Some((2, "{\"domain\":2}".to_owned())));
        // The stale one: nothing of it.
        assert_eq!(store.session_journal("s2", 0).await.unwrap(), vec![(1, "{\"it's\":\"s2\"}".to_owned())]);
        assert_eq!(store.session_events("s2", 0, 10).await.unwrap(), vec![event(1)]);
        let s2 = store.session("s2").await.unwrap().unwrap();
        assert_eq!((s2.journal_seq, s2.cursor, s2.snapshot.as_str()), (1, 1, "{\"at\":1}"));
        assert!(store.open_session("s2").await.unwrap().is_some(), "still open");

        // Created twice: refused, and s1 as it was.
        let again = store.commit_sessions(&[first("s1")]).await;
        assert!(again.is_err(), "{again:?}");
        assert_eq!(store.session("s1").await.unwrap().unwrap().journal_seq, 2);
    }

    // SPEC W1, W3, D: a document's changes commit with the cards they
    // create, the cards they change and the session writes recording the
    // tool calls that made them — all of it, or, when any one fence moved
    // (the document's, a card's version, a session's journal) or a card's
    // key is taken, nothing of it; the write after a refusal lands.
    async fn a_documents_changes_and_what_rides_with_them_land_whole_or_not_at_all(db) {
        let store = db.open().await;
        let ada = store.create_account("ada").await.unwrap();
        let doc = store.create_document(&ada, "Plan").await.unwrap();
        let epoch = store.claim_document(&doc.id).await.unwrap();
        let machine = store.pair_machine(&ada, "laptop", "hash", i64::MAX).await.unwrap();
        let owner = SessionOwner { document: doc.id.clone(), account: ada.id.clone(), machine: machine.id.clone() };
        let event = |seq: u64| StoredEvent { seq, kind: "tool_called".into(), body: format!("{{\"event\":{seq}}}") };
        let created = SessionWrite {
            session: "s1".into(),
            owner: Some(owner),
            records: vec![(1, "{\"record\":1}".into())],
            events: vec![event(1)],
            snapshot: "{\"at\":1}".into(),
            state: "active",
            ..SessionWrite::default()
        };
        store.commit_sessions(&[created]).await.unwrap();
        store.create_cards(&doc.id, &[open_card("c0", "region")]).await.unwrap();
        let closed = |version: i64| {
            let mut card = open_card("c0", "region");
            card.state = margin_decisions::CardState::Discarded;
            StoredCard { card, version }
        };
        let result = |base: u64| SessionWrite {
            session: "s1".into(),
            base,
            cursor: base,
            records: vec![(base + 1, format!("{{\"result\":{}}}", base + 1))],
            events: vec![event(base + 1)],
            snapshot: format!("{{\"at\":{}}}", base + 1),
            state: "active",
            ..SessionWrite::default()
        };
        // Changes written at `expected` with a new card `new` keyed `key`,
        // c0's change to `version` and s1's write from `base`.
        let attempt = |expected: i64, changes: Vec<Vec<u8>>, new: &'static str, key: &'static str, version: i64, base: u64| {
            let store = store.clone();
            let id = doc.id.clone();
            let new = [open_card(new, key)];
            let changed = [closed(version)];
            let sessions = [result(base)];
            let bindings = [ClientBinding { client: 7 + expected as u64, account: Some("ada".into()) }];
            async move {
                let alongside = Alongside {
                    cards: &new,
                    changed: &changed,
                    sessions: &sessions,
                    edited_by: Some("planner"),
                    clients: &bindings,
                };
                store.append_with(&id, epoch, expected, changes, alongside).await
            }
        };

        let landed = attempt(0, vec![vec![1], vec![2]], "c1", "budget", 2, 1).await;
        assert_eq!(landed.unwrap(), 2);
        let state = store.load_state(&doc.id, None).await.unwrap();
        assert_eq!((state.revision, state.updates.clone()), (2, vec![vec![1], vec![2]]));
        assert_eq!(state.clients.iter().map(|b| b.client).collect::<Vec<_>>(), vec![7]);
        let cards = store.cards(&doc.id).await.unwrap();
        assert_eq!(cards.iter().map(|c| (c.card.id.as_str(), c.version)).collect::<Vec<_>>(), vec![("c0", 2), ("c1", 1)]);
        assert_eq!(cards[0].card.state, margin_decisions::CardState::Discarded);
        assert_eq!(store.session("s1").await.unwrap().unwrap().journal_seq, 2);
        assert_eq!(store.documents_of(&ada).await.unwrap()[0].edited_by.as_deref(), Some("planner"));

        // Each refusal below carries changes, a new card, a card change and
        // a session write; what the store holds must not move.
        let held = |store: &margin_server::storage::Store| {
            let store = store.clone();
            let id = doc.id.clone();
            async move {
                let state = store.load_state(&id, None).await.unwrap();
                let cards: Vec<(String, i64)> =
                    store.cards(&id).await.unwrap().into_iter().map(|c| (c.card.id, c.version)).collect();
                let journal = store.session_journal("s1", 0).await.unwrap();
                let events = store.session_events("s1", 0, 10).await.unwrap();
                (state.revision, state.updates, state.clients.len(), cards, journal, events)
            }
        };
        let before = held(&store).await;
        let stale_session = attempt(2, vec![vec![9]], "c2", "scope", 3, 1).await;
        assert!(matches!(stale_session, Err(StorageError::JournalMoved { expected: 1, found: 2 })), "{stale_session:?}");
        assert_eq!(held(&store).await, before, "a stale session's write moved the store");
        let stale_card = attempt(2, vec![vec![9]], "c2", "scope", 2, 2).await;
        assert!(matches!(&stale_card, Err(StorageError::Conflict(why)) if why.contains("c0")), "{stale_card:?}");
        assert_eq!(held(&store).await, before, "a stale card change moved the store");
        let stale_document = attempt(0, vec![vec![9]], "c2", "scope", 3, 2).await;
        assert!(matches!(stale_document, Err(StorageError::RevisionMoved { expected: 0, found: 2 })), "{stale_document:?}");
        assert_eq!(held(&store).await, before, "a stale document write moved the store");
        let key_taken = attempt(2, vec![vec![9]], "c2", "budget", 3, 2).await;
        assert!(matches!(&key_taken, Err(StorageError::Conflict(why)) if why.contains("key")), "{key_taken:?}");
        assert_eq!(held(&store).await, before, "a taken key moved the store");

        assert_eq!(attempt(2, vec![vec![9]], "c2", "scope", 3, 2).await.unwrap(), 3);
        let after = held(&store).await;
        assert_eq!((after.0, after.2, after.3.len(), after.4.len()), (3, 2, 3, 3));
    }
}

// SPEC W2a, issue 43: a session's domain snapshot, stored in its row before
// it moved to a table of its own, is read back from that table once the
// migration has run, and the next write's snapshot replaces it there.
#[tokio::test]
async fn a_domain_snapshot_stored_in_the_session_row_is_read_back_after_it_moved() {
    let dir = tempfile::tempdir().unwrap();
    let url = margin_server::storage::Store::sqlite_url_in(dir.path()).unwrap();
    sqlx::any::install_default_drivers();
    {
        // The schema as it stood before the move, with a session holding
        // a domain snapshot in its row.
        let mut before = sqlx::migrate!("./migrations/sqlite");
        before.migrations = before
            .migrations
            .iter()
            .filter(|m| m.version < 15)
            .cloned()
            .collect::<Vec<_>>()
            .into();
        let pool = sqlx::sqlite::SqlitePool::connect(&url).await.unwrap();
        before.run(&pool).await.unwrap();
        for sql in [
            "INSERT INTO accounts (id, name, created_at) VALUES ('a', 'ada', 0)",
            "INSERT INTO documents (id, title, owner_id, created_at) VALUES ('d', 'Plan', 'a', 0)",
            "INSERT INTO machines (id, account_id, name, created_at) VALUES ('m', 'a', 'laptop', 0)",
            "INSERT INTO planner_sessions (id, document_id, account_id, machine_id, cursor, snapshot, state, created_at, journal_seq, domain, domain_seq) \
             VALUES ('s1', 'd', 'a', 'm', 0, '{}', 'active', 0, 7, '{\"domain\":7}', 7)",
        ] {
            sqlx::query(sql).execute(&pool).await.unwrap();
        }
        pool.close().await;
    }
    let store = margin_server::storage::Store::open(&url).await.unwrap();
    let stored = store.session("s1").await.unwrap().unwrap();
    assert_eq!(stored.domain, Some((7, "{\"domain\":7}".to_owned())));
    let next = SessionWrite {
        session: "s1".into(),
        base: 7,
        records: vec![(8, "{}".into())],
        snapshot: "{}".into(),
        state: "active",
        domain: Some("{\"domain\":8}".into()),
        ..SessionWrite::default()
    };
    store.commit_sessions(&[next]).await.unwrap();
    let stored = store.session("s1").await.unwrap().unwrap();
    assert_eq!(
        (stored.journal_seq, stored.domain),
        (8, Some((8, "{\"domain\":8}".to_owned())))
    );
}
