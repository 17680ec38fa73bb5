//! The mapping between an ACP agent's words and a Planner's (SPEC O4), as
//! pure functions: a turn's Chat lines → the prompt, the agent's plan →
//! `update_plan`'s steps, a tool call's status → a run's, a permission
//! request → a question card and its answer → the permission outcome, and
//! a `stopReason` → what the reply says of it. Each rule is one function
//! here, tested here; the bridge only carries their results.

use agent_client_protocol::v1::schema::{
    PermissionOption, PlanEntry, PlanEntryStatus, StopReason, ToolCallStatus,
};
use margin_protocol::chat::ChatMessageView;
use margin_protocol::decisions::{AnswerBody, CardInput, PassageAddress};
use margin_protocol::link::RunStatus;
use margin_protocol::sessions::{PlanStep, StepStatus};

use crate::held::Asked;

/// Longest step description `update_plan` takes, in bytes.
const MAX_STEP_BYTES: usize = 240;
/// Most steps a plan holds.
const MAX_STEPS: usize = 64;
/// Longest run name, in bytes.
const MAX_RUN_NAME_BYTES: usize = 200;
/// Longest run id, in bytes.
const MAX_RUN_ID_BYTES: usize = 128;
/// Longest card question, in bytes.
const MAX_QUESTION_BYTES: usize = 500;
/// Most choices a card offers.
const MAX_CHOICES: usize = 24;

/// The prompt for a turn: answers to permission requests the agent made
/// before it was restarted (`told`), then who wrote what, one line each,
/// in order, and for a repair turn the questions its last reply asked in
/// prose, told back so the agent opens them as decisions (SPEC T2).
pub fn prompt(messages: &[ChatMessageView], repair: &[String], told: &[Asked]) -> String {
    let mut prompt = String::new();
    for asked in told {
        let choice = asked
            .answer
            .as_ref()
            .and_then(|answer| chosen_index(answer, asked.options.len()))
            .and_then(|index| asked.options.get(index));
        let outcome = match choice {
            Some(name) => format!("people chose \"{name}\""),
            None if asked.options.is_empty() => "people answered its card".to_owned(),
            None => "people chose none of your options".to_owned(),
        };
        let action = match asked.action.trim() {
            "" => "a tool call",
            action => action,
        };
        prompt.push_str(&format!(
            "(Before a restart you asked permission to run {}; {outcome}.)\n",
            one_line(action)
        ));
    }
    for message in messages {
        prompt.push_str(&format!("{}: {}\n", message.author, message.text));
    }
    if !repair.is_empty() {
        prompt.push_str(
            "Your last reply asked these questions in prose, and people were not shown it. \
             Open each as a decision card with open_decisions (a stable key each), then reply \
             without asking:\n",
        );
        for question in repair {
            prompt.push_str(&format!("- {question}\n"));
        }
    }
    prompt
}

/// The agent's plan as `update_plan`'s steps: `step-1`… in its order, each
/// description cut to the bound, at most one step in progress (the first;
/// later ones read as pending), at most the plan's bound of steps.
pub fn steps(entries: &[PlanEntry]) -> Vec<PlanStep> {
    let mut in_progress = false;
    entries
        .iter()
        .filter(|entry| !entry.content.trim().is_empty())
        .take(MAX_STEPS)
        .enumerate()
        .map(|(index, entry)| {
            let status = match entry.status {
                PlanEntryStatus::Completed => StepStatus::Completed,
                PlanEntryStatus::InProgress if !in_progress => {
                    in_progress = true;
                    StepStatus::InProgress
                }
                _ => StepStatus::Pending,
            };
            PlanStep {
                id: format!("step-{}", index + 1),
                description: cut(entry.content.trim(), MAX_STEP_BYTES),
                status,
            }
        })
        .collect()
}

/// A tool call's status as its run's (SPEC R1): pending and in progress
/// are running.
pub fn run_status(status: ToolCallStatus) -> RunStatus {
    match status {
        ToolCallStatus::Completed => RunStatus::Completed,
        ToolCallStatus::Failed => RunStatus::Failed,
        _ => RunStatus::Running,
    }
}

/// A run's id and name for a tool call, within the link's bounds.
pub fn run(tool_call_id: &str, title: &str) -> (String, String) {
    let name = match title.trim() {
        "" => "tool call",
        title => title,
    };
    (
        cut(tool_call_id, MAX_RUN_ID_BYTES),
        cut(name, MAX_RUN_NAME_BYTES),
    )
}

