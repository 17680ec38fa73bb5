//! The demo Planner: a scripted Planner on the connector SDK that does real
//! work with no model, so a newcomer can watch a Planner at work.
//!
//! Each turn reports a run, reads the document, opens a decision card beside
//! every open question it finds — a block ending in `?`, or marked `TBD` —
//! and replies with what it did. Keys come from the block's digest, so a
//! second turn over the same text replays its cards instead of adding twins
//! (SPEC D2, D3). `margin serve --demo-planner` pairs it and links it over a
//! real socket; `margin planner demo` runs it against any server.

use std::path::{Path, PathBuf};
use std::time::Duration;

use margin_protocol::decisions::{EditInput, EditPlanInput, PassageAddress};
use margin_sdk::{write_credential_file, Connector, Ended};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::auth;
use crate::serve::Running;
use crate::storage::{Account, StorageError};
use crate::tools::{ToolError as ServerToolError, Tools};

mod planner;

pub use planner::{open_questions, DemoPlanner};

/// How long `--demo-planner` waits for its first link.
const FIRST_LINK: Duration = Duration::from_secs(10);
/// The name the demo's machine is paired under.
pub const MACHINE_NAME: &str = "demo-planner";

/// Keeps `connector` linked, serving the demo Planner, until `shutdown`:
/// the SDK links again after every drop and resumes, each time with the
/// connector's current credential — the newest one the link sent, re-read
/// from its credential file if it has one (SPEC L8). `first` hears when the
/// first link is welcomed.
pub async fn keep_linked(
    connector: Connector,
    shutdown: CancellationToken,
    first: Option<oneshot::Sender<()>>,
) {
    let first = std::sync::Mutex::new(first);
    let connector = connector.on_link(move |welcome| {
        info!(machine = %welcome.machine, "demo Planner linked");
        if let Some(first) = first.lock().ok().and_then(|mut f| f.take()) {
            let _ = first.send(());
        }
    });
    let ended = connector.run(DemoPlanner, shutdown.cancelled_owned()).await;
    if ended != Ended::Detached {
        warn!(%ended, "the demo Planner stopped linking");
    }
}

/// Why the demo could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// Storage failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// A token or credential could not be issued.
    #[error(transparent)]
    Issue(#[from] auth::IssueError),
    /// The account name is not valid.
    #[error("invalid account name: {0}")]
    AccountName(String),
    /// The demo Planner did not link in time.
    #[error("the demo Planner did not link within {0:?}; see the log")]
    NotLinked(Duration),
    /// The sample document could not be written.
    #[error("cannot write the sample document: {0}")]
    Sample(String),
    /// The demo's files could not be kept.
    #[error("cannot keep the demo Planner's files at {0:?}: {1}")]
    Files(PathBuf, std::io::Error),
}

