//! Failed sign-ins throttled, never a valid credential (SPEC A3, A3b): a
//! valid member token or machine credential signs in whatever its address
//! failed; failures are throttled per address and per credential, with
//! `Retry-After`; and the address is what a trusted proxy forwarded only
//! when the server was told to trust it (`--trusted-proxy`).

use margin_protocol::link::ServerMessage;
use serde_json::json;

use crate::harness::{LinkClient, Server};
use crate::on_both_backends;

/// How a sign-in was answered.
#[derive(Debug, PartialEq, Eq)]
struct Answer {
    status: u16,
    /// `Retry-After`, in seconds.
    retry_after: Option<u64>,
    /// The error body's code.
    code: Option<String>,
}

/// `GET /me` with `token` and the extra `headers`.
async fn sign_in(server: &Server, token: &str, headers: &[(&str, &str)]) -> Answer {
    let mut request = reqwest::Client::new()
        .get(server.url("/me"))
        .bearer_auth(token);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok());
    let body: serde_json::Value = response.json().await.unwrap_or_default();
    Answer {
        status,
        retry_after,
        code: body["error"]["code"].as_str().map(str::to_owned),
    }
}

/// Fails with new unknown tokens named `{stem}{n}` until one is answered
/// 429 (at most `patience` more after the first 20, which must all be
/// 401): returns that 429. The address earns one failure back a second,
/// so a slow machine may see a 401 or two past the burst.
async fn fail_until_throttled(
    server: &Server,
    stem: &str,
    headers: &[(&str, &str)],
    patience: usize,
) -> Answer {
    for n in 0..20 {
        let answer = sign_in(server, &format!("mgn_{stem}{n}"), headers).await;
        assert_eq!(answer.status, 401, "failure {n} of the burst: {answer:?}");
    }
    for n in 20..20 + patience {
        let answer = sign_in(server, &format!("mgn_{stem}{n}"), headers).await;
        match answer.status {
            429 => return answer,
            401 => continue,
            _ => panic!("failure {n}: {answer:?}"),
        }
    }
    panic!("no 429 within {patience} failures past the burst");
}

fn throttled(retry_after: u64) -> Answer {
    Answer {
        status: 429,
        retry_after: Some(retry_after),
        code: Some("too_many_attempts".into()),
    }
}

