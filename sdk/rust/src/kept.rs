//! What the machine keeps for the server across links and restarts (SPEC
//! L3, L5, L10): each session it holds, the questions the session waits
//! on, and what it sent that the server has not acknowledged — a turn's
//! reply and the latest report of each run — until it is settled.
//!
//! Performs no I/O: the link's driver feeds it what it wrote and what the
//! server said, with the time where it matters, and writes what it returns;
//! [`Kept::file`] is the held file's shape (`margin_protocol::kept`).
//!
//! The order of calls on one link: [`Kept::resuming`] as `resume` is
//! written (it names [`Kept::sessions`]), then [`Kept::resumed`] with the
//! server's `resumed`, whose messages are written next; meanwhile
//! [`Kept::sent`] for each reply and run report written, the `*_received`,
//! [`Kept::refused`] and [`Kept::invoked`] inputs as they arrive, and
//! [`Kept::due`] whenever [`Kept::next_retry`] comes.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use margin_protocol::kept::{KeptEntry, KeptReply, KeptRun, KeptSession, KeptSessions};
use margin_protocol::link::{ClientMessage, RunStatus};
use margin_protocol::RefusalCode;

/// How long after a `session_busy` refusal a reply or report is sent again.
pub(crate) const BUSY_PAUSE: Duration = Duration::from_secs(1);

/// Everything kept, by session.
#[derive(Debug, Default)]
pub(crate) struct Kept {
    sessions: BTreeMap<String, Session>,
}

#[derive(Debug, Default)]
struct Session {
    questions: BTreeSet<String>,
    reply: Option<Owed<Reply>>,
    runs: BTreeMap<String, Owed<Report>>,
}

impl Session {
    /// Whether it still owes the server something.
    fn owes(&self) -> bool {
        self.reply.is_some() || !self.runs.is_empty()
    }
}

/// Something sent and not yet acknowledged, and when to send it again.
#[derive(Debug)]
struct Owed<T> {
    what: T,
    again: Again,
}

#[derive(Debug, PartialEq, Eq)]
struct Reply {
    turn: String,
    text: String,
}

#[derive(Debug, PartialEq, Eq)]
struct Report {
    name: String,
    status: RunStatus,
    attempt: u32,
}

/// When a kept message goes out again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Again {
    /// Not unless the link drops: it was written on this link.
    Never,
    /// After the coming `resumed`: the link it went out on dropped.
    AfterResumed,
    /// At this time: the server was busy.
    At(Instant),
}

/// What an `invoke` means for what is kept.
#[derive(Debug, PartialEq)]
pub(crate) enum Invoked {
    /// A turn to run.
    Run,
    /// The turn whose reply is kept: it is not run again; the reply is
    /// sent again instead.
    Replied(ClientMessage),
}

impl Kept {
    /// What a held file says (the old bare-array entries read as sessions
    /// with only questions).
    pub(crate) fn from_file(file: KeptSessions) -> Self {
        let sessions = file
            .into_iter()
            .map(|(id, entry)| {
                let kept = KeptSession::from(entry);
                let session = Session {
                    questions: kept.questions.into_iter().collect(),
                    reply: kept.reply.map(|reply| Owed {
                        what: Reply {
                            turn: reply.turn,
                            text: reply.text,
                        },
                        again: Again::Never,
                    }),
                    runs: kept
                        .runs
                        .into_iter()
                        .map(|run| {
                            let report = Report {
                                name: run.name,
                                status: run.status,
                                attempt: run.attempt,
                            };
                            (
                                run.run,
                                Owed {
                                    what: report,
                                    again: Again::Never,
                                },
                            )
                        })
                        .collect(),
                };
                (id, session)
            })
            .collect();
        Kept { sessions }
    }

