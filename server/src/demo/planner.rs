//! The demo Planner's turn (SPEC O1): it reads the plan, opens a decision
//! card for every block that asks a question or is marked `TBD`, keeps a
//! checklist as its plan, reports a run, and replies. Scripted: no model.

use margin_protocol::decisions::{CardInput, OpenDecisionsInput, PassageAddress};
use margin_protocol::documents::BlockEntry;
use margin_protocol::link::RunStatus;
use margin_protocol::sessions::{PlanStep, UpdatePlanInput};
use margin_sdk::{Handler, ToolError, Turn};
use tracing::warn;

/// Most cards one `open_decisions` batch may hold.
const MAX_BATCH: usize = 32;

/// Longest question a card may hold, in bytes.
const MAX_QUESTION_BYTES: usize = 500;

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