on_both_backends! {
    async fn a_valid_token_signs_in_through_a_stream_of_bad_ones_from_its_address(db) {
        let server = Server::start(&db).await;
        let token = Server::account(&db, "ada").await;
        let mut bad = Vec::new();
        for n in 0..40 {
            bad.push(sign_in(&server, &format!("mgn_guess{n}"), &[]).await.status);
            let good = sign_in(&server, &token, &[]).await;
            assert_eq!(good.status, 200, "the valid token after {} bad ones: {good:?}", n + 1);
        }
        assert_eq!(bad[..20], [401; 20]);
        assert!(bad[20..].contains(&429), "the bad ones were throttled past the burst: {bad:?}");
    }

    async fn bad_tokens_past_the_burst_are_answered_429_with_retry_after(db) {
        let server = Server::start(&db).await;
        let token = Server::account(&db, "ada").await;
        assert_eq!(fail_until_throttled(&server, "guess", &[], 10).await, throttled(1));
        // Throttled or not, the address's valid token signs in.
        assert_eq!(sign_in(&server, &token, &[]).await.status, 200);
        assert_eq!(sign_in(&server, "mgn_another", &[]).await.status, 429);
    }

    async fn one_stale_token_retried_is_throttled_alone_and_its_address_is_not(db) {
        let server = Server::start(&db).await;
        let token = Server::account(&db, "ada").await;
        let answers: Vec<u16> = {
            let mut answers = Vec::new();
            for _ in 0..5 {
                answers.push(sign_in(&server, "mgn_stale", &[]).await.status);
            }
            answers
        };
        assert_eq!(answers, [401; 5]);
        // One credential earns a failure back every 10 s.
        let sixth = sign_in(&server, "mgn_stale", &[]).await;
        assert_eq!(sixth.status, 429, "{sixth:?}");
        assert!(matches!(sixth.retry_after, Some(9 | 10)), "{sixth:?}");
        // Retrying it while throttled spends nothing of its address's ...
        for _ in 0..30 {
            assert_eq!(sign_in(&server, "mgn_stale", &[]).await.status, 429);
        }
        // ... so others failing from the same address are still told 401,
        // as many as the address has left, and a valid token signs in.
        for n in 0..15 {
            let other = sign_in(&server, &format!("mgn_other{n}"), &[]).await;
            assert_eq!(other.status, 401, "another bad token {n}: {other:?}");
        }
        assert_eq!(sign_in(&server, &token, &[]).await.status, 200);
    }

    async fn a_valid_machine_credential_links_through_a_stream_of_bad_ones_from_its_address(db) {
        let server = Server::start(&db).await;
        let token = Server::account(&db, "ada").await;
        let (status, paired) = server.post(Some(&token), "/machines", json!({"name": "laptop"})).await;
        assert_eq!(status, 201, "{paired}");
        let credential = paired["credential"].as_str().unwrap().to_owned();
        let mut bad = Vec::new();
        for n in 0..30 {
            let refused = LinkClient::refused(server.addr, &format!("mgm_guess{n}")).await;
            bad.push((refused.status, refused.code));
        }
        assert!(bad[..20].iter().all(|(status, _)| *status == 401), "{bad:?}");
        assert!(
            bad[20..].contains(&(429, "too_many_attempts".to_owned())),
            "the bad ones were throttled past the burst: {bad:?}"
        );
        let mut link = LinkClient::connect(server.addr, &credential)
            .await
            .unwrap_or_else(|status| panic!("the valid credential was refused with {status}"));
        assert!(matches!(link.hello().await, ServerMessage::Welcome { .. }));
        // So is the account's member token.
        assert_eq!(sign_in(&server, &token, &[]).await.status, 200);
    }

    async fn behind_a_trusted_proxy_x_forwarded_for_decides_the_throttled_address(db) {
        let server = Server::start_limited(&db, None, &["--trusted-proxy", "127.0.0.1/32"]).await;
        let token = Server::account(&db, "ada").await;
        let first = [("x-forwarded-for", "198.51.100.1")];
        assert_eq!(fail_until_throttled(&server, "first", &first, 10).await, throttled(1));
        // The proxy appends the address it served: what a client wrote
        // left of it is not believed.
        let spoofed = [("x-forwarded-for", "203.0.113.9, 198.51.100.1")];
        assert_eq!(sign_in(&server, "mgn_spoofed", &spoofed).await.status, 429);
        // Another forwarded client has its own bucket, by either header.
        let second = [("x-forwarded-for", "198.51.100.2")];
        assert_eq!(sign_in(&server, "mgn_second", &second).await.status, 401);
        let third = [("forwarded", "for=198.51.100.3;proto=http")];
        assert_eq!(sign_in(&server, "mgn_third", &third).await.status, 401);
        // A header that names no address is ignored: the proxy counts, and
        // the client is told 401, not an error of its header.
        let garbled = [("x-forwarded-for", "not an address")];
        assert_eq!(sign_in(&server, "mgn_garbled", &garbled).await.status, 401);
        // The throttled client's valid token signs in.
        assert_eq!(sign_in(&server, &token, &first).await.status, 200);
    }

    async fn without_a_trusted_proxy_x_forwarded_for_is_ignored(db) {
        let server = Server::start(&db).await;
        for n in 0..20 {
            let forwarded = format!("198.51.100.{n}");
            let answer = sign_in(&server, &format!("mgn_guess{n}"), &[("x-forwarded-for", &forwarded)]).await;
            assert_eq!(answer.status, 401, "failure {n}: {answer:?}");
        }
        // Every failure counted against the socket's address: a new
        // forwarded address, in either header, changes nothing.
        let mut answers = Vec::new();
        for n in 0..10 {
            let forwarded = format!("203.0.113.{n}");
            let headers = [("x-forwarded-for", forwarded.as_str()), ("forwarded", "for=192.0.2.1")];
            answers.push(sign_in(&server, &format!("mgn_fresh{n}"), &headers).await.status);
        }
        assert!(answers.contains(&429), "{answers:?}");
    }
}