    /// The held file's content.
    pub(crate) fn file(&self) -> KeptSessions {
        self.sessions
            .iter()
            .map(|(id, session)| {
                let kept = KeptSession {
                    questions: session.questions.iter().cloned().collect(),
                    reply: session.reply.as_ref().map(|reply| KeptReply {
                        turn: reply.what.turn.clone(),
                        text: reply.what.text.clone(),
                    }),
                    runs: session
                        .runs
                        .iter()
                        .map(|(run, report)| KeptRun {
                            run: run.clone(),
                            name: report.what.name.clone(),
                            status: report.what.status,
                            attempt: report.what.attempt,
                        })
                        .collect(),
                };
                (id.clone(), KeptEntry::Session(kept))
            })
            .collect()
    }

    /// Each session held, its questions, and the turn of its kept reply.
    pub(crate) fn sessions(&self) -> impl Iterator<Item = (&str, Vec<String>, Option<&str>)> {
        self.sessions.iter().map(|(id, session)| {
            let questions = session.questions.iter().cloned().collect();
            let turn = session.reply.as_ref().map(|r| r.what.turn.as_str());
            (id.as_str(), questions, turn)
        })
    }

    /// The machine holds `session` (a turn of it started). Whether that is
    /// new.
    pub(crate) fn hold_session(&mut self, session: &str) -> bool {
        if self.sessions.contains_key(session) {
            return false;
        }
        self.sessions.insert(session.to_owned(), Session::default());
        true
    }

    /// `session` asked a question that waits on a member.
    pub(crate) fn hold_question(&mut self, session: &str, request: &str) -> bool {
        self.sessions
            .entry(session.to_owned())
            .or_default()
            .questions
            .insert(request.to_owned())
    }

    /// A question was answered or withdrawn.
    pub(crate) fn settle_question(&mut self, session: &str, request: &str) -> bool {
        self.sessions
            .get_mut(session)
            .is_some_and(|s| s.questions.remove(request))
    }

    /// The session's work stopped (`stopped` was sent): it waits on no
    /// question, and is no longer held unless it still owes the server a
    /// reply or report.
    pub(crate) fn stopped(&mut self, session: &str) -> bool {
        let Some(kept) = self.sessions.get_mut(session) else {
            return false;
        };
        if kept.owes() {
            let changed = !kept.questions.is_empty();
            kept.questions.clear();
            return changed;
        }
        self.sessions.remove(session);
        true
    }

    /// The server no longer has `session`: everything kept for it settles.
    pub(crate) fn ended(&mut self, session: &str) -> bool {
        self.sessions.remove(session).is_some()
    }

    /// Nothing will be resumed: everything is forgotten.
    pub(crate) fn forget_all(&mut self) -> bool {
        let any = !self.sessions.is_empty();
        self.sessions.clear();
        any
    }

    /// The machine detaches: the sessions that owe the server nothing are
    /// let go; the others stay, for a later `resume` to send what they owe.
    pub(crate) fn forget_settled(&mut self) -> bool {
        let before = self.sessions.len();
        self.sessions.retain(|_, session| session.owes());
        self.sessions.len() != before
    }

    /// `message` was written on the link: a reply or run report is kept
    /// until the server settles it. Whether what is kept changed.
    pub(crate) fn sent(&mut self, message: &ClientMessage) -> bool {
        match message {
            ClientMessage::Reply {
                session,
                turn,
                text,
            } => {
                let reply = Reply {
                    turn: turn.clone(),
                    text: text.clone(),
                };
                let slot = &mut self.sessions.entry(session.clone()).or_default().reply;
                let changed = slot.as_ref().is_none_or(|kept| kept.what != reply);
                *slot = Some(Owed {
                    what: reply,
                    again: Again::Never,
                });
                changed
            }
            ClientMessage::Run {
                session,
                run,
                name,
                status,
                attempt,
            } => {
                let report = Report {
                    name: name.clone(),
                    status: *status,
                    attempt: attempt.unwrap_or(1),
                };
                let runs = &mut self.sessions.entry(session.clone()).or_default().runs;
                let changed = runs.get(run).is_none_or(|kept| kept.what != report);
                runs.insert(
                    run.clone(),
                    Owed {
                        what: report,
                        again: Again::Never,
                    },
                );
                changed
            }
            _ => false,
        }
    }

