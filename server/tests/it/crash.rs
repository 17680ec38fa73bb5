//! Durability across `kill -9` (SPEC S3, W2): once any client has seen an
//! update broadcast, it is committed.

use crate::harness::{Server, SyncClient};
use crate::on_both_backends;

on_both_backends! {
    async fn broadcast_update_survives_sigkill(db) {
        let mut server = Server::start(&db).await;
        let token = Server::account(&db, "ada").await;
        let doc = server.create_document(&token, "Plan").await;
        let mut writer = SyncClient::connect(&server.sync_url(&doc, &token)).await;
        let mut reader = SyncClient::connect(&server.sync_url(&doc, &token)).await;
        for i in 0..20 {
            writer.append_paragraph(&format!("line {i}")).await;
        }
        assert!(reader.until(|c| c.texts().len() == 20).await);
        let seen = reader.texts();
        server.kill().await;
        server.restart().await;
        let after = SyncClient::connect(&server.sync_url(&doc, &token)).await;
        assert_eq!(after.texts(), seen);
        assert_eq!(after.state_vector(), reader.state_vector());
    }

    async fn compaction_keeps_content_and_shrinks_the_log(db) {
        let mut server = Server::start(&db).await;
        let token = Server::account(&db, "ada").await;
        let doc = server.create_document(&token, "Plan").await;
        let mut writer = SyncClient::connect(&server.sync_url(&doc, &token)).await;
        for i in 0..5 {
            writer.append_paragraph(&format!("line {i}")).await;
        }
        let mut reader = SyncClient::connect(&server.sync_url(&doc, &token)).await;
        assert!(reader.until(|c| c.texts().len() == 5).await);
        let expected = reader.texts();
        // Closing the last connection unloads the document, which compacts.
        writer.close().await;
        reader.close().await;
        let store = db.open().await;
        let mut log_len = store.log_len(&doc).await.unwrap();
        for _ in 0..200 {
            if log_len == 0 { break; }
            tokio::time::sleep(std::time::Duration::from_millis(25)).await;
            log_len = store.log_len(&doc).await.unwrap();
        }
        assert_eq!(log_len, 0);
        server.kill().await;
        server.restart().await;
        let after = SyncClient::connect(&server.sync_url(&doc, &token)).await;
        assert_eq!(after.texts(), expected);
        assert_eq!(server.block_texts(&token, &doc).await.0, 5);
    }
}
