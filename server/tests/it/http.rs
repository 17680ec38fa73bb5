//! The HTTP API: documents, members, outlines and their errors (SPEC S4, A1, A2).

use serde_json::json;

use crate::harness::{Server, SyncClient};
use crate::on_both_backends;

on_both_backends! {
    async fn on_sigterm_readyz_says_503_at_once_while_the_server_serves_out_its_drain(db) {
        let mut server = Server::start_limited(&db, None, &["--drain-seconds", "2"]).await;
        assert_eq!(server.get(None, "/readyz").await.0, 200);
        let signalled = std::time::Instant::now();
        server.signal_term().await;
        // New connections are still accepted: a balancer checking with a
        // fresh connection each time sees 503, never a refusal (SPEC C4, O1).
        let mut draining = None;
        for _ in 0..200 {
            let (status, body) = server.get(None, "/readyz").await;
            if status == 503 {
                draining = Some(body);
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        let body = draining.expect("/readyz never said 503 after SIGTERM");
        assert_eq!(body["error"]["code"], "unavailable", "{body}");
        assert!(body["error"]["message"].as_str().unwrap().contains("draining"), "{body}");
        assert_eq!(server.get(None, "/healthz").await.0, 200, "it still serves");
        server.exits_cleanly().await;
        assert!(signalled.elapsed() >= std::time::Duration::from_secs(2), "it served out its drain period");
    }

    async fn a_sigterm_sent_as_soon_as_the_server_says_it_listens_is_a_clean_stop(db) {
        // The demo Planner starts after the address is printed, so a
        // SIGTERM sent at once lands while the server is still busy
        // starting: it must be heard, not kill the process (SPEC C4, O1).
        let mut server = Server::start_limited(&db, None, &["--demo-planner", "--drain-seconds", "0"]).await;
        server.signal_term().await;
        server.exits_cleanly().await;
    }

    async fn documents_are_created_listed_and_shown_to_members_only(db) {
        let server = Server::start(&db).await;
        let ada = Server::account(&db, "ada").await;
        let bo = Server::account(&db, "bo").await;
        let (status, created) = server.post(Some(&ada), "/documents", json!({"title": "  Launch plan "})).await;
        assert_eq!(status, 201);
        let id = created["id"].as_str().unwrap().to_owned();
        assert!(created["created_at"].is_i64(), "{created}");
        assert_eq!(created, json!({"id": id, "title": "Launch plan", "revision": 0, "role": "owner", "archived": false,
            "created_at": created["created_at"], "edited_at": null, "edited_by": null}));
        assert_eq!(server.get(Some(&ada), "/documents").await, (200, json!({"documents": [created.clone()]})));
        assert_eq!(server.get(Some(&ada), &format!("/documents/{id}")).await, (200, created));
        // Another account neither sees it listed nor learns that it exists.
        assert_eq!(server.get(Some(&bo), "/documents").await, (200, json!({"documents": []})));
        let (status, body) = server.get(Some(&bo), &format!("/documents/{id}")).await;
        assert_eq!((status, body["error"]["code"].as_str()), (404, Some("document_not_found")));
        let (status, _) = server.get(Some(&bo), "/documents/00000000-0000-0000-0000-000000000000").await;
        assert_eq!(status, 404);
        assert_eq!(server.get(Some(&bo), "/me").await, (200, json!({"account": "bo"})));
    }

    async fn owner_adds_members_and_others_cannot(db) {
        let server = Server::start(&db).await;
        let ada = Server::account(&db, "ada").await;
        let bo = Server::account(&db, "bo").await;
        Server::account(&db, "cy").await;
        let id = server.create_document(&ada, "Plan").await;
        let members = format!("/documents/{id}/members");
        assert_eq!(
            server.post(Some(&ada), &members, json!({"account": "bo", "role": "editor"})).await,
            (200, json!({"account": "bo", "role": "editor"}))
        );
        let (_, shown) = server.get(Some(&bo), &format!("/documents/{id}")).await;
        assert_eq!(shown["role"], "editor");
        let (status, body) = server.post(Some(&bo), &members, json!({"account": "cy", "role": "viewer"})).await;
        assert_eq!((status, body["error"]["code"].as_str()), (403, Some("forbidden")));
        let (status, body) = server.post(Some(&ada), &members, json!({"account": "nobody", "role": "viewer"})).await;
        assert_eq!((status, body["error"]["code"].as_str()), (400, Some("unknown_account")));
        let (status, body) = server.post(Some(&ada), &members, json!({"account": "bo", "role": "admin"})).await;
        assert_eq!((status, body["error"]["code"].as_str()), (400, Some("invalid_body")));
        let (status, _) = server.post(Some(&ada), &members, json!({"account": "bo", "role": "owner"})).await;
        assert_eq!(status, 409);
        let (status, _) = server.post(Some(&ada), &members, json!({"account": "ada", "role": "viewer"})).await;
        assert_eq!(status, 409);
    }

    async fn bad_requests_get_specific_errors_and_change_nothing(db) {
        let server = Server::start(&db).await;
        let ada = Server::account(&db, "ada").await;
        for (body, code) in [
            (json!({"title": ""}), "invalid_title"),
            (json!({"title": "   "}), "invalid_title"),
            (json!({"title": "x".repeat(201)}), "invalid_title"),
            (json!({"title": "a\u{7}b"}), "invalid_title"),
            (json!({"title": "ok", "extra": 1}), "invalid_body"),
            (json!({"name": "ok"}), "invalid_body"),
        ] {
            let (status, error) = server.post(Some(&ada), "/documents", body.clone()).await;
            assert_eq!((status, error["error"]["code"].as_str()), (400, Some(code)), "{body}");
            assert!(!error["error"]["message"].as_str().unwrap().is_empty());
        }
        // A 200-byte title of multi-byte characters is at the limit.
        let (status, _) = server.post(Some(&ada), "/documents", json!({"title": "é".repeat(100)})).await;
        assert_eq!(status, 201);
        let (status, list) = server.get(Some(&ada), "/documents").await;
        assert_eq!((status, list["documents"].as_array().unwrap().len()), (200, 1));
    }

    async fn missing_or_unknown_tokens_are_unauthenticated(db) {
        let server = Server::start(&db).await;
        Server::account(&db, "ada").await;
        for token in [None, Some("mgn_0000"), Some("not-a-token")] {
            let (status, body) = server.get(token, "/documents").await;
            assert_eq!((status, body["error"]["code"].as_str()), (401, Some("unauthenticated")), "{token:?}");
        }
        // Query tokens are for the sync socket only, which browsers cannot
        // give headers; elsewhere they would end up in logs.
        let token = Server::account(&db, "bo").await;
        let (status, _) = server.get(None, &format!("/documents?token={token}")).await;
        assert_eq!(status, 401);
    }

    async fn a_second_token_works_and_tokens_are_stored_hashed(db) {
        let server = Server::start(&db).await;
        let first = Server::account(&db, "ada").await;
        let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_margin"))
            .args(["token", "add", "ada"])
            .args(db.cli_args())
            .output()
            .await
            .unwrap();
        assert!(output.status.success());
        let second = String::from_utf8(output.stdout).unwrap().lines().last().unwrap().to_owned();
        assert_ne!(first, second);
        assert_eq!(server.get(Some(&second), "/me").await, (200, json!({"account": "ada"})));
        let store = db.open().await;
        assert!(store.account_by_token(&first).await.is_err(), "a plain token must not be a stored key");
        assert!(store.account_by_token(&margin_server::auth::hash_token(&first)).await.is_ok());
    }

    async fn outline_lists_blocks_and_reads_past_revisions(db) {
        let server = Server::start(&db).await;
        let ada = Server::account(&db, "ada").await;
        let id = server.create_document(&ada, "Plan").await;
        let mut client = SyncClient::connect(&server.sync_url(&id, &ada)).await;
        client.append_paragraph("Ship   the beta").await;
        client.append_paragraph("Ship the beta").await;
        let mut check = SyncClient::connect(&server.sync_url(&id, &ada)).await;
        assert!(check.until(|c| c.texts().len() == 2).await);
        let (status, outline) = server.get(Some(&ada), &format!("/documents/{id}/outline")).await;
        assert_eq!(status, 200);
        assert_eq!(outline["revision"], 2);
        let blocks = outline["blocks"].as_array().unwrap();
        assert_eq!(blocks.len(), 2);
        assert_eq!(blocks[0]["text"], "Ship the beta");
        assert_eq!(blocks[0]["kind"], "paragraph");
        // Twins: same digest, different identities.
        assert_eq!(blocks[0]["digest"], blocks[1]["digest"]);
        assert_ne!(blocks[0]["identity"], blocks[1]["identity"]);
        let (status, past) = server.get(Some(&ada), &format!("/documents/{id}/outline?revision=1")).await;
        assert_eq!((status, past["revision"].clone(), past["blocks"].as_array().unwrap().len()), (200, json!(1), 1));
        let (status, body) = server.get(Some(&ada), &format!("/documents/{id}/outline?revision=9")).await;
        assert_eq!((status, body["error"]["code"].as_str()), (404, Some("revision_not_found")));
        let (status, body) = server.get(Some(&ada), &format!("/documents/{id}/outline?revision=x")).await;
        assert_eq!((status, body["error"]["code"].as_str()), (400, Some("invalid_query")));
    }

    async fn unknown_routes_and_health(db) {
        let server = Server::start(&db).await;
        assert_eq!(server.get(None, "/healthz").await, (200, json!({"status": "ok"})));
        let (status, body) = server.get(None, "/nope").await;
        assert_eq!((status, body["error"]["code"].as_str()), (404, Some("route_not_found")));
    }
}

on_both_backends! {
    // serde takes `["x"]` for a struct of one field.
    async fn a_body_that_is_not_a_json_object_is_refused_and_creates_nothing(db) {
        let server = Server::start(&db).await;
        let ada = Server::account(&db, "ada").await;
        for body in [json!(["x"]), json!("x"), json!(7)] {
            let (status, refused) = server.post(Some(&ada), "/documents", body.clone()).await;
            assert_eq!((status, refused["error"]["code"].as_str()), (400, Some("invalid_body")), "{body}: {refused}");
            assert!(refused["error"]["message"].as_str().unwrap().contains("must be a JSON object"), "{refused}");
        }
        assert_eq!(server.get(Some(&ada), "/documents").await, (200, json!({"documents": []})));
        // Valid JSON of the wrong shape says what is wrong with it.
        let (status, refused) = server.post(Some(&ada), "/documents", json!({})).await;
        assert_eq!(status, 400);
        let message = refused["error"]["message"].as_str().unwrap();
        assert!(message.contains("does not fit") && message.contains("title"), "{message}");
    }
}
