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

use margin_protocol::decisions::{
    CardInput, EditInput, EditPlanInput, OpenDecisionsInput, PassageAddress,
};
use margin_protocol::documents::BlockEntry;
use margin_protocol::link::RunStatus;
use margin_protocol::sessions::{PlanStep, UpdatePlanInput};
use margin_sdk::{write_credential_file, Connector, Ended, Handler, ToolError, Turn};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::auth;
use crate::serve::Running;
use crate::storage::{Account, StorageError};
use crate::tools::{ToolError as ServerToolError, Tools};

/// Most cards one `open_decisions` batch may hold.
const MAX_BATCH: usize = 32;
/// Longest question a card may hold, in bytes.
const MAX_QUESTION_BYTES: usize = 500;
/// How long `--demo-planner` waits for its first link.
const FIRST_LINK: Duration = Duration::from_secs(10);
/// The name the demo's machine is paired under.
pub const MACHINE_NAME: &str = "demo-planner";

/// The demo Planner.
#[derive(Clone, Copy, Debug, Default)]
pub struct DemoPlanner;

impl Handler for DemoPlanner {
    async fn turn(&self, turn: Turn) -> Result<String, ToolError> {
        let run = format!("review-{}", turn.id);
        let name = "Review the plan for open questions";
        let mut plan = Checklist::new(&turn);
        plan.mark(&turn, Progress::Reading).await?;
        turn.run(&run, name, RunStatus::Running).await?;
        let read = turn.read_document().await?;
        let cards = open_questions(&read.outline);
        if cards.is_empty() {
            turn.run(&run, name, RunStatus::Completed).await?;
            plan.mark(&turn, Progress::Done { asked: 0 }).await?;
            return Ok(
                "I read the plan and found no open questions: nothing ends in a question mark or is marked TBD."
                    .to_owned(),
            );
        }
        plan.mark(&turn, Progress::Capturing).await?;
        let found = cards.len();
        let opened = turn
            .open_decisions(&OpenDecisionsInput {
                revision: read.revision,
                cards,
            })
            .await;
        let status = match &opened {
            Ok(_) => RunStatus::Completed,
            Err(_) => RunStatus::Failed,
        };
        turn.run(&run, name, status).await?;
        let opened = opened?;
        plan.mark(&turn, Progress::Done { asked: found }).await?;
        Ok(format!(
            "I read the plan and found {found} open question{}: {}.",
            if found == 1 { "" } else { "s" },
            opened.summary
        ))
    }
}

/// Where a turn of the demo is, as its plan shows it.
#[derive(Clone, Copy, Debug)]
enum Progress {
    Reading,
    Capturing,
    Done { asked: usize },
}

/// The demo's durable plan (SPEC U1–U3): three steps it marks as it goes.
/// Progress reporting only; people see it in the editor's Plan panel. A
/// refused update is logged and ends the checklist for the turn: the
/// plan is never the work.
struct Checklist {
    /// The revision the next update expects.
    revision: u64,
    /// Whether updates still go out this turn.
    on: bool,
}

impl Checklist {
    fn new(turn: &Turn) -> Self {
        Checklist {
            revision: turn.plan.as_ref().map_or(0, |plan| plan.revision),
            on: true,
        }
    }

    /// Replaces the plan with the steps as of `progress`.
    async fn mark(&mut self, turn: &Turn, progress: Progress) -> Result<(), ToolError> {
        use margin_protocol::sessions::StepStatus::{Completed, InProgress, Pending};
        if !self.on {
            return Ok(());
        }
        let (read, capture, answers) = match progress {
            Progress::Reading => (InProgress, Pending, Pending),
            Progress::Capturing => (Completed, InProgress, Pending),
            Progress::Done { asked: 0 } => (Completed, Completed, Completed),
            Progress::Done { .. } => (Completed, Completed, Pending),
        };
        let update = UpdatePlanInput {
            expected_revision: self.revision,
            explanation: Some("Reviewing the plan for open questions".into()),
            steps: vec![
                step("read", "Read the plan", read),
                step("capture", "Open a decision for each open question", capture),
                // No count here: people answer after the turn, so a count
                // would go stale; the editor shows the cards' own states.
                step(
                    "answers",
                    "People answer the decisions beside their paragraphs",
                    answers,
                ),
            ],
        };
        match turn.update_plan(&update).await {
            Ok(output) => self.revision = output.plan.revision,
            Err(ToolError::Refused(refusal)) => {
                warn!(code = %refusal.code, message = %refusal.message, "the demo's plan was not updated");
                self.on = false;
            }
            Err(other) => return Err(other),
        }
        Ok(())
    }
}

