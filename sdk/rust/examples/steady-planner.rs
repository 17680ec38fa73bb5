//! The steady planner: the small Planner every connector SDK ships for the
//! cross-SDK proxy tests (SPEC L10). It serves resumably until SIGTERM or
//! SIGINT, then detaches and exits 0.
//!
//! ```sh
//! MARGIN_SERVER=http://127.0.0.1:7070 \
//! MARGIN_CREDENTIAL_FILE=laptop.credential \
//! MARGIN_HELD_FILE=laptop.sessions.json \
//! MARGIN_SILENCE_MS=2000 \
//! cargo run -p margin-sdk --example steady-planner
//! ```
//!
//! It prints `linked` each time a link is welcomed, and `turn <session>
//! <turn>` as each turn starts. Each turn reports run `review` running,
//! reads the document, opens one yes/no card `steady-<turn>` on the first
//! block, reports the run completed and replies `Reviewed <turn>: <N>
//! blocks.`

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use margin_protocol::decisions::{CardInput, OpenDecisionsInput, PassageAddress};
use margin_protocol::link::RunStatus;
use margin_sdk::{Connector, Ended, Handler, ToolError, Turn};

struct Steady;

impl Handler for Steady {
    async fn turn(&self, turn: Turn) -> Result<String, ToolError> {
        say(&format!("turn {} {}", turn.session.id(), turn.id));
        let session = &turn.session;
        session
            .run_attempt("review", 1, "Review", RunStatus::Running)
            .await?;
        let read = turn.read_document().await?;
        if let Some(first) = read.outline.first() {
            let card = CardInput {
                key: format!("steady-{}", turn.id),
                question: format!("Ship {}?", turn.id),
                description: None,
                response: "yes_no".into(),
                choices: Vec::new(),
                passages: vec![PassageAddress {
                    index: first.index,
                    digest: first.digest.clone(),
                }],
            };
            let input = OpenDecisionsInput {
                revision: read.revision,
                cards: vec![card],
            };
            turn.open_decisions(&input).await?;
        }
        session
            .run_attempt("review", 1, "Review", RunStatus::Completed)
            .await?;
        Ok(format!(
            "Reviewed {}: {} blocks.",
            turn.id,
            read.outline.len()
        ))
    }
}

/// One line on stdout, flushed at once: the tests read it as it comes.
fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

fn var(name: &str) -> Result<String, String> {
    std::env::var(name).map_err(|_| format!("set {name}"))
}

/// SIGTERM or SIGINT.
async fn shutdown() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .init();
    let settings = (|| {
        let server = var("MARGIN_SERVER")?;
        let credential = var("MARGIN_CREDENTIAL_FILE")?;
        let held = var("MARGIN_HELD_FILE")?;
        let silence = match std::env::var("MARGIN_SILENCE_MS") {
            Ok(ms) => Some(
                ms.trim()
                    .parse::<u64>()
                    .map_err(|e| format!("MARGIN_SILENCE_MS {ms:?}: {e}"))?,
            ),
            Err(_) => None,
        };
        Ok::<_, String>((server, credential, held, silence))
    })();
    let (server, credential, held, silence) = match settings {
        Ok(settings) => settings,
        Err(why) => {
            eprintln!("steady-planner: {why}");
            return ExitCode::from(2);
        }
    };
    let mut connector = Connector::with_credential_file(server, credential)
        .held_file(held)
        .on_link(|_| say("linked"));
    if let Some(ms) = silence {
        connector = connector.silence_timeout(Duration::from_millis(ms));
    }
    match connector.run(Steady, shutdown()).await {
        Ended::Detached => ExitCode::SUCCESS,
        ended => {
            eprintln!("steady-planner: the link ended for good: {ended}");
            ExitCode::FAILURE
        }
    }
}
