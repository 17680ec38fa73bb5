//! Fencing (SPEC W3): one server per database, and a stale owner of a
//! document writes nothing — its appends and compactions are refused, never
//! merged.

use std::time::Duration;

use margin_protocol::sync::close;
use margin_server::storage::{Epoch, StorageError, StoredState};
use tokio::process::Command;

use crate::harness::{InProcess, Server, SyncClient};
use crate::on_both_backends;

on_both_backends! {
    async fn a_second_server_on_the_same_database_is_refused_naming_the_first(db) {
        let mut first = Server::start(&db).await;
        let second = tokio::time::timeout(
            Duration::from_secs(30),
            Command::new(env!("CARGO_BIN_EXE_margin"))
                .arg("serve")
                .args(db.cli_args())
                .args(["--listen", "127.0.0.1:0"])
                .env("RUST_LOG", "off")
                .kill_on_drop(true)
                .output(),
        )
        .await
        .expect("the second server did not stop within 30 s: it was not refused")
        .unwrap();
        let stderr = String::from_utf8_lossy(&second.stderr);
        assert!(!second.status.success(), "the second server started: {stderr}");
        assert!(stderr.contains("another margin server is using"), "{stderr}");
        assert!(stderr.contains(&format!("pid {}", first.pid())), "the holder is not named: {stderr}");
        assert!(!String::from_utf8_lossy(&second.stdout).contains("listening"));
        // The first still serves; once it is gone (even by SIGKILL), the
        // claim dies with it and a new server starts.
        assert_eq!(first.get(None, "/healthz").await.0, 200);
        first.kill().await;
        let next = Server::start(&db).await;
        assert_eq!(next.get(None, "/healthz").await.0, 200);
    }

    async fn a_stale_owners_appends_and_compactions_are_refused_and_write_nothing(db) {
        let store = db.open().await;
        let ada = store.create_account("ada").await.unwrap();
        let doc = store.create_document(&ada, "Plan").await.unwrap();
        let stale = store.claim_document(&doc.id).await.unwrap();
        store.append_updates(&doc.id, stale, 0, &[vec![1], vec![2]]).await.unwrap();
        let owner = store.claim_document(&doc.id).await.unwrap();
        assert_eq!(owner, Epoch(stale.0 + 1));
        let refused = store.append_updates(&doc.id, stale, 2, &[vec![9]]).await;
        assert!(
            matches!(refused, Err(StorageError::OwnerMoved { expected, found }) if expected == stale.0 && found == owner.0),
            "{refused:?}"
        );
        let refused = store.compact(&doc.id, stale, 2, b"stale snapshot").await;
        assert!(matches!(refused, Err(StorageError::OwnerMoved { .. })), "{refused:?}");
        // Nothing of either landed: no row, no snapshot, no deleted log.
        assert_eq!(
            store.load_state(&doc.id, None).await.unwrap(),
            StoredState { revision: 2, snapshot: None, updates: vec![vec![1], vec![2]], clients: vec![] }
        );
        // The owner writes on.
        assert_eq!(store.append_updates(&doc.id, owner, 2, &[vec![3]]).await.unwrap(), 3);
        store.compact(&doc.id, owner, 3, b"snapshot").await.unwrap();
        assert_eq!(store.log_len(&doc.id).await.unwrap(), 0);
    }

    async fn an_edit_to_a_copy_another_owner_claimed_is_refused_and_its_clients_resync(db) {
        let server = InProcess::start(&db).await;
        let (_, token) = server.account("ada").await;
        let doc = server.create_document(&token, "Plan").await;
        let mut writer = SyncClient::connect(&server.sync_url(&doc, &token)).await;
        let mut reader = SyncClient::connect(&server.sync_url(&doc, &token)).await;
        writer.append_paragraph("kept").await;
        assert!(reader.until(|c| c.block_count() == 1).await);
        // Another owner takes the document (as a second server would).
        let store = db.open().await;
        store.claim_document(&doc).await.unwrap();
        writer.append_paragraph("refused").await;
        let (code, reason) = writer.wait_closed().await;
        assert_eq!(code, close::GOING_AWAY, "{reason}");
        assert!(reason.contains("moved"), "{reason}");
        let (code, _) = reader.wait_closed().await;
        assert_eq!(code, close::GOING_AWAY);
        // The refused edit was neither committed nor broadcast.
        assert_eq!(reader.texts(), vec!["kept".to_owned()]);
        assert_eq!(store.load_state(&doc, None).await.unwrap().revision, 1);
        // A client that reconnects gets the document from a fresh owner.
        let again = SyncClient::connect(&server.sync_url(&doc, &token)).await;
        assert_eq!(again.texts(), vec!["kept".to_owned()]);
    }
}