/// The run that shows a permission request waiting on people: paused
/// while it waits (the agent's turn cannot go on), then completed.
pub fn waiting_run(tool_call_id: &str, title: Option<&str>) -> (String, String) {
    let action = title
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .unwrap_or("a tool call");
    run(
        &format!("permission-{tool_call_id}"),
        &format!("Waiting for your answer: may it run {}?", one_line(action)),
    )
}

/// The question card a permission request becomes (`ask`, SPEC H1): one
/// choice per option of the agent's, in its order, anchored to `passage`.
/// `None` when the agent offers fewer than two options (nothing to choose).
pub fn permission_card(
    tool_call_id: &str,
    title: Option<&str>,
    options: &[PermissionOption],
    passage: PassageAddress,
) -> Option<CardInput> {
    if options.len() < 2 {
        return None;
    }
    let action = match title.map(str::trim) {
        Some(title) if !title.is_empty() => title,
        _ => "a tool call",
    };
    let question = cut(
        &format!("The Planner asks to run {}: allow it?", one_line(action)),
        MAX_QUESTION_BYTES,
    );
    Some(CardInput {
        key: cut(&format!("permission-{tool_call_id}"), 128),
        question,
        description: Some(
            "The Planner's agent asked permission before going on; it waits for this answer."
                .into(),
        ),
        response: "single_choice".into(),
        choices: options
            .iter()
            .take(MAX_CHOICES)
            .map(|option| cut(&one_line(&option.name), 200))
            .collect(),
        passages: vec![passage],
    })
}

/// The option an answer to a permission card picked: the Planner's choice
/// `cN` is the agent's Nth option; any other answer (a choice people added,
/// words) picks none, and the request is answered as cancelled.
pub fn chosen<'a>(
    answer: &AnswerBody,
    options: &'a [PermissionOption],
) -> Option<&'a PermissionOption> {
    options.get(chosen_index(answer, options.len())?)
}

/// The index of the option `answer` picked among `count`.
fn chosen_index(answer: &AnswerBody, count: usize) -> Option<usize> {
    let AnswerBody::Choices(choices) = answer else {
        return None;
    };
    let [choice] = choices.as_slice() else {
        return None;
    };
    let number: usize = choice.strip_prefix('c')?.parse().ok()?;
    number.checked_sub(1).filter(|index| *index < count)
}

/// What a reply adds about how the agent's turn ended: nothing for the end
/// of its turn, else the reason in words, so the reply never hides that the
/// agent stopped short.
pub fn stop_note(reason: StopReason) -> Option<&'static str> {
    match reason {
        StopReason::EndTurn => None,
        StopReason::MaxTokens => Some("(The agent stopped: it reached its token limit.)"),
        StopReason::MaxTurnRequests => {
            Some("(The agent stopped: it reached its limit of requests for one turn.)")
        }
        StopReason::Refusal => Some("(The agent refused to go on.)"),
        StopReason::Cancelled => Some("(The agent's turn was cancelled.)"),
        _ => Some("(The agent stopped for a reason this bridge does not know.)"),
    }
}

/// The reply for a turn: the agent's words, with the note on how it ended.
pub fn reply(text: &str, reason: StopReason) -> String {
    let text = text.trim();
    match (stop_note(reason), text.is_empty()) {
        (None, false) => text.to_owned(),
        (None, true) => "(The agent ended its turn without a word.)".to_owned(),
        (Some(note), true) => note.to_owned(),
        (Some(note), false) => format!("{text}\n\n{note}"),
    }
}

/// The reply for a turn whose prompt failed: the agent's words so far,
/// and that it failed.
pub fn failed(text: &str, error: &str) -> String {
    let note = format!("(The agent failed this turn: {}.)", one_line(error));
    match text.trim() {
        "" => note,
        text => format!("{text}\n\n{note}"),
    }
}

