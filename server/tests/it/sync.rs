//! Document sync over real sockets with a `yrs` client (SPEC S2, S3, A2).

use std::time::Duration;

use margin_protocol::sync::{close, MAX_UPDATE_BYTES};
use serde_json::json;
use yrs::sync::{Message, SyncMessage};
use yrs::updates::encoder::Encode;
use yrs::{ReadTxn, Transact};

use crate::harness::{Server, SyncClient};
use crate::on_both_backends;

on_both_backends! {
    async fn two_clients_converge(db) {
        let server = Server::start(&db).await;
        let token = Server::account(&db, "ada").await;
        let doc = server.create_document(&token, "Plan").await;
        let mut a = SyncClient::connect(&server.sync_url(&doc, &token)).await;
        let mut b = SyncClient::connect(&server.sync_url(&doc, &token)).await;
        a.append_paragraph("from a").await;
        b.append_paragraph("from b").await;
        assert!(a.until(|c| c.texts().len() == 2).await);
        assert!(b.until(|c| c.texts().len() == 2).await);
        assert_eq!(a.texts(), b.texts());
        assert_eq!(a.state_vector(), b.state_vector());
        let (revision, texts) = server.block_texts(&token, &doc).await;
        assert_eq!(texts, a.texts());
        assert_eq!(revision, 2);
    }

    async fn late_joiner_receives_the_whole_document(db) {
        let server = Server::start(&db).await;
        let token = Server::account(&db, "ada").await;
        let doc = server.create_document(&token, "Plan").await;
        let mut a = SyncClient::connect(&server.sync_url(&doc, &token)).await;
        a.append_paragraph("first").await;
        a.append_paragraph("second").await;
        assert!(a.until(|_| true).await);
        // The outline only moves once both changes are committed.
        for _ in 0..100 {
            if server.block_texts(&token, &doc).await.0 == 2 { break; }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let late = SyncClient::connect(&server.sync_url(&doc, &token)).await;
        assert_eq!(late.texts(), vec!["first", "second"]);
    }

    async fn viewer_receives_updates_but_its_edits_are_refused(db) {
        let server = Server::start(&db).await;
        let owner = Server::account(&db, "ada").await;
        let viewer = Server::account(&db, "vic").await;
        let doc = server.create_document(&owner, "Plan").await;
        let (status, body) = server
            .post(Some(&owner), &format!("/documents/{doc}/members"), json!({"account": "vic", "role": "viewer"}))
            .await;
        assert_eq!(status, 200, "{body}");
        let mut editor = SyncClient::connect(&server.sync_url(&doc, &owner)).await;
        let mut watcher = SyncClient::connect(&server.sync_url(&doc, &viewer)).await;
        editor.append_paragraph("owner's words").await;
        assert!(watcher.until(|c| c.texts() == vec!["owner's words"]).await);

        watcher.append_paragraph("viewer's words").await;
        let (code, reason) = watcher.wait_closed().await;
        assert_eq!(code, close::READ_ONLY);
        assert!(reason.contains("read-only"), "{reason}");
        // Nothing changed: the editor stays connected and sees no new text.
        assert!(editor.stays_open(Duration::from_millis(300)).await);
        assert_eq!(editor.texts(), vec!["owner's words"]);
        assert_eq!(server.block_texts(&owner, &doc).await, (1, vec!["owner's words".to_owned()]));
    }

    async fn ten_mebibyte_update_goes_through(db) {
        let server = Server::start(&db).await;
        let token = Server::account(&db, "ada").await;
        let doc = server.create_document(&token, "Big").await;
        let mut a = SyncClient::connect(&server.sync_url(&doc, &token)).await;
        let mut b = SyncClient::connect(&server.sync_url(&doc, &token)).await;
        let big = "x".repeat(10 * 1024 * 1024);
        a.append_paragraph(&big).await;
        assert!(b.until(|c| c.texts().first().map(String::len) == Some(big.len())).await);
        assert_eq!(server.block_texts(&token, &doc).await.1[0].len(), big.len());
    }

    async fn update_over_the_limit_is_refused_and_changes_nothing(db) {
        let server = Server::start(&db).await;
        let token = Server::account(&db, "ada").await;
        let doc = server.create_document(&token, "Big").await;
        let mut other = SyncClient::connect(&server.sync_url(&doc, &token)).await;
        let mut a = SyncClient::connect(&server.sync_url(&doc, &token)).await;
        let too_big = "y".repeat(MAX_UPDATE_BYTES + 1);
        a.append_paragraph(&too_big).await;
        let (code, _) = a.wait_closed().await;
        assert_eq!(code, close::TOO_BIG);
        assert!(other.stays_open(Duration::from_millis(300)).await);
        assert_eq!(other.texts(), Vec::<String>::new());
        assert_eq!(server.block_texts(&token, &doc).await, (0, vec![]));
    }

    async fn content_and_state_vector_survive_restart(db) {
        let mut server = Server::start(&db).await;
        let token = Server::account(&db, "ada").await;
        let doc = server.create_document(&token, "Plan").await;
        let mut a = SyncClient::connect(&server.sync_url(&doc, &token)).await;
        a.append_paragraph("keep me").await;
        a.append_paragraph("and me").await;
        let mut b = SyncClient::connect(&server.sync_url(&doc, &token)).await;
        assert!(b.until(|c| c.texts().len() == 2).await);
        let before = (a.texts(), a.state_vector());
        server.terminate().await;
        server.restart().await;
        let after = SyncClient::connect(&server.sync_url(&doc, &token)).await;
        assert_eq!((after.texts(), after.state_vector()), before);
        assert_eq!(server.block_texts(&token, &doc).await.0, 2);
    }
}

on_both_backends! {
    async fn malformed_frame_closes_only_its_connection(db) {
        let server = Server::start(&db).await;
        let token = Server::account(&db, "ada").await;
        let doc = server.create_document(&token, "Plan").await;
        let mut good = SyncClient::connect(&server.sync_url(&doc, &token)).await;
        let mut bad = SyncClient::connect_raw(&server.sync_url(&doc, &token)).await;
        // A sync message whose length prefix runs past the end of the frame.
        bad.send_raw(vec![0, 2, 0xff, 0xff, 0x01, 7]).await;
        let (code, reason) = bad.wait_closed().await;
        assert_eq!(code, close::MALFORMED, "{reason}");
        good.append_paragraph("still here").await;
        let mut check = SyncClient::connect(&server.sync_url(&doc, &token)).await;
        assert!(check.until(|c| c.texts() == vec!["still here"]).await);
        assert!(good.stays_open(Duration::from_millis(100)).await);
    }

    async fn unknown_message_type_is_refused(db) {
        let server = Server::start(&db).await;
        let token = Server::account(&db, "ada").await;
        let doc = server.create_document(&token, "Plan").await;
        let mut client = SyncClient::connect_raw(&server.sync_url(&doc, &token)).await;
        client.send_raw(vec![9, 1, 0]).await;
        let (code, reason) = client.wait_closed().await;
        assert_eq!(code, close::MALFORMED);
        assert!(reason.contains("unsupported"), "{reason}");
    }

    async fn text_frame_is_refused(db) {
        let server = Server::start(&db).await;
        let token = Server::account(&db, "ada").await;
        let doc = server.create_document(&token, "Plan").await;
        let mut client = SyncClient::connect_raw(&server.sync_url(&doc, &token)).await;
        client.send_text("hello").await;
        let (code, reason) = client.wait_closed().await;
        assert_eq!(code, close::MALFORMED);
        assert!(reason.contains("binary"), "{reason}");
    }

    async fn update_that_does_not_decode_is_refused_and_changes_nothing(db) {
        let server = Server::start(&db).await;
        let token = Server::account(&db, "ada").await;
        let doc = server.create_document(&token, "Plan").await;
        let mut client = SyncClient::connect(&server.sync_url(&doc, &token)).await;
        let garbage = Message::Sync(SyncMessage::Update(vec![0xff; 32])).encode_v1();
        client.send_raw(garbage).await;
        let (code, reason) = client.wait_closed().await;
        assert_eq!(code, close::BAD_UPDATE, "{reason}");
        assert!(reason.starts_with("update refused: "), "{reason}");
        assert_eq!(server.block_texts(&token, &doc).await, (0, vec![]));
    }

    async fn duplicate_update_does_not_advance_the_revision(db) {
        let server = Server::start(&db).await;
        let token = Server::account(&db, "ada").await;
        let doc = server.create_document(&token, "Plan").await;
        let mut client = SyncClient::connect(&server.sync_url(&doc, &token)).await;
        let update = client.local_paragraph("once");
        for _ in 0..3 {
            client.send(Message::Sync(SyncMessage::Update(update.clone()))).await;
        }
        let mut check = SyncClient::connect(&server.sync_url(&doc, &token)).await;
        assert!(check.until(|c| c.texts() == vec!["once"]).await);
        assert!(client.stays_open(Duration::from_millis(200)).await);
        assert_eq!(server.block_texts(&token, &doc).await, (1, vec!["once".to_owned()]));
    }

    async fn sync_refuses_bad_tokens_and_unknown_documents(db) {
        let server = Server::start(&db).await;
        let token = Server::account(&db, "ada").await;
        let stranger = Server::account(&db, "sam").await;
        let doc = server.create_document(&token, "Plan").await;
        for (url, status) in [
            (server.sync_url(&doc, "mgn_nope"), 401),
            (format!("ws://{}/documents/{doc}/sync", server.addr), 401),
            (server.sync_url("no-such-doc", &token), 404),
            (server.sync_url(&doc, &stranger), 404),
        ] {
            let error = tokio_tungstenite::connect_async(&url).await.unwrap_err();
            match error {
                tokio_tungstenite::tungstenite::Error::Http(response) => {
                    assert_eq!(response.status().as_u16(), status, "{url}");
                }
                other => panic!("{url}: expected an HTTP refusal, got {other}"),
            }
        }
    }
}

#[test]
fn state_vector_helper_is_comparable() {
    // Guards the harness: an empty doc's state vector is empty.
    let doc = yrs::Doc::new();
    assert!(doc.transact().state_vector().is_empty());
}

on_both_backends! {
    async fn client_that_cannot_keep_up_is_closed_to_resync(db) {
        let server = Server::start(&db).await;
        let token = Server::account(&db, "ada").await;
        let doc = server.create_document(&token, "Plan").await;
        let mut slow = SyncClient::connect(&server.sync_url(&doc, &token)).await;
        let mut writer = SyncClient::connect(&server.sync_url(&doc, &token)).await;
        let mut peer = SyncClient::connect(&server.sync_url(&doc, &token)).await;
        // `slow` reads nothing while 2,000 updates of 16 KiB pass, each its
        // own batch (the peer sees one before the next is sent): more frames
        // than its socket buffers and its outbox hold.
        let line = "z".repeat(16 * 1024);
        for sent in 1..=2_000 {
            writer.append_paragraph(&line).await;
            assert!(peer.until(|c| c.block_count() >= sent).await);
        }
        let (code, reason) = slow.wait_closed().await;
        assert_eq!(code, close::TOO_SLOW, "{reason}");
        // Nothing was lost: reconnecting resyncs the whole document.
        let again = SyncClient::connect(&server.sync_url(&doc, &token)).await;
        assert_eq!(again.block_count(), 2_000);
        assert!(writer.stays_open(Duration::from_millis(100)).await);
    }

    async fn document_whose_snapshot_is_refused_is_not_loaded_nor_replaced(db) {
        let server = Server::start(&db).await;
        let token = Server::account(&db, "ada").await;
        let doc = server.create_document(&token, "Plan").await;
        let store = db.open().await;
        let epoch = store.claim_document(&doc).await.unwrap();
        store.append_updates(&doc, epoch, 0, &[paragraph_update(5, "kept")]).await.unwrap();
        let corrupt = vec![0xde, 0xad, 0xbe, 0xef];
        store.compact(&doc, epoch, 1, &corrupt).await.unwrap();
        let mut client = SyncClient::connect_raw(&server.sync_url(&doc, &token)).await;
        let (code, reason) = client.wait_closed().await;
        assert_eq!(code, close::INTERNAL);
        assert!(reason.contains("could not be loaded"), "{reason}");
        let (status, body) = server.get(Some(&token), &format!("/documents/{doc}/outline")).await;
        assert_eq!((status, body["error"]["code"].as_str()), (500, Some("internal")));
        // What is stored is untouched: nothing wrote an empty document over it.
        let state = store.load_state(&doc, None).await.unwrap();
        assert_eq!((state.revision, state.snapshot), (1, Some((1, corrupt))));
    }

    async fn a_stored_update_that_breaks_the_format_is_left_out_and_kept_aside(db) {
        let server = crate::harness::InProcess::start_with(&db, |o| {
            o.hub.compaction.debounce = Duration::from_millis(50);
        })
        .await;
        let (_, token) = server.account("ada").await;
        let doc = server.create_document(&token, "Plan").await;
        let store = db.open().await;
        let epoch = store.claim_document(&doc).await.unwrap();
        // A row no Yjs client writes (two runs of one client), between two
        // that load.
        let corrupt = vec![2, 1, 5, 0, 0, 1, 1, 5, 0, 0, 1, 0];
        let rows = [paragraph_update(5, "kept"), corrupt.clone(), paragraph_update(6, "also")];
        store.append_updates(&doc, epoch, 0, &rows).await.unwrap();
        let mut client = SyncClient::connect(&server.sync_url(&doc, &token)).await;
        assert_eq!(client.texts(), vec!["kept".to_owned(), "also".to_owned()]);
        client.append_paragraph("after").await;
        // Compaction replaces the log with a snapshot of what loaded, and
        // keeps the refused row aside.
        let mut kept = Vec::new();
        for _ in 0..200 {
            kept = store.refused_updates(&doc).await.unwrap();
            if !kept.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(kept.len(), 1, "the refused row was not kept aside");
        assert_eq!((kept[0].revision, &kept[0].data), (2, &corrupt));
        assert!(kept[0].reason.contains("two runs"), "{}", kept[0].reason);
        let again = SyncClient::connect(&server.sync_url(&doc, &token)).await;
        assert_eq!(again.texts(), vec!["kept".to_owned(), "also".to_owned(), "after".to_owned()]);
    }
}

/// An update of client `client` appending a paragraph holding `text` to
/// an empty document.
fn paragraph_update(client: u64, text: &str) -> Vec<u8> {
    use yrs::{XmlElementPrelim, XmlFragment, XmlTextPrelim};
    let doc = yrs::Doc::with_client_id(client);
    let fragment = doc.get_or_insert_xml_fragment("prosemirror");
    {
        let mut txn = doc.transact_mut();
        fragment.insert(
            &mut txn,
            0,
            XmlElementPrelim::new("paragraph", [XmlTextPrelim::new(text).into()]),
        );
    }
    let update = doc
        .transact()
        .encode_state_as_update_v1(&yrs::StateVector::default());
    update
}

on_both_backends! {
    async fn client_with_too_many_bytes_waiting_is_closed_to_resync(db) {
        let server = crate::harness::InProcess::start_with(&db, |o| o.hub.outbox_bytes = 256 * 1024).await;
        let (_, token) = server.account("ada").await;
        let doc = server.create_document(&token, "Plan").await;
        let mut slow = SyncClient::connect(&server.sync_url(&doc, &token)).await;
        let mut writer = SyncClient::connect(&server.sync_url(&doc, &token)).await;
        let mut peer = SyncClient::connect(&server.sync_url(&doc, &token)).await;
        // 200 frames, far below the 512-frame bound, but 12.5 MiB: more
        // bytes than the slow client's socket buffers and its outbox budget.
        let line = "b".repeat(64 * 1024);
        for sent in 1..=200 {
            writer.append_paragraph(&line).await;
            assert!(peer.until(|c| c.block_count() >= sent).await);
        }
        let (code, reason) = slow.wait_closed().await;
        assert_eq!(code, close::TOO_SLOW, "{reason}");
        let again = SyncClient::connect(&server.sync_url(&doc, &token)).await;
        assert_eq!(again.block_count(), 200);
    }
}

on_both_backends! {
    async fn a_connection_cannot_speak_for_another_ones_cursor(db) {
        let server = Server::start(&db).await;
        let token = Server::account(&db, "ada").await;
        let doc = server.create_document(&token, "Plan").await;
        let mut ada = SyncClient::connect(&server.sync_url(&doc, &token)).await;
        let mut mallory = SyncClient::connect(&server.sync_url(&doc, &token)).await;
        ada.announce(42, 1, r#"{"user":"ada"}"#).await;
        assert!(mallory.until(|c| c.awareness.get(&42).map(String::as_str) == Some(r#"{"user":"ada"}"#)).await);
        // Mallory claims Ada's client id: ignored, and then erases it: ignored.
        mallory.announce(42, 5, r#"{"user":"mallory"}"#).await;
        mallory.announce(42, 6, "null").await;
        mallory.announce(7, 1, r#"{"user":"mallory"}"#).await;
        let mut watcher = SyncClient::connect(&server.sync_url(&doc, &token)).await;
        assert!(watcher.until(|c| c.awareness.contains_key(&7)).await);
        assert_eq!(watcher.awareness.get(&42).map(String::as_str), Some(r#"{"user":"ada"}"#));
        // Claiming many ids closes the connection.
        for client in 100..120 {
            mallory.announce(client, 1, "{}").await;
        }
        assert_eq!(mallory.wait_closed().await.0, close::MALFORMED);
        assert!(ada.stays_open(Duration::from_millis(100)).await);
    }

    async fn awareness_that_is_not_a_json_object_closes_its_sender_and_is_never_relayed(db) {
        let server = Server::start(&db).await;
        let token = Server::account(&db, "ada").await;
        let doc = server.create_document(&token, "Plan").await;
        let mut ada = SyncClient::connect(&server.sync_url(&doc, &token)).await;
        for (client, bad) in [(7, "<not json>"), (8, "[1, 2]"), (9, "\"text\""), (10, "{\"open\": ")] {
            let mut mallory = SyncClient::connect(&server.sync_url(&doc, &token)).await;
            mallory.announce(client, 1, bad).await;
            let (code, reason) = mallory.wait_closed().await;
            assert_eq!(code, close::MALFORMED, "{bad}: {reason}");
            assert!(reason.contains("not a JSON object"), "{reason}");
        }
        ada.announce(42, 1, r#"{"user":"ada"}"#).await;
        // Nothing invalid reached anyone, then or later.
        let mut watcher = SyncClient::connect(&server.sync_url(&doc, &token)).await;
        assert!(watcher.until(|c| c.awareness.contains_key(&42)).await);
        assert_eq!(watcher.awareness.keys().copied().collect::<Vec<_>>(), vec![42]);
        assert!(ada.stays_open(Duration::from_millis(100)).await);
        assert!(ada.awareness.keys().all(|client| *client == 42), "{:?}", ada.awareness);
    }
}

/// A document with one paragraph, "kept", typed by `writer` and seen by
/// `peer`.
struct Scene {
    server: Server,
    token: String,
    doc: String,
    writer: SyncClient,
    peer: SyncClient,
}

impl Scene {
    async fn new(db: &crate::harness::TestDb) -> Scene {
        let server = Server::start(db).await;
        let token = Server::account(db, "ada").await;
        let doc = server.create_document(&token, "Plan").await;
        let mut writer = SyncClient::connect(&server.sync_url(&doc, &token)).await;
        let mut peer = SyncClient::connect(&server.sync_url(&doc, &token)).await;
        writer.append_paragraph("kept").await;
        assert!(peer.until(|c| c.block_count() == 1).await);
        Scene {
            server,
            token,
            doc,
            writer,
            peer,
        }
    }
}

/// The server's resident memory, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

on_both_backends! {
    // yrs holds an update whose dependencies are missing until they come;
    // a client that never sends them grew the server by what it sent.
    async fn updates_waiting_for_changes_never_sent_are_bounded_and_their_sender_closed(db) {
        use yrs::{GetString, Text};
        let Scene { server, token, doc, mut writer, mut peer } = Scene::new(&db).await;
        let before = rss_kib(server.pid());
        let hostile = yrs::Doc::with_client_id(777);
        let text = hostile.get_or_insert_text("t");
        let mut sent = 0usize;
        for round in 0..4 {
            let mut mallory = SyncClient::connect(&server.sync_url(&doc, &token)).await;
            // The change every later one depends on, never sent.
            text.insert(&mut hostile.transact_mut(), 0, "never sent");
            let mut seen = hostile.transact().state_vector();
            for _ in 0..20 {
                text.insert(&mut hostile.transact_mut(), 0, &"x".repeat(1 << 20));
                let update = hostile.transact().encode_diff_v1(&seen);
                seen = hostile.transact().state_vector();
                sent += update.len();
                mallory.send(Message::Sync(SyncMessage::Update(update))).await;
            }
            let (code, reason) = mallory.wait_closed().await;
            assert_eq!(code, close::BAD_UPDATE, "round {round}: {reason}");
            assert!(reason.contains("never sent"), "{reason}");
        }
        assert!(text.get_string(&hostile.transact()).len() > 80 << 20);
        // The others carry on, and nothing of it was stored.
        writer.append_paragraph("after").await;
        assert!(peer.until(|c| c.block_count() == 2).await);
        let (revision, _) = server.block_texts(&token, &doc).await;
        assert_eq!(revision, 2);
        let grown = rss_kib(server.pid()).saturating_sub(before);
        eprintln!("sent {} MiB of updates that wait; the server grew {} MiB", sent >> 20, grown >> 10);
        assert!(grown < 64 << 10, "the server grew {} MiB for {} MiB sent", grown >> 10, sent >> 20);
    }

}

/// An update that makes yrs panic in a debug build (the integration tests
/// run one): a client id past 2^53, found by `cargo fuzz run
/// document_update` (server/fuzz/regressions/document_update).
const PANICKING_UPDATE: [u8; 85] = [
    0x01, 0x02, 0xd2, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x0f, 0x00, 0xc4, 0xe9, 0x07,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x0b, 0xe9, 0x07, 0x0c, 0x04, 0x74, 0x68, 0x65, 0x20, 0x68, 0x69, 0x63, 0x70, 0x20, 0x72,
    0x65, 0x67, 0x69, 0x6f, 0x6e, 0x20, 0x66, 0x69, 0x72, 0x73, 0x74, 0x3f, 0x22, 0x2c, 0x22, 0x73,
    0x74, 0x61, 0x74, 0x65, 0x22, 0x3a, 0x22, 0x6f, 0x70, 0x65, 0x6e, 0x22, 0x7d, 0x01, 0xe9, 0x07,
    0x02, 0x02, 0x07, 0x20, 0x17,
];

on_both_backends! {
    async fn an_update_yrs_would_panic_on_is_refused_and_closes_only_its_sender(db) {
        let Scene { server, token, doc, mut writer, mut peer } = Scene::new(&db).await;
        let mut mallory = SyncClient::connect(&server.sync_url(&doc, &token)).await;
        mallory.send(Message::Sync(SyncMessage::Update(PANICKING_UPDATE.to_vec()))).await;
        let (code, reason) = mallory.wait_closed().await;
        assert_eq!(code, close::BAD_UPDATE, "{reason}");
        assert_eq!(reason, "update refused: the number at byte 2 is too large");
        // The document and everyone else carry on.
        assert!(writer.stays_open(Duration::from_millis(100)).await);
        writer.append_paragraph("after").await;
        assert!(peer.until(|c| c.block_count() == 2).await);
        let late = SyncClient::connect(&server.sync_url(&doc, &token)).await;
        assert_eq!(late.texts(), vec!["kept".to_owned(), "after".to_owned()]);
        assert_eq!(server.block_texts(&token, &doc).await.0, 2);
    }
}

/// Every update `cargo fuzz run document_update` found to panic yrs
/// (server/fuzz/regressions/document_update, each after the target's
/// selector byte; the `uaf-*` ones are memory errors under
/// AddressSanitizer, not panics).
const FUZZ_PANICS: [(&str, &[u8]); 5] = [
    (
        "debug-assert-client-id",
        include_bytes!("../../fuzz/regressions/document_update/debug-assert-client-id-957eddd4"),
    ),
    (
        "panic-apply-block-store-push",
        include_bytes!(
            "../../fuzz/regressions/document_update/panic-apply-block-store-push-37c37fbb"
        ),
    ),
    (
        "panic-apply-find-index",
        include_bytes!("../../fuzz/regressions/document_update/panic-apply-find-index-571549b3"),
    ),
    (
        "panic-encode-diff",
        include_bytes!("../../fuzz/regressions/document_update/panic-encode-diff-5b3bca98"),
    ),
    (
        "panic-merge-pending",
        include_bytes!("../../fuzz/regressions/document_update/panic-merge-pending-1ca9b7fd"),
    ),
];

on_both_backends! {
    async fn updates_the_fuzzer_found_to_panic_yrs_leave_the_document_serving(db) {
        let server = Server::start(&db).await;
        let token = Server::account(&db, "ada").await;
        for (name, update) in FUZZ_PANICS {
            let doc = server.create_document(&token, name).await;
            let mut writer = SyncClient::connect(&server.sync_url(&doc, &token)).await;
            let mut mallory = SyncClient::connect(&server.sync_url(&doc, &token)).await;
            writer.append_paragraph("kept").await;
            assert!(mallory.until(|c| c.block_count() == 1).await, "{name}");
            mallory.send(Message::Sync(SyncMessage::Update(update[1..].to_vec()))).await;
            // The validator refuses it before yrs sees it (A3a), naming the
            // invariant it breaks.
            let (code, reason) = mallory.wait_closed().await;
            assert_eq!(code, close::BAD_UPDATE, "{name}: {reason}");
            assert!(reason.starts_with("update refused: "), "{name}: {reason}");
            assert!(writer.stays_open(Duration::from_millis(50)).await, "{name}: only the sender is closed");
            // A joiner gets what was committed, and nothing of the refused
            // update, and edits on.
            let mut late = tokio::time::timeout(
                Duration::from_secs(10),
                SyncClient::connect(&server.sync_url(&doc, &token)),
            )
            .await
            .unwrap_or_else(|_| panic!("{name}: a joiner got no document"));
            assert_eq!(late.texts(), writer.texts(), "{name}");
            assert_eq!(late.texts(), ["kept".to_owned()], "{name}");
            late.append_paragraph("after").await;
            let mut check = SyncClient::connect(&server.sync_url(&doc, &token)).await;
            assert!(check.until(|c| c.texts().contains(&"after".to_owned())).await, "{name}: the edit after was lost");
        }
        assert_eq!(server.get(None, "/healthz").await.0, 200);
    }
}

/// Updates after which yrs encodes a state it cannot load again
/// (server/fuzz/regressions/document_update/state-*).
const FUZZ_UNLOADABLE: [(&str, &[u8]); 2] = [
    (
        "state-not-utf8",
        include_bytes!("../../fuzz/regressions/document_update/state-not-utf8-cbf9e0c3"),
    ),
    (
        "state-empty-block",
        include_bytes!("../../fuzz/regressions/document_update/state-empty-block-59be9a35"),
    ),
];

on_both_backends! {
    async fn an_update_whose_change_would_not_load_again_is_refused_and_the_document_still_loads(db) {
        let mut server = Server::start(&db).await;
        let token = Server::account(&db, "ada").await;
        let mut docs = Vec::new();
        for (name, update) in FUZZ_UNLOADABLE {
            let doc = server.create_document(&token, name).await;
            // On an empty document too, the fuzzer's own case.
            let empty = server.create_document(&token, name).await;
            let mut mallory = SyncClient::connect(&server.sync_url(&empty, &token)).await;
            mallory.send(Message::Sync(SyncMessage::Update(update[1..].to_vec()))).await;
            let (code, reason) = mallory.wait_closed().await;
            assert_eq!(code, close::BAD_UPDATE, "{name} on an empty document: {reason}");
            docs.push((name, empty, None));
            let mut writer = SyncClient::connect(&server.sync_url(&doc, &token)).await;
            let mut mallory = SyncClient::connect(&server.sync_url(&doc, &token)).await;
            writer.append_paragraph("kept").await;
            assert!(mallory.until(|c| c.block_count() == 1).await, "{name}");
            mallory.send(Message::Sync(SyncMessage::Update(update[1..].to_vec()))).await;
            let (code, reason) = mallory.wait_closed().await;
            assert_eq!(code, close::BAD_UPDATE, "{name}: {reason}");
            docs.push((name, doc, Some("kept")));
        }
        server.restart().await;
        for (name, doc, kept) in docs {
            let (status, body) = server.get(Some(&token), &format!("/documents/{doc}/outline")).await;
            assert_eq!(status, 200, "{name}: the document no longer loads: {body}");
            let late = SyncClient::connect(&server.sync_url(&doc, &token)).await;
            let kept: Vec<String> = kept.into_iter().map(str::to_owned).collect();
            assert_eq!(late.texts(), kept, "{name}: nothing of the refused update");
        }
    }
}
