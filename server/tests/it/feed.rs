//! A session's snapshot and event feed for applications (SPEC E1–E3), on
//! both backends: replay from every cursor, slow readers, resync, live
//! delivery and authorization.

use std::time::Duration;

use margin_protocol::link::{ClientMessage, RunStatus, ServerMessage};
use margin_protocol::sessions::{SessionEvent, SessionSnapshot, SessionState};
use serde_json::json;
use sqlx::Connection;

use crate::harness::{Sse, TestDb};
use crate::on_both_backends;
use crate::plans::Planning;
use crate::turns::{invoked, reply};

/// Makes the database refuse `plan_updated` rows: a real storage failure
/// in the middle of the plan's transaction.
pub(crate) async fn refuse_plan_events(db: &TestDb) {
    let statements: &[&str] = if db.url().starts_with("sqlite:") {
        &[
            "CREATE TRIGGER refuse_plan_events BEFORE INSERT ON session_events \
           WHEN NEW.kind = 'plan_updated' BEGIN SELECT RAISE(ABORT, 'injected failure'); END",
        ]
    } else {
        &[
            "CREATE FUNCTION refuse_plan_events() RETURNS trigger AS $$ \
             BEGIN RAISE EXCEPTION 'injected failure'; END $$ LANGUAGE plpgsql",
            "CREATE TRIGGER refuse_plan_events BEFORE INSERT ON session_events \
             FOR EACH ROW WHEN (NEW.kind = 'plan_updated') EXECUTE FUNCTION refuse_plan_events()",
        ]
    };
    execute(db, statements).await;
}

/// Undoes [`refuse_plan_events`].
pub(crate) async fn allow_plan_events(db: &TestDb) {
    let statements: &[&str] = if db.url().starts_with("sqlite:") {
        &["DROP TRIGGER refuse_plan_events"]
    } else {
        &["DROP TRIGGER refuse_plan_events ON session_events"]
    };
    execute(db, statements).await;
}

async fn execute(db: &TestDb, statements: &[&str]) {
    sqlx::any::install_default_drivers();
    let mut conn = sqlx::AnyConnection::connect(&db.url()).await.unwrap();
    for statement in statements {
        sqlx::query(statement).execute(&mut conn).await.unwrap();
    }
    conn.close().await.unwrap();
}

fn events_path(p: &Planning) -> String {
    format!("/sessions/{}/events", p.session)
}

async fn open_at(p: &Planning, cursor: u64) -> Sse {
    Sse::open(
        p.s.server.addr,
        &p.s.token,
        &events_path(p),
        Some(&cursor.to_string()),
    )
    .await
    .unwrap()
}

async fn run(p: &mut Planning, run: &str, status: RunStatus) {
    p.link
        .send_message(&ClientMessage::Run {
            session: p.session.clone(),
            run: run.into(),
            name: format!("Run {run}"),
            status,
            attempt: None,
        })
        .await;
}

/// Folds `events` into `snapshot`.
fn fold(mut snapshot: SessionSnapshot, events: &[(u64, SessionEvent)]) -> SessionSnapshot {
    for (cursor, event) in events {
        snapshot.apply(*cursor, event);
    }
    snapshot
}

