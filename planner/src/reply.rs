//! The reply policy (SPEC T2): the Planner's questions belong in inline
//! decisions, never in Chat.
//!
//! A reply whose prose asks something is withheld; the turn gets one repair
//! turn asking the Planner to move the questions into `open_decisions` with
//! stable keys. The repair succeeds when the cards the turn captured — new
//! or replayed, but only cards that still hold their question — are at least
//! as many as the questions withheld. Otherwise the turn fails visibly and
//! the text is never posted.

/// What to do with a reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// No questions: post it.
    Publish,
    /// It asks people something: withhold it and ask for a repair.
    Withhold {
        /// The questions found, in order.
        questions: Vec<String>,
    },
}

/// Judges a reply's text.
pub fn judge(reply: &str) -> Verdict {
    let questions = questions(reply);
    if questions.is_empty() {
        Verdict::Publish
    } else {
        Verdict::Withhold { questions }
    }
}

/// The sentences of `text` that ask a question: those ending in `?` (or the
/// full-width `？`), outside fenced code blocks, inline code and quoted
/// lines — code and quotations may contain question marks without asking
/// anyone anything.
pub fn questions(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            fenced = !fenced;
            continue;
        }
        if fenced || trimmed.starts_with('>') {
            continue;
        }
        let prose = without_inline_code(line);
        let mut sentence = String::new();
        for c in prose.chars() {
            sentence.push(c);
            if matches!(c, '.' | '!' | '?' | '？') {
                if matches!(c, '?' | '？') {
                    let asked = sentence.trim().trim_start_matches(['-', '*', ' ']).trim();
                    if asked.chars().any(char::is_alphanumeric) {
                        found.push(asked.to_owned());
                    }
                }
                sentence.clear();
            }
        }
    }
    found
}

fn without_inline_code(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut in_code = false;
    for c in line.chars() {
        if c == '`' {
            in_code = !in_code;
        } else if !in_code {
            out.push(c);
        }
    }
    out
}

/// Whether a repair turn moved the withheld questions into decisions: the
/// cards it captured (new and replayed alike, only those still holding their
/// question) cover every withheld question.
pub fn repaired(withheld: usize, captured: usize) -> bool {
    captured >= withheld
}

/// Whether a Chat message calls the Planner: `@planner` as a word, in any
/// case (SPEC T1).
pub fn mentions_planner(text: &str) -> bool {
    let lower = text.to_lowercase();
    lower.match_indices("@planner").any(|(at, found)| {
        let before = lower[..at].chars().next_back();
        let after = lower[at + found.len()..].chars().next();
        !before.is_some_and(|c| c.is_alphanumeric() || c == '_')
            && !after.is_some_and(|c| c.is_alphanumeric() || c == '_')
    })
}