    /// `reply-received`: the turn's reply is committed.
    pub(crate) fn reply_received(&mut self, session: &str, turn: &str) -> bool {
        let Some(kept) = self.sessions.get_mut(session) else {
            return false;
        };
        if kept.reply.as_ref().is_some_and(|r| r.what.turn == turn) {
            kept.reply = None;
            return true;
        }
        false
    }

    /// `run-received`: that report is taken. An answer to an earlier report
    /// of the run leaves a later one kept.
    pub(crate) fn run_received(
        &mut self,
        session: &str,
        run: &str,
        attempt: u32,
        status: RunStatus,
    ) -> bool {
        let Some(kept) = self.sessions.get_mut(session) else {
            return false;
        };
        let answers = kept
            .runs
            .get(run)
            .is_some_and(|r| r.what.attempt == attempt && r.what.status == status);
        answers && kept.runs.remove(run).is_some()
    }

    /// A refusal naming a reply (`turn`) or run report (`run`) of
    /// `session`: `session_busy` sends it again at [`BUSY_PAUSE`] after
    /// `now`; any other code settles it. Whether what is kept changed.
    pub(crate) fn refused(
        &mut self,
        session: &str,
        turn: Option<&str>,
        run: Option<&str>,
        code: RefusalCode,
        now: Instant,
    ) -> bool {
        let Some(kept) = self.sessions.get_mut(session) else {
            return false;
        };
        let busy = code == RefusalCode::SessionBusy;
        let again = Again::At(now + BUSY_PAUSE);
        if let Some(turn) = turn {
            match &mut kept.reply {
                Some(reply) if reply.what.turn == turn && busy => reply.again = again,
                Some(reply) if reply.what.turn == turn => {
                    kept.reply = None;
                    return true;
                }
                _ => {}
            }
        }
        if let Some(run) = run {
            match kept.runs.get_mut(run) {
                Some(report) if busy => report.again = again,
                Some(_) => return kept.runs.remove(run).is_some(),
                None => {}
            }
        }
        false
    }

    /// An `invoke` of `turn` in `session`: a later turn settles the
    /// session's kept reply (turns run one at a time); the kept reply's own
    /// turn is not run again.
    pub(crate) fn invoked(&mut self, session: &str, turn: &str) -> (Invoked, bool) {
        let Some(kept) = self.sessions.get_mut(session) else {
            return (Invoked::Run, false);
        };
        match &kept.reply {
            Some(reply) if reply.what.turn == turn => {
                let again = reply_message(session, &reply.what);
                (Invoked::Replied(again), false)
            }
            Some(_) => {
                kept.reply = None;
                (Invoked::Run, true)
            }
            None => (Invoked::Run, false),
        }
    }

    /// A `resume` is being written: everything kept goes out again after
    /// its `resumed`.
    pub(crate) fn resuming(&mut self) {
        for session in self.sessions.values_mut() {
            if let Some(reply) = &mut session.reply {
                reply.again = Again::AfterResumed;
            }
            for report in session.runs.values_mut() {
                report.again = Again::AfterResumed;
            }
        }
    }

    /// `resumed` came (its `ended` sessions already settled): what to send
    /// again now, in order.
    pub(crate) fn resumed(&mut self) -> Vec<ClientMessage> {
        self.take(|again| again == Again::AfterResumed)
    }

    /// When the next reply or report refused as busy is due.
    pub(crate) fn next_retry(&self) -> Option<Instant> {
        let at = |again: Again| match again {
            Again::At(at) => Some(at),
            Again::Never | Again::AfterResumed => None,
        };
        self.sessions
            .values()
            .flat_map(|s| {
                let reply = s.reply.iter().filter_map(|r| at(r.again));
                reply.chain(s.runs.values().filter_map(|r| at(r.again)))
            })
            .min()
    }

    /// The replies and reports refused as busy that are due by `now`.
    pub(crate) fn due(&mut self, now: Instant) -> Vec<ClientMessage> {
        self.take(|again| matches!(again, Again::At(at) if at <= now))
    }

