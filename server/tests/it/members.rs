//! Sharing a document (SPEC A1, B1a): who may read the member list,
//! changing a member's role, removing a member, and what either does to the
//! member's open sync sockets — on both backends.

use std::time::Duration;

use margin_protocol::sync::close;
use serde_json::json;

use crate::harness::{InProcess, SyncClient};
use crate::on_both_backends;

/// A document ada owns, shared with bo (editor) and cy (viewer); eve is a
/// stranger to it.
struct Scene {
    server: InProcess,
    ada: String,
    bo: String,
    cy: String,
    eve: String,
    doc: String,
}

impl Scene {
    async fn new(db: &crate::harness::TestDb) -> Scene {
        let server = InProcess::start(db).await;
        let (_, ada) = server.account("ada").await;
        let (_, bo) = server.account("bo").await;
        let (_, cy) = server.account("cy").await;
        let (_, eve) = server.account("eve").await;
        let doc = server.create_document(&ada, "Plan").await;
        let s = Scene {
            server,
            ada,
            bo,
            cy,
            eve,
            doc,
        };
        // Added out of name order: the list sorts them.
        assert_eq!(s.share("cy", "viewer").await.0, 200);
        assert_eq!(s.share("bo", "editor").await.0, 200);
        s
    }

    fn path(&self, rest: &str) -> String {
        format!("/documents/{}{rest}", self.doc)
    }

    /// ada gives `account` `role`.
    async fn share(&self, account: &str, role: &str) -> (u16, serde_json::Value) {
        self.server
            .post(
                Some(&self.ada),
                &self.path("/members"),
                json!({"account": account, "role": role}),
            )
            .await
    }

    async fn members(&self, token: &str) -> (u16, serde_json::Value) {
        self.server.get(Some(token), &self.path("/members")).await
    }

    async fn remove(&self, token: &str, account: &str) -> (u16, serde_json::Value) {
        self.server
            .delete(Some(token), &self.path(&format!("/members/{account}")))
            .await
    }

    fn sync_url(&self, token: &str) -> String {
        self.server.sync_url(&self.doc, token)
    }

    /// The document's revision, as ada sees it.
    async fn revision(&self) -> i64 {
        self.server.block_texts(&self.ada, &self.doc).await.0
    }
}

fn code(body: &serde_json::Value) -> Option<&str> {
    body["error"]["code"].as_str()
}

fn everyone() -> serde_json::Value {
    json!({"members": [
        {"account": "ada", "role": "owner"},
        {"account": "bo", "role": "editor"},
        {"account": "cy", "role": "viewer"},
    ]})
}