fn step(id: &str, description: &str, status: margin_protocol::sessions::StepStatus) -> PlanStep {
    PlanStep {
        id: id.into(),
        description: description.into(),
        status,
    }
}

/// A card for every block that asks or is marked `TBD`, in document order
/// (at most one batch).
pub fn open_questions(outline: &[BlockEntry]) -> Vec<CardInput> {
    outline
        .iter()
        .filter_map(|block| {
            let text = block.text.trim();
            let asks = text.ends_with('?') || text.ends_with('？');
            let tbd = text
                .split(|c: char| !c.is_alphanumeric())
                .any(|word| word == "TBD");
            if !asks && !tbd {
                return None;
            }
            let question = if asks {
                one_line(text)
            } else {
                one_line(&format!("Decide what is still TBD: {text}"))
            };
            let response = if asks && is_yes_no(text) {
                "yes_no"
            } else {
                "free_text"
            };
            Some(CardInput {
                key: format!(
                    "open-question-{}",
                    &block.digest[..block.digest.len().min(16)]
                ),
                question,
                description: None,
                response: response.into(),
                choices: Vec::new(),
                passages: vec![PassageAddress {
                    index: block.index,
                    digest: block.digest.clone(),
                }],
            })
        })
        .take(MAX_BATCH)
        .collect()
}

/// Questions that open with an auxiliary verb are answered yes or no.
fn is_yes_no(question: &str) -> bool {
    const OPENERS: [&str; 12] = [
        "should", "shall", "do", "does", "did", "is", "are", "can", "could", "will", "would",
        "must",
    ];
    question
        .split_whitespace()
        .next()
        .is_some_and(|first| OPENERS.contains(&first.to_lowercase().as_str()))
}

/// `text` on one line, cut at a character boundary to fit a card.
fn one_line(text: &str) -> String {
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.len() <= MAX_QUESTION_BYTES {
        return line;
    }
    let mut end = MAX_QUESTION_BYTES - '…'.len_utf8();
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &line[..end])
}

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

#[cfg(test)]
mod tests {
    use super::*;

    fn block(index: usize, text: &str) -> BlockEntry {
        BlockEntry {
            index,
            kind: "paragraph".into(),
            text: text.into(),
            digest: format!("{index:064x}"),
            identity: format!("1:{index}"),
        }
    }

    #[test]
    fn questions_and_tbd_blocks_become_cards_at_their_block() {
        let outline = [
            block(0, "We launch in March."),
            block(1, "Which region first?"),
            block(2, "Pricing: TBD."),
            block(3, "Should the beta be invite-only?"),
            block(4, "The TBDs list is elsewhere."),
        ];
        let cards = open_questions(&outline);
        let got: Vec<_> = cards
            .iter()
            .map(|c| {
                (
                    c.passages[0].index,
                    c.question.as_str(),
                    c.response.as_str(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                (1, "Which region first?", "free_text"),
                (2, "Decide what is still TBD: Pricing: TBD.", "free_text"),
                (3, "Should the beta be invite-only?", "yes_no"),
            ]
        );
        assert_eq!(
            cards[0].key,
            format!("open-question-{}", &outline[1].digest[..16])
        );
    }

    #[test]
    fn a_long_question_is_cut_to_fit_a_card_on_a_character_boundary() {
        let long = format!("{}?", "é".repeat(400));
        let cards = open_questions(&[block(0, &long)]);
        assert!(cards[0].question.len() <= MAX_QUESTION_BYTES);
        assert!(cards[0].question.ends_with('…'));
    }

    #[test]
    fn at_most_one_batch_of_cards_is_opened() {
        let outline: Vec<_> = (0..40).map(|i| block(i, "Why?")).collect();
        assert_eq!(open_questions(&outline).len(), MAX_BATCH);
    }
}
