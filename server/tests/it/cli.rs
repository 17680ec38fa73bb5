//! The command line as an operator meets it (SPEC O2): what it lists and
//! revokes, with `--json` for scripts; every error printed once, naming
//! what failed; arguments checked before the port opens; one `MARGIN_`
//! prefix for every environment variable — on both backends where storage
//! is involved.

use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::process::Command;

use crate::harness::{InProcess, LinkClient, Server, TestDb};
use crate::on_both_backends;

const BIN: &str = env!("CARGO_BIN_EXE_margin");

/// What a `margin` command printed, and whether it succeeded.
struct Ran {
    ok: bool,
    stdout: String,
    stderr: String,
}

async fn margin(args: &[&str], db: Option<&TestDb>, env: &[(&str, &str)]) -> Ran {
    let mut command = Command::new(BIN);
    // A server that should have refused to start is not left running.
    command
        .args(args)
        .env("RUST_LOG", "warn")
        .kill_on_drop(true);
    if let Some(db) = db {
        command.args(db.cli_args());
    }
    for (key, value) in env {
        command.env(key, value);
    }
    let output = tokio::time::timeout(Duration::from_secs(30), command.output())
        .await
        .expect("margin finished within 30 s")
        .unwrap();
    Ran {
        ok: output.status.success(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

fn json(ran: &Ran) -> Value {
    assert!(ran.ok, "failed: {}", ran.stderr);
    serde_json::from_str(&ran.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", ran.stdout))
}

/// The lines of stderr that are not blank.
fn said(ran: &Ran) -> Vec<&str> {
    ran.stderr
        .lines()
        .filter(|l| !l.trim().is_empty())
        .collect()
}

#[tokio::test]
async fn an_unreachable_database_fails_within_seconds_naming_where_and_why_once() {
    let started = Instant::now();
    let ran = margin(
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--database-url",
            "postgres://nobody:secret@127.0.0.1:1/x",
        ],
        None,
        &[],
    )
    .await;
    assert!(!ran.ok);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
    let lines = said(&ran);
    assert_eq!(lines.len(), 1, "one line: {lines:?}");
    let line = lines[0];
    assert!(
        line.starts_with("margin: cannot reach the database at PostgreSQL nobody@127.0.0.1:1/x: "),
        "{line}"
    );
    assert!(line.to_lowercase().contains("refused"), "the cause: {line}");
    assert!(
        !line.contains("secret"),
        "the password is never shown: {line}"
    );
    assert!(!ran.stdout.contains("listening"), "nothing listened");
}

#[tokio::test]
async fn json_logs_are_one_object_a_line_with_the_ids_as_fields() {
    use tokio::io::{AsyncBufReadExt, BufReader};
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_str().unwrap();
    let mut child = Command::new(BIN)
        .args([
            "--log-format",
            "json",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--data",
            data,
        ])
        .env("RUST_LOG", "info")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let line = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            let line = lines.next_line().await.unwrap().expect("a log line");
            if line.contains("listening") {
                return line;
            }
        }
    })
    .await
    .expect("the server logged that it listens");
    let entry: Value =
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not one JSON object ({e}): {line}"));
    assert_eq!(
        (entry["level"].as_str(), entry["fields"]["message"].as_str()),
        (Some("INFO"), Some("listening"))
    );
    let addr = entry["fields"]["addr"].as_str().unwrap().to_owned();
    assert!(addr.starts_with("127.0.0.1:"), "{entry}");
    assert!(
        entry["timestamp"].is_string() && entry["target"].is_string(),
        "{entry}"
    );

    // A request's lines carry its span: method and path, never the query
    // where a browser's stream carries its token.
    let made = margin(&["account", "add", "ada", "--data", data], None, &[]).await;
    let token = made.stdout.lines().last().unwrap().trim().to_owned();
    let http = reqwest::Client::new();
    let created: Value = http
        .post(format!("http://{addr}/documents"))
        .bearer_auth(&token)
        .json(&serde_json::json!({"title": "Plan"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let feed = http
        .get(format!(
            "http://{addr}/documents/{}/events?token={token}",
            created["id"].as_str().unwrap()
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(feed.status(), 200);
    drop(feed);
    let created_line = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let line = lines.next_line().await.unwrap().expect("a log line");
            assert!(!line.contains(&token), "a token in the logs: {line}");
            if line.contains("document created") {
                return line;
            }
        }
    })
    .await
    .expect("the server logged the new document");
    let entry: Value = serde_json::from_str(&created_line).unwrap();
    assert_eq!(entry["fields"]["document"], created["id"], "{entry}");
    assert_eq!(
        (
            entry["span"]["name"].as_str(),
            entry["span"]["method"].as_str(),
            entry["span"]["path"].as_str()
        ),
        (Some("request"), Some("POST"), Some("/documents")),
        "{entry}"
    );
    child.kill().await.unwrap();
}

#[tokio::test]
async fn serve_checks_the_demo_account_name_before_it_listens() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_str().unwrap();
    let ran = margin(
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--data",
            data,
            "--demo-planner",
            "bad name!",
        ],
        None,
        &[],
    )
    .await;
    assert!(!ran.ok);
    assert!(
        !ran.stdout.contains("listening"),
        "it never listened: {}",
        ran.stdout
    );
    assert_eq!(said(&ran).len(), 1, "{:?}", said(&ran));
    assert!(
        said(&ran)[0]
            .starts_with("margin: invalid account name for --demo-planner \"bad name!\": "),
        "{:?}",
        said(&ran)
    );
}