/// `text` on one line.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `text` cut to at most `max` bytes at a character boundary.
fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_client_protocol::v1::schema::{PermissionOptionKind, PlanEntryPriority};
    use margin_protocol::chat::ChatKind;

    fn entry(content: &str, status: PlanEntryStatus) -> PlanEntry {
        PlanEntry::new(content, PlanEntryPriority::Medium, status)
    }

    fn options(names: &[&str]) -> Vec<PermissionOption> {
        names
            .iter()
            .enumerate()
            .map(|(i, name)| {
                PermissionOption::new(format!("opt-{i}"), *name, PermissionOptionKind::AllowOnce)
            })
            .collect()
    }

    #[test]
    fn a_turns_chat_lines_become_the_prompt_with_their_authors() {
        let line = |author: &str, text: &str| ChatMessageView {
            seq: 1,
            author: author.into(),
            kind: ChatKind::Member,
            text: text.into(),
            created_at: 0,
        };
        let prompt = prompt(
            &[line("ada", "@planner look"), line("bo", "and this")],
            &[],
            &[],
        );
        assert_eq!(prompt, "ada: @planner look\nbo: and this\n");
        let repair = super::prompt(&[], &["Which region?".into()], &[]);
        assert!(repair.contains("open_decisions") && repair.contains("- Which region?"));
    }

    #[test]
    fn an_answer_the_agent_was_owed_across_a_restart_opens_its_next_prompt() {
        let asked = |answer: AnswerBody| Asked {
            card: "card".into(),
            session: "m1".into(),
            action: "Deploy the draft".into(),
            options: vec!["Allow once".into(), "Reject".into()],
            answer: Some(answer),
            told: false,
        };
        let told = [
            asked(AnswerBody::Choices(vec!["c2".into()])),
            asked(AnswerBody::Text("later".into())),
        ];
        assert_eq!(
            prompt(&[], &[], &told),
            "(Before a restart you asked permission to run Deploy the draft; people chose \"Reject\".)\n\
             (Before a restart you asked permission to run Deploy the draft; people chose none of your options.)\n"
        );
    }

    #[test]
    fn an_agents_plan_becomes_steps_with_at_most_one_in_progress() {
        let long = "x".repeat(300);
        let steps = steps(&[
            entry("Read", PlanEntryStatus::Completed),
            entry("Ask", PlanEntryStatus::InProgress),
            entry("   ", PlanEntryStatus::Pending),
            entry(&long, PlanEntryStatus::InProgress),
        ]);
        let ids: Vec<_> = steps.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(ids, ["step-1", "step-2", "step-3"]);
        let statuses: Vec<_> = steps.iter().map(|s| s.status).collect();
        assert_eq!(
            statuses,
            [
                StepStatus::Completed,
                StepStatus::InProgress,
                StepStatus::Pending
            ]
        );
        assert_eq!(steps[2].description.len(), MAX_STEP_BYTES);
    }

    #[test]
    fn a_tool_calls_status_is_its_runs() {
        assert_eq!(run_status(ToolCallStatus::Pending), RunStatus::Running);
        assert_eq!(run_status(ToolCallStatus::InProgress), RunStatus::Running);
        assert_eq!(run_status(ToolCallStatus::Completed), RunStatus::Completed);
        assert_eq!(run_status(ToolCallStatus::Failed), RunStatus::Failed);
        assert_eq!(run("t1", "  "), ("t1".into(), "tool call".into()));
        assert_eq!(run(&"i".repeat(200), "x").0.len(), MAX_RUN_ID_BYTES);
    }

    #[test]
    fn a_permission_request_becomes_a_single_choice_card_over_its_options() {
        let passage = PassageAddress {
            index: 0,
            digest: "d".into(),
        };
        let card = permission_card(
            "call-7",
            Some("Write\nplan.md"),
            &options(&["Allow once", "Reject"]),
            passage.clone(),
        )
        .expect("two options make a card");
        assert_eq!(card.key, "permission-call-7");
        assert_eq!(
            card.question,
            "The Planner asks to run Write plan.md: allow it?"
        );
        assert_eq!(card.response, "single_choice");
        assert_eq!(card.choices, ["Allow once", "Reject"]);
        assert_eq!(card.passages, std::slice::from_ref(&passage));
        assert!(permission_card("c", None, &options(&["Only"]), passage).is_none());
    }

    #[test]
    fn an_answer_picks_the_option_of_its_choice_and_nothing_else_does() {
        let offered = options(&["Allow", "Reject"]);
        let pick = |answer: AnswerBody| chosen(&answer, &offered).map(|o| o.name.clone());
        assert_eq!(
            pick(AnswerBody::Choices(vec!["c2".into()])),
            Some("Reject".into())
        );
        assert_eq!(
            pick(AnswerBody::Choices(vec!["c1".into()])),
            Some("Allow".into())
        );
        assert_eq!(pick(AnswerBody::Choices(vec!["c0".into()])), None);
        assert_eq!(pick(AnswerBody::Choices(vec!["c3".into()])), None);
        assert_eq!(pick(AnswerBody::Choices(vec!["p1".into()])), None);
        assert_eq!(pick(AnswerBody::Text("yes".into())), None);
    }

    #[test]
    fn a_reply_says_truly_how_the_agents_turn_ended() {
        assert_eq!(reply(" Done. ", StopReason::EndTurn), "Done.");
        assert!(reply("Half", StopReason::MaxTokens).ends_with("token limit.)"));
        assert!(reply("", StopReason::Refusal).contains("refused"));
        assert!(reply("", StopReason::EndTurn).contains("without a word"));
        assert_eq!(
            failed("", "boom\nbang"),
            "(The agent failed this turn: boom bang.)"
        );
    }
}