on_both_backends! {
    async fn a_snapshot_plus_the_events_after_its_cursor_is_the_live_state_at_every_cursor(db) {
        let mut p = Planning::new(&db).await;
        let mut taken = vec![p.snapshot().await];
        p.update(json!({"expected_revision": 0, "steps": [{"id": "a", "description": "A", "status": "in_progress"}]})).await.unwrap();
        run(&mut p, "r1", RunStatus::Running).await;
        taken.push(p.snapshot_until(|s| !s.runs.is_empty()).await);
        let (session, turn) = (p.session.clone(), p.turn.clone());
        reply(&mut p.link, &session, &turn, "Working on it.").await;
        taken.push(p.snapshot_until(|s| s.turn.is_none()).await);
        p.s.say("@planner next").await;
        let (_, turn, _, _) = invoked(&mut p.link).await;
        p.turn = turn;
        p.update(json!({"expected_revision": 1, "steps": [{"id": "a", "description": "A", "status": "completed"}]})).await.unwrap();
        run(&mut p, "r1", RunStatus::Completed).await;
        let (status, _) = p.s.server.post(Some(&p.s.token), &format!("/documents/{}/planner/stop", p.s.doc), json!({})).await;
        assert_eq!(status, 202);
        taken.push(p.snapshot_until(|s| s.stop_pending).await);
        assert!(matches!(p.link.next_work().await, Some(ServerMessage::Stop { .. })));
        p.link.send_message(&ClientMessage::Stopped { session: p.session.clone() }).await;
        let live = p.snapshot_until(|s| s.state == SessionState::Ended).await;
        assert_eq!(live.plan.clone().unwrap().unwrap().revision, 2);
        assert_eq!(live.runs[0].status, RunStatus::Completed);
        // Reconnect at every cursor: the events after it come contiguous
        // and in order, and fold any snapshot taken there into the live state.
        let all = p.events().await;
        assert_eq!(all.iter().map(|(id, _)| *id).collect::<Vec<_>>(), (1..=live.cursor).collect::<Vec<_>>());
        assert!(matches!(all[0].1, SessionEvent::SessionStarted { planning: true, .. }));
        assert!(matches!(all.last().unwrap().1, SessionEvent::SessionEnded { .. }));
        for cursor in 0..live.cursor {
            let mut sse = open_at(&p, cursor).await;
            let after: Vec<(u64, SessionEvent)> = sse.take((live.cursor - cursor) as usize).await
                .into_iter().map(|e| (e.id.unwrap(), e.session_event())).collect();
            assert_eq!(after, all[cursor as usize..].to_vec(), "replay after {cursor}");
            assert!(sse.ends().await, "the stream ends after session_ended");
        }
        // At the end of an ended session: 204, so an EventSource stops
        // reconnecting.
        let Err((status, _)) = Sse::open(p.s.server.addr, &p.s.token, &events_path(&p), Some(&live.cursor.to_string())).await else {
            panic!("an ended session's stream is not reopened at its end")
        };
        assert_eq!(status, 204);
        assert_eq!(fold(SessionSnapshot::empty(&p.session), &all), live);
        for snapshot in taken {
            let after = &all[snapshot.cursor as usize..];
            assert_eq!(fold(snapshot.clone(), after), live, "from the snapshot at {}", snapshot.cursor);
        }
    }

    async fn a_stream_ends_after_session_ended_and_answers_204_from_there(db) {
        let mut p = Planning::new(&db).await;
        let (status, _) = p.s.server.post(Some(&p.s.token), &format!("/documents/{}/planner/stop", p.s.doc), json!({})).await;
        assert_eq!(status, 202);
        assert!(matches!(p.link.next_work().await, Some(ServerMessage::Stop { .. })));
        p.link.send_message(&ClientMessage::Stopped { session: p.session.clone() }).await;
        let ended = p.snapshot_until(|s| s.state == SessionState::Ended).await;
        let mut last = open_at(&p, ended.cursor - 1).await;
        let event = last.next().await.unwrap();
        assert_eq!((event.id, event.event.as_str()), (Some(ended.cursor), "session_ended"));
        assert!(last.ends().await, "nothing follows session_ended: the stream ends");
        let Err((status, _)) = Sse::open(p.s.server.addr, &p.s.token, &events_path(&p), Some(&ended.cursor.to_string())).await else {
            panic!("an ended session is not followed from its end")
        };
        assert_eq!(status, 204, "204 tells an EventSource to stop reconnecting");
    }

    async fn a_replayed_older_plan_updated_never_replaces_a_newer_plan(db) {
        let mut p = Planning::new(&db).await;
        for revision in 0..3 {
            p.update(json!({"expected_revision": revision, "steps": [{"id": "a", "description": format!("rev {}", revision + 1), "status": "pending"}]})).await.unwrap();
        }
        let live = p.snapshot().await;
        let all = p.events().await;
        // A client that tracks revisions, handed the whole log again as if
        // new (a second source, a buggy proxy), keeps revision 3.
        let shifted: Vec<(u64, SessionEvent)> = all.into_iter().map(|(id, e)| (id + live.cursor, e)).collect();
        let replayed = fold(live.clone(), &shifted);
        assert_eq!(replayed.plan, live.plan);
    }

    async fn a_slow_reader_far_behind_the_live_edge_loses_no_event(db) {
        let mut p = Planning::new(&db).await;
        let start = p.snapshot().await.cursor;
        // Opened now and not read until the end: the server never drops
        // what it could not send.
        let mut slow = open_at(&p, start).await;
        let reports = 1_500u64;
        for i in 0..reports {
            let status = if i % 2 == 0 { RunStatus::Running } else { RunStatus::Paused };
            run(&mut p, "r1", status).await;
            // The machine reads its link, as a real one does: each report
            // is acknowledged, and a machine that never reads is closed as
            // unresponsive once its link's queue fills (on a loaded
            // machine, within the 1,500), which would end the reports. So
            // no more than 100 reports wait for their acknowledgement.
            let acked = p.link.acks.len() as u64;
            if i >= acked + 100 {
                p.link.collect_for(Duration::from_millis(20)).await;
            }
        }
        let live = p.snapshot_until(|s| s.cursor >= start + reports).await;
        let events: Vec<u64> = slow.take((live.cursor - start) as usize).await.into_iter().map(|e| e.id.unwrap()).collect();
        assert_eq!(events, (start + 1..=live.cursor).collect::<Vec<_>>());
        // And a reader from 0, further back than the in-memory ring, to
        // the cursor read live (the session may have moved on since: a
        // loaded machine's link can fall silent and be told so).
        let from_zero: Vec<(u64, SessionEvent)> =
            p.events().await.into_iter().take_while(|(id, _)| *id <= live.cursor).collect();
        assert_eq!(fold(SessionSnapshot::empty(&p.session), &from_zero), live);
    }

    async fn a_cursor_the_log_no_longer_holds_gets_one_resync_without_an_id(db) {
        let mut p = Planning::with(&db, true, |o| o.session_events_retained = 5).await;
        for i in 0..30u64 {
            let status = if i % 2 == 0 { RunStatus::Running } else { RunStatus::Paused };
            run(&mut p, "r1", status).await;
        }
        let live = p.snapshot_until(|s| s.cursor >= 31).await;
        let mut pruned = open_at(&p, 1).await;
        let resync = pruned.next().await.unwrap();
        assert_eq!((resync.id, resync.event.as_str()), (None, "resync"));
        let body: serde_json::Value = serde_json::from_str(&resync.data).unwrap();
        assert_eq!(body["snapshot"], format!("/sessions/{}", p.session));
        assert!(pruned.ends().await, "the stream ends after resync");
        // Within the retained window, replay carries on.
        let mut recent = open_at(&p, live.cursor - 3).await;
        let ids: Vec<_> = recent.take(3).await.into_iter().map(|e| e.id.unwrap()).collect();
        assert_eq!(ids, [live.cursor - 2, live.cursor - 1, live.cursor]);
        // A cursor from the future resyncs too.
        let mut ahead = open_at(&p, live.cursor + 10).await;
        assert_eq!(ahead.next().await.unwrap().event, "resync");
    }

    async fn an_open_stream_receives_each_event_as_it_commits(db) {
        let mut p = Planning::new(&db).await;
        let cursor = p.snapshot().await.cursor;
        // An EventSource cannot set headers: `?token=` and `?after=` work too.
        let path = format!("{}?after={cursor}&token={}", events_path(&p), p.s.token);
        let mut sse = Sse::open(p.s.server.addr, "", &path, None).await.unwrap();
        assert_eq!(sse.within(Duration::from_millis(100)).await, None);
        p.update(json!({"expected_revision": 0, "steps": []})).await.unwrap();
        let event = sse.next().await.unwrap();
        assert_eq!((event.id, event.event.as_str()), (Some(cursor + 1), "plan_updated"));
        run(&mut p, "r9", RunStatus::Running).await;
        let event = sse.next().await.unwrap();
        assert_eq!((event.id, event.event.as_str()), (Some(cursor + 2), "run_updated"));
    }

    async fn both_endpoints_inherit_the_documents_read_authorization(db) {
        let p = Planning::new(&db).await;
        let (_, stranger) = p.s.server.account("eve").await;
        let (_, viewer) = p.s.server.account("vic").await;
        let (status, _) = p.s.server.post(Some(&p.s.token), &format!("/documents/{}/members", p.s.doc), json!({"account": "vic", "role": "viewer"})).await;
        assert_eq!(status, 200);
        let snapshot = format!("/sessions/{}", p.session);
        let missing = "/sessions/00000000-0000-0000-0000-000000000000".to_owned();
        let (status, denied) = p.s.server.get(Some(&stranger), &snapshot).await;
        let (status_missing, absent) = p.s.server.get(Some(&stranger), &missing).await;
        assert_eq!((status, status_missing), (404, 404));
        assert_eq!(denied["error"]["code"], absent["error"]["code"], "a denial says no more than absence");
        assert_eq!(denied["error"]["code"], "session_not_found");
        let (status, _) = p.s.server.get(None, &snapshot).await;
        assert_eq!(status, 401);
        let Err((status, _)) = Sse::open(p.s.server.addr, &stranger, &events_path(&p), None).await else {
            panic!("a stranger may not follow the session")
        };
        assert_eq!(status, 404);
        assert_eq!(p.snapshot_as(&viewer).await.session, p.session, "a viewer reads it");
        assert!(Sse::open(p.s.server.addr, &viewer, &events_path(&p), None).await.is_ok());
        let Err((status, body)) = Sse::open(p.s.server.addr, &viewer, &events_path(&p), Some("soon")).await else {
            panic!("a cursor that is not a number is refused")
        };
        assert_eq!((status, body["error"]["code"].as_str()), (400, Some("invalid_cursor")));
    }
}