#[tokio::test]
async fn serve_refuses_a_trusted_proxy_that_is_not_a_cidr_naming_the_flag_and_the_value() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_str().unwrap();
    let serve = ["serve", "--listen", "127.0.0.1:0", "--data", data];
    let flag = margin(
        &[&serve[..], &["--trusted-proxy", "127.0.0.1/32,10.0.0.0/33"]].concat(),
        None,
        &[],
    )
    .await;
    let env = margin(&serve, None, &[("MARGIN_TRUSTED_PROXY", "10.0.0.1/8")]).await;
    for (ran, value, why) in [
        (
            &flag,
            "10.0.0.0/33",
            "\"33\" is not a prefix length from 0 to 32",
        ),
        (
            &env,
            "10.0.0.1/8",
            "10.0.0.1/8 has bits set past its prefix; the block is 10.0.0.0/8",
        ),
    ] {
        assert!(!ran.ok, "{value} was refused");
        assert!(!ran.stdout.contains("listening"), "{}", ran.stdout);
        let first = said(ran)[0];
        assert_eq!(
            first,
            format!("error: invalid value '{value}' for '--trusted-proxy <CIDR>': {why}"),
            "{:?}",
            said(ran)
        );
    }
    let help = margin(&["serve", "--help"], None, &[]).await;
    assert!(
        help.stdout.contains("--trusted-proxy <CIDR>")
            && help.stdout.contains("env: MARGIN_TRUSTED_PROXY"),
        "{}",
        help.stdout
    );
}

#[tokio::test]
async fn old_environment_names_are_read_with_a_warning_naming_the_new_one() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_str().unwrap();
    // `--help` reads the environment as serve would, and exits at once.
    let help = margin(&["serve", "--help"], None, &[]).await;
    for name in [
        "MARGIN_PLANNER_IDLE_MS",
        "MARGIN_PLANNER_ATTACH_GRACE_MS",
        "MARGIN_SESSION_EVENTS_RETAINED",
        "MARGIN_LISTEN",
        "MARGIN_DATABASE_URL",
    ] {
        assert!(
            help.stdout.contains(&format!("env: {name}")),
            "{name} in --help"
        );
    }
    let ran = margin(
        &["account", "add", "ada", "--data", data],
        None,
        &[("PLANNER_IDLE_MS", "1000")],
    )
    .await;
    assert!(ran.ok, "{}", ran.stderr);
    assert_eq!(
        said(&ran),
        ["margin: warning: PLANNER_IDLE_MS is deprecated; set MARGIN_PLANNER_IDLE_MS instead (read this time)"]
    );
}