    /// The kept messages whose `again` is `chosen`, which will not go out
    /// again unless told.
    fn take(&mut self, chosen: impl Fn(Again) -> bool) -> Vec<ClientMessage> {
        let mut out = Vec::new();
        for (id, session) in &mut self.sessions {
            for (run, report) in &mut session.runs {
                if chosen(report.again) {
                    report.again = Again::Never;
                    out.push(ClientMessage::Run {
                        session: id.clone(),
                        run: run.clone(),
                        name: report.what.name.clone(),
                        status: report.what.status,
                        attempt: Some(report.what.attempt),
                    });
                }
            }
            if let Some(reply) = &mut session.reply {
                if chosen(reply.again) {
                    reply.again = Again::Never;
                    out.push(reply_message(id, &reply.what));
                }
            }
        }
        out
    }
}

fn reply_message(session: &str, reply: &Reply) -> ClientMessage {
    ClientMessage::Reply {
        session: session.to_owned(),
        turn: reply.turn.clone(),
        text: reply.text.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn reply(session: &str, turn: &str, text: &str) -> ClientMessage {
        ClientMessage::Reply {
            session: session.into(),
            turn: turn.into(),
            text: text.into(),
        }
    }

    fn report(session: &str, run: &str, status: RunStatus, attempt: Option<u32>) -> ClientMessage {
        ClientMessage::Run {
            session: session.into(),
            run: run.into(),
            name: "Review".into(),
            status,
            attempt,
        }
    }

    fn file(kept: &Kept) -> String {
        serde_json::to_string(&kept.file()).unwrap()
    }

    #[test]
    fn a_reply_is_kept_until_reply_received_and_sent_again_after_resumed() {
        let mut kept = Kept::default();
        assert!(kept.hold_session("s"));
        assert!(kept.sent(&reply("s", "t1", "Done.")));
        assert!(
            !kept.sent(&reply("s", "t1", "Done.")),
            "the same reply again"
        );
        let turns: Vec<_> = kept.sessions().map(|(s, _, t)| (s, t)).collect();
        assert_eq!(
            turns,
            [("s", Some("t1"))],
            "resume names the kept reply's turn"
        );

        kept.resuming();
        assert_eq!(kept.resumed(), [reply("s", "t1", "Done.")]);
        assert_eq!(kept.resumed(), [], "sent again once per resumed");
        assert!(!kept.reply_received("s", "t0"), "another turn's receipt");
        assert!(kept.reply_received("s", "t1"));
        kept.resuming();
        assert_eq!(kept.resumed(), []);
        assert_eq!(file(&kept), r#"{"s":{"questions":[]}}"#);
    }

    #[test]
    fn a_reply_written_after_resume_is_not_sent_twice_by_its_resumed() {
        let mut kept = Kept::default();
        kept.resuming();
        kept.sent(&reply("s", "t1", "Done."));
        assert_eq!(kept.resumed(), []);
    }

    #[test]
    fn a_refusal_settles_a_reply_unless_busy_which_sends_it_again_a_second_later() {
        let (mut kept, now) = (Kept::default(), Instant::now());
        kept.sent(&reply("s", "t1", "Done."));
        assert!(!kept.refused("s", Some("t1"), None, RefusalCode::SessionBusy, now));
        assert_eq!(kept.next_retry(), Some(now + BUSY_PAUSE));
        assert_eq!(kept.due(now), []);
        assert_eq!(kept.due(now + BUSY_PAUSE), [reply("s", "t1", "Done.")]);
        assert_eq!(kept.next_retry(), None);

        assert!(!kept.refused("s", Some("t0"), None, RefusalCode::UnknownTurn, now));
        assert!(kept.refused("s", Some("t1"), None, RefusalCode::UnknownTurn, now));
        assert_eq!(
            kept.sessions().map(|(_, _, t)| t).collect::<Vec<_>>(),
            [None]
        );
    }

    #[test]
    fn a_later_invoke_settles_the_kept_reply_and_its_own_turn_is_not_run_again() {
        let mut kept = Kept::default();
        kept.sent(&reply("s", "t1", "Done."));
        assert_eq!(
            kept.invoked("s", "t1"),
            (Invoked::Replied(reply("s", "t1", "Done.")), false)
        );
        assert_eq!(kept.invoked("s", "t2"), (Invoked::Run, true));
        assert_eq!(kept.invoked("s", "t1"), (Invoked::Run, false));
        assert_eq!(kept.invoked("other", "t1"), (Invoked::Run, false));
    }

    #[test]
    fn the_latest_report_of_a_run_is_kept_until_that_report_is_received() {
        let mut kept = Kept::default();
        kept.sent(&report("s", "review", RunStatus::Running, None));
        kept.sent(&report("s", "review", RunStatus::Completed, None));
        assert!(
            !kept.run_received("s", "review", 1, RunStatus::Running),
            "the earlier report's receipt keeps the later one"
        );
        kept.resuming();
        assert_eq!(
            kept.resumed(),
            [report("s", "review", RunStatus::Completed, Some(1))]
        );
        assert!(!kept.run_received("s", "review", 2, RunStatus::Completed));
        assert!(kept.run_received("s", "review", 1, RunStatus::Completed));
        assert_eq!(file(&kept), r#"{"s":{"questions":[]}}"#);
    }

    #[test]
    fn a_refusal_naming_a_run_settles_it_unless_busy() {
        let (mut kept, now) = (Kept::default(), Instant::now());
        kept.sent(&report("s", "a", RunStatus::Running, Some(2)));
        kept.sent(&report("s", "b", RunStatus::Running, None));
        kept.refused("s", None, Some("a"), RefusalCode::SessionBusy, now);
        assert!(kept.refused("s", None, Some("b"), RefusalCode::RunCapacity, now));
        assert_eq!(
            kept.due(now + BUSY_PAUSE),
            [report("s", "a", RunStatus::Running, Some(2))]
        );
        assert_eq!(
            file(&kept),
            r#"{"s":{"questions":[],"runs":[{"run":"a","name":"Review","status":"running","attempt":2}]}}"#
        );
    }

    #[test]
    fn an_ended_session_settles_everything_and_a_stopped_one_keeps_what_it_owes() {
        let mut kept = Kept::default();
        kept.hold_question("s", "c1");
        kept.sent(&reply("s", "t1", "Done."));
        kept.hold_question("quiet", "c2");
        assert!(kept.stopped("s"));
        assert!(kept.stopped("quiet"));
        assert_eq!(
            file(&kept),
            r#"{"s":{"questions":[],"reply":{"turn":"t1","text":"Done."}}}"#
        );
        assert!(kept.ended("s"));
        assert_eq!(file(&kept), "{}");
    }

    #[test]
    fn detaching_lets_go_of_the_sessions_that_owe_nothing() {
        let mut kept = Kept::default();
        kept.hold_question("asks", "c1");
        kept.sent(&report("owes", "review", RunStatus::Completed, None));
        assert!(kept.forget_settled());
        assert_eq!(
            kept.sessions().map(|(s, _, _)| s).collect::<Vec<_>>(),
            ["owes"]
        );
        assert!(kept.forget_all());
        assert_eq!(file(&kept), "{}");
    }

    #[test]
    fn a_held_file_reads_in_both_shapes_and_writes_the_new_one() {
        let old = r#"{"s1":["c2","c1"],"s2":{"questions":["c3"],"reply":{"turn":"t","text":"Hi."},"runs":[{"run":"r","name":"R","status":"paused","attempt":3}]}}"#;
        let kept = Kept::from_file(serde_json::from_str(old).unwrap());
        assert_eq!(
            file(&kept),
            r#"{"s1":{"questions":["c1","c2"]},"s2":{"questions":["c3"],"reply":{"turn":"t","text":"Hi."},"runs":[{"run":"r","name":"R","status":"paused","attempt":3}]}}"#
        );
        let mut kept = kept;
        kept.resuming();
        assert_eq!(
            kept.resumed(),
            [
                ClientMessage::Run {
                    session: "s2".into(),
                    run: "r".into(),
                    name: "R".into(),
                    status: RunStatus::Paused,
                    attempt: Some(3),
                },
                reply("s2", "t", "Hi."),
            ]
        );
    }
}