on_both_backends! {
    async fn every_member_reads_the_member_list_owner_first_and_strangers_learn_nothing(db) {
        let s = Scene::new(&db).await;
        for token in [&s.ada, &s.bo, &s.cy] {
            assert_eq!(s.members(token).await, (200, everyone()));
        }
        let (status, body) = s.members(&s.eve).await;
        assert_eq!((status, code(&body)), (404, Some("document_not_found")), "{body}");
        let (status, body) = s
            .server
            .get(Some(&s.ada), "/documents/00000000-0000-0000-0000-000000000000/members")
            .await;
        assert_eq!((status, code(&body)), (404, Some("document_not_found")), "{body}");
        let (status, _) = s.server.get(None, &s.path("/members")).await;
        assert_eq!(status, 401);
    }

    async fn the_owner_changes_a_members_role(db) {
        let s = Scene::new(&db).await;
        assert_eq!(s.share("bo", "viewer").await, (200, json!({"account": "bo", "role": "viewer"})));
        assert_eq!(s.share("cy", "editor").await, (200, json!({"account": "cy", "role": "editor"})));
        let (_, shown) = s.server.get(Some(&s.bo), &s.path("")).await;
        assert_eq!(shown["role"], "viewer");
        assert_eq!(
            s.members(&s.cy).await,
            (200, json!({"members": [
                {"account": "ada", "role": "owner"},
                {"account": "bo", "role": "viewer"},
                {"account": "cy", "role": "editor"},
            ]}))
        );
        // The new role is what the member may do: bo's edit is refused.
        let (status, body) = s.server.post(Some(&s.bo), &s.path("/chat"), json!({"text": "hi"})).await;
        assert_eq!((status, code(&body)), (403, Some("forbidden")), "{body}");
        let (status, _) = s.server.post(Some(&s.cy), &s.path("/chat"), json!({"text": "hi"})).await;
        assert_eq!(status, 201);
    }

    async fn the_owner_removes_a_member_who_then_loses_the_document(db) {
        let s = Scene::new(&db).await;
        assert_eq!(s.remove(&s.ada, "bo").await, (204, serde_json::Value::Null));
        let (status, body) = s.server.get(Some(&s.bo), &s.path("")).await;
        assert_eq!((status, code(&body)), (404, Some("document_not_found")), "{body}");
        assert_eq!(s.server.get(Some(&s.bo), "/documents").await, (200, json!({"documents": []})));
        let (status, body) = s.members(&s.bo).await;
        assert_eq!((status, code(&body)), (404, Some("document_not_found")), "{body}");
        assert_eq!(
            s.members(&s.ada).await,
            (200, json!({"members": [{"account": "ada", "role": "owner"}, {"account": "cy", "role": "viewer"}]}))
        );
        // Gone is gone: a second removal finds no member.
        let (status, body) = s.remove(&s.ada, "bo").await;
        assert_eq!((status, code(&body)), (404, Some("member_not_found")), "{body}");
        // And the owner can share it again.
        assert_eq!(s.share("bo", "viewer").await.0, 200);
        let (_, shown) = s.server.get(Some(&s.bo), &s.path("")).await;
        assert_eq!(shown["role"], "viewer");
    }

    async fn a_removal_the_rules_refuse_changes_nothing(db) {
        let s = Scene::new(&db).await;
        let (status, body) = s.remove(&s.ada, "ada").await;
        assert_eq!((status, code(&body)), (409, Some("conflict")), "{body}");
        assert!(body["error"]["message"].as_str().unwrap().contains("owner"), "{body}");
        for account in ["eve", "nobody", &"x".repeat(65), "not%20a%20name"] {
            let (status, body) = s.remove(&s.ada, account).await;
            assert_eq!((status, code(&body)), (404, Some("member_not_found")), "{account}: {body}");
            assert!(!body["error"]["message"].as_str().unwrap().is_empty());
        }
        for (token, account) in [(&s.bo, "cy"), (&s.cy, "bo"), (&s.bo, "ada"), (&s.bo, "bo")] {
            let (status, body) = s.remove(token, account).await;
            assert_eq!((status, code(&body)), (403, Some("forbidden")), "{account}: {body}");
        }
        let (status, body) = s.remove(&s.eve, "bo").await;
        assert_eq!((status, code(&body)), (404, Some("document_not_found")), "{body}");
        assert_eq!(s.members(&s.ada).await, (200, everyone()));
    }

    async fn a_removed_members_open_sockets_close_for_good_and_nobody_elses_do(db) {
        let s = Scene::new(&db).await;
        let other = s.server.create_document(&s.ada, "Other").await;
        let (status, _) = s
            .server
            .post(Some(&s.ada), &format!("/documents/{other}/members"), json!({"account": "bo", "role": "editor"}))
            .await;
        assert_eq!(status, 200);
        let mut bo = SyncClient::connect(&s.sync_url(&s.bo)).await;
        let mut bo_again = SyncClient::connect(&s.sync_url(&s.bo)).await;
        let mut bo_elsewhere = SyncClient::connect(&s.server.sync_url(&other, &s.bo)).await;
        let mut ada = SyncClient::connect(&s.sync_url(&s.ada)).await;
        let mut cy = SyncClient::connect(&s.sync_url(&s.cy)).await;
        assert_eq!(s.remove(&s.ada, "bo").await.0, 204);
        for client in [&mut bo, &mut bo_again] {
            let (code, reason) = client.wait_closed().await;
            assert_eq!(code, close::REMOVED, "{reason}");
            assert!(reason.contains("no longer a member"), "{reason}");
        }
        for client in [&mut ada, &mut cy, &mut bo_elsewhere] {
            assert!(client.stays_open(Duration::from_millis(300)).await, "{:?}", client.closed);
        }
        // The document carries on for those still in it.
        ada.append_paragraph("Still here").await;
        assert!(cy.until(|c| c.texts() == ["Still here"]).await, "{:?}", cy.texts());
    }

    async fn a_members_sockets_reconnect_with_a_changed_role(db) {
        let s = Scene::new(&db).await;
        let mut bo = SyncClient::connect(&s.sync_url(&s.bo)).await;
        let mut cy = SyncClient::connect(&s.sync_url(&s.cy)).await;
        // The same role again changes nothing.
        assert_eq!(s.share("bo", "editor").await.0, 200);
        assert!(bo.stays_open(Duration::from_millis(300)).await, "{:?}", bo.closed);

        assert_eq!(s.share("bo", "viewer").await.0, 200);
        let (code, reason) = bo.wait_closed().await;
        assert_eq!(code, close::ACCESS_CHANGED, "{reason}");
        assert!(reason.contains("role"), "{reason}");
        // Reconnecting joins as a viewer: an edit is refused.
        let mut bo = SyncClient::connect(&s.sync_url(&s.bo)).await;
        bo.append_paragraph("Sneaky").await;
        let (code, reason) = bo.wait_closed().await;
        assert_eq!(code, close::READ_ONLY, "{reason}");
        assert_eq!(s.revision().await, 0);

        // A viewer made an editor reconnects and may edit.
        assert_eq!(s.share("cy", "editor").await.0, 200);
        assert_eq!(cy.wait_closed().await.0, close::ACCESS_CHANGED);
        let mut cy = SyncClient::connect(&s.sync_url(&s.cy)).await;
        cy.append_paragraph("Promoted").await;
        let mut ada = SyncClient::connect(&s.sync_url(&s.ada)).await;
        assert!(ada.until(|c| c.texts() == ["Promoted"]).await, "{:?}", ada.texts());
        assert!(cy.stays_open(Duration::from_millis(200)).await, "{:?}", cy.closed);
    }
}