/// What `--demo-planner` set up.
pub struct Demo {
    /// The account the demo Planner works for.
    pub account: Account,
    /// A fresh bearer token for that account, to open the editor with.
    pub token: String,
    /// The sample document, when one was created.
    pub document: Option<String>,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Demo {
    /// Links the demo Planner for `account` (created if missing) on a
    /// running server, over a real socket. It keeps one machine: the first
    /// start pairs it; a later start links the same machine again — with
    /// the credential kept in `data` (mode 0600, renewed over the link as
    /// any machine's), or a fresh one for it when that expired while the
    /// server was down — and resumes the sessions it held, which it keeps
    /// in `data` too (SPEC L3, L8, W2).
    pub async fn start(running: &Running, account: &str, data: &Path) -> Result<Demo, DemoError> {
        auth::valid_account_name(account).map_err(DemoError::AccountName)?;
        let store = running.hub.store();
        let account = match store.account_by_name(account).await {
            Ok(found) => found,
            Err(StorageError::NotFound(_)) => store.create_account(account).await?,
            Err(e) => return Err(e.into()),
        };
        let token = auth::issue_token(store, &account).await?;
        std::fs::create_dir_all(data).map_err(|e| DemoError::Files(data.to_owned(), e))?;
        let files = DemoFiles::in_folder(data, &account.name);
        let credential = machine_credential(running, &account, &files).await?;
        write_credential_file(&files.credential, &credential)
            .map_err(|e| DemoError::Files(files.credential.clone(), e))?;
        let document = if store.documents_of(&account).await?.is_empty() {
            Some(sample_document(running, &account).await?)
        } else {
            None
        };
        let shutdown = CancellationToken::new();
        let connector =
            Connector::with_credential_file(format!("http://{}", running.addr), &files.credential)
                .held_file(&files.held)
                .planning(true);
        let (linked, first_link) = oneshot::channel();
        let task = tokio::spawn(keep_linked(connector, shutdown.clone(), Some(linked)));
        // Say it is linked only once it is.
        if tokio::time::timeout(FIRST_LINK, first_link).await.is_err() {
            shutdown.cancel();
            let _ = task.await;
            return Err(DemoError::NotLinked(FIRST_LINK));
        }
        Ok(Demo {
            account,
            token,
            document,
            shutdown,
            task,
        })
    }

    /// Detaches the demo Planner.
    pub async fn stop(self) {
        self.shutdown.cancel();
        let _ = self.task.await;
    }
}

/// Where the demo keeps what a machine keeps: its credential and the
/// sessions it holds.
struct DemoFiles {
    credential: PathBuf,
    held: PathBuf,
}

impl DemoFiles {
    fn in_folder(data: &Path, account: &str) -> Self {
        DemoFiles {
            credential: data.join(format!("demo-planner-{account}.credential")),
            held: data.join(format!("demo-planner-{account}.sessions.json")),
        }
    }
}

/// A credential of the demo's machine: the one kept in its file while it
/// still opens links, else a fresh one for the same machine. With no
/// machine yet (or only revoked ones), a new one is paired, and what the
/// files held for an earlier machine goes.
async fn machine_credential(
    running: &Running,
    account: &Account,
    files: &DemoFiles,
) -> Result<String, DemoError> {
    let store = running.hub.store();
    let ttl = running.credential_ttl;
    let mut ours = store
        .machines_of(account)
        .await?
        .into_iter()
        .filter(|m| m.name == MACHINE_NAME && !m.revoked);
    // Newest first: one machine serves the demo; older ones are revoked.
    let machine = ours.next();
    for older in ours {
        store.revoke_machine(account, &older.id).await?;
    }
    let Some(machine) = machine else {
        let _ = std::fs::remove_file(&files.held);
        let (_, issued) = auth::pair_machine(store, account, MACHINE_NAME, ttl).await?;
        return Ok(issued.secret);
    };
    if let Ok(kept) = std::fs::read_to_string(&files.credential) {
        let kept = kept.trim().to_owned();
        if matches!(auth::authenticate_machine(store, &kept, ttl).await, Ok(m) if m.id == machine.id)
        {
            return Ok(kept);
        }
    }
    Ok(auth::renew_machine_credential(store, &machine, ttl)
        .await?
        .secret)
}

/// A short plan with two questions and a TBD, for the demo to find.
const SAMPLE: [(&str, &str); 6] = [
    ("heading", "Beta launch"),
    ("paragraph", "We open the beta to our first twenty teams in March."),
    ("paragraph", "Which region do we launch in first?"),
    ("paragraph", "Pricing for the team plan: TBD."),
    ("paragraph", "Should the beta be invite-only?"),
    ("paragraph", "Support runs through the shared inbox; type @planner in Chat to have the Planner review this plan."),
];

async fn sample_document(running: &Running, account: &Account) -> Result<String, DemoError> {
    let store = running.hub.store();
    let document = store.create_document(account, "Beta launch (demo)").await?;
    let tools = Tools::new(running.hub.clone());
    let failed = |e: ServerToolError| DemoError::Sample(format!("{e:?}"));
    let mut read = tools
        .read_document(account, &document.id)
        .await
        .map_err(failed)?
        .decode()
        .map_err(|e| DemoError::Sample(e.to_string()))?;
    for (kind, text) in SAMPLE {
        let after = read.outline.last().map(|block| PassageAddress {
            index: block.index,
            digest: block.digest.clone(),
        });
        let edited = tools
            .edit_plan(
                account,
                &document.id,
                EditPlanInput {
                    revision: read.revision,
                    edits: vec![EditInput::Insert {
                        after,
                        kind: kind.into(),
                        level: (kind == "heading").then_some(1),
                        text: text.into(),
                    }],
                },
                &account.name,
                None,
            )
            .await
            .map_err(failed)?;
        read.revision = edited.revision;
        read.outline = edited.outline;
    }
    Ok(document.id)
}