on_both_backends! {
    async fn token_add_names_the_account_it_did_not_find(db) {
        let ran = margin(&["token", "add", "nobody"], Some(&db), &[]).await;
        assert!(!ran.ok);
        assert_eq!(said(&ran), ["margin: no account named \"nobody\""]);
    }

    async fn accounts_tokens_and_machines_are_listed_and_revoked_from_the_command_line(db) {
        let server = Server::start(&db).await;
        let ada = Server::account(&db, "ada").await;
        Server::account(&db, "bo").await;
        let accounts = json(&margin(&["account", "list", "--json"], Some(&db), &[]).await);
        let names: Vec<&str> = accounts.as_array().unwrap().iter().map(|a| a["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["ada", "bo"]);
        assert!(accounts[0]["created_at"].as_i64().unwrap() > 0);
        let plain = margin(&["account", "list"], Some(&db), &[]).await;
        assert!(plain.ok && plain.stdout.lines().any(|l| l.starts_with("ada")), "{}", plain.stdout);

        // A second token; listing shows both without revealing either.
        let added = margin(&["token", "add", "ada"], Some(&db), &[]).await;
        let second = added.stdout.lines().last().unwrap().trim().to_owned();
        let tokens = json(&margin(&["token", "list", "ada", "--json"], Some(&db), &[]).await);
        assert_eq!(tokens.as_array().unwrap().len(), 2);
        assert!(!tokens.to_string().contains(&second) && !tokens.to_string().contains(&ada), "no token is shown");
        let newest = tokens[1]["id"].as_str().unwrap().to_owned();
        let revoked = margin(&["token", "revoke", "ada", &newest], Some(&db), &[]).await;
        assert!(revoked.ok, "{}", revoked.stderr);
        assert_eq!(server.get(Some(&second), "/me").await.0, 401, "the revoked token signs nobody in");
        assert_eq!(server.get(Some(&ada), "/me").await.0, 200, "the other still does");
        let missing = margin(&["token", "revoke", "ada", "0000000000"], Some(&db), &[]).await;
        assert_eq!(said(&missing), ["margin: ada has no token 0000000000 (see `margin token list ada`)"]);

        // A machine, listed and revoked.
        let paired = margin(&["machine", "pair", "ada", "laptop"], Some(&db), &[]).await;
        assert!(paired.ok, "{}", paired.stderr);
        let machines = json(&margin(&["machine", "list", "ada", "--json"], Some(&db), &[]).await);
        assert_eq!((machines[0]["name"].as_str(), machines[0]["revoked"].as_bool()), (Some("laptop"), Some(false)));
        let id = machines[0]["id"].as_str().unwrap().to_owned();
        let gone = margin(&["machine", "revoke", "ada", &id], Some(&db), &[]).await;
        assert!(gone.ok, "{}", gone.stderr);
        let machines = json(&margin(&["machine", "list", "ada", "--json"], Some(&db), &[]).await);
        assert_eq!(machines[0]["revoked"].as_bool(), Some(true));
        let unknown = margin(&["machine", "revoke", "ada", "no-such-machine"], Some(&db), &[]).await;
        assert_eq!(said(&unknown), ["margin: ada has no machine no-such-machine (see `margin machine list ada`)"]);
    }

    async fn a_machine_revoked_from_the_command_line_loses_its_open_link_at_its_next_renewal(db) {
        // Renewals every 300 ms, so the test need not wait five minutes.
        let server = InProcess::start_with(&db, |o| o.links.credential_ttl = Duration::from_millis(900)).await;
        let (_, ada) = server.account("ada").await;
        let (status, paired) = server.post(Some(&ada), "/machines", serde_json::json!({"name": "laptop"})).await;
        assert_eq!(status, 201);
        let mut link = LinkClient::connect(server.addr, paired["credential"]["secret"].as_str().or(paired["credential"].as_str()).unwrap()).await.unwrap();
        link.hello().await;
        let id = paired["machine"]["id"].as_str().unwrap();
        let revoked = margin(&["machine", "revoke", "ada", id], Some(&db), &[]).await;
        assert!(revoked.ok, "{}", revoked.stderr);
        let (code, reason) = tokio::time::timeout(Duration::from_secs(5), link.wait_closed())
            .await
            .expect("the link closed within a few renewals");
        assert_eq!(code, margin_protocol::link::close::REVOKED, "{reason}");
    }
}
