//! Part 2 of the feed bench, replay from a cursor: `REPLAY_EVENTS` written,
//! then readers replay at once from a cursor to the last id, on Margin and
//! the peer; time to first byte and to the last event.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::support::cpu::{settle, CpuSnap, CpuUse};
use crate::support::report::{ms, percentile};
use crate::support::sse::Sse;

use crate::report::Report;
use crate::subscribers::{follow, Expect, Tally};
use crate::target::{generate, Sent, Target};
use crate::Config;

/// Writing the replay's events.
pub(crate) struct Generation {
    pub(crate) server: &'static str,
    pub(crate) events: usize,
    pub(crate) sent: Duration,
    pub(crate) committed: Duration,
    pub(crate) cpu: CpuUse,
}

/// Readers replaying at once from one cursor to the last id.
pub(crate) struct ReplayRun {
    pub(crate) rep: usize,
    pub(crate) server: &'static str,
    pub(crate) reader: &'static str,
    pub(crate) readers: usize,
    pub(crate) after: u64,
    /// Events read, over all readers.
    pub(crate) received: u64,
    /// Request → first body bytes, p50 over the readers.
    pub(crate) first_byte: Duration,
    /// Request → last event, p50 over the readers, and for all of them.
    pub(crate) each: Duration,
    pub(crate) total: Duration,
    pub(crate) bytes: u64,
    pub(crate) complete: usize,
    pub(crate) missing: u64,
    pub(crate) gaps: u64,
    pub(crate) duplicates: u64,
    pub(crate) errors: Vec<String>,
    pub(crate) cpu: CpuUse,
}

impl ReplayRun {
    pub(crate) fn rate(&self) -> f64 {
        self.received as f64 / self.total.as_secs_f64().max(1e-9)
    }

    fn line(&self) -> String {
        format!(
            "{} {} (after {}) rep {}: {} reader(s), {} events in {:.1} ms = {:.0}/s, {:.1} MB/s; per reader p50 {:.1} ms, first byte p50 {:.1} ms; complete {}, missing {}, gaps {}, duplicates {}{}; server CPU {:.0} ms",
            self.server, self.reader, self.after, self.rep, self.readers, self.received, ms(self.total), self.rate(),
            self.bytes as f64 / 1e6 / self.total.as_secs_f64().max(1e-9), ms(self.each), ms(self.first_byte),
            self.complete, self.missing, self.gaps, self.duplicates,
            if self.errors.is_empty() { String::new() } else { format!(", errors: {:?}", self.errors) },
            self.cpu.server * 1e3,
        )
    }
}

pub(crate) async fn replays(config: &Config, peer: SocketAddr, report: &mut Report) {
    let n = config.replay_events;
    println!(
        "\n== part 2: replay of {n} events (margin with --session-events-retained {}) ==",
        config.retained
    );
    let args = [
        "--session-events-retained".into(),
        config.retained.to_string(),
    ];
    let mut targets = vec![
        Target::margin(config, &args).await,
        Target::peer(peer, "replay".into()).await,
    ];
    let mut lasts = Vec::new();
    for target in &targets {
        settle(config.quiet_wait.as_secs_f64()).await;
        let snap = CpuSnap::take(target.cpu);
        let began = Instant::now();
        generate(&target.machine, &target.session, &Sent::new(n), None).await;
        let sent = began.elapsed();
        let last = target.cursor(target.base + n as u64, false).await;
        let committed = began.elapsed();
        let generation = Generation {
            server: target.server,
            events: n,
            sent,
            committed,
            cpu: snap.since(target.cpu),
        };
        println!(
            "  {}: {n} reports written in {:.1} ms, all committed in {:.1} ms ({:.0} events/s), last id {last}; server CPU {:.0} ms",
            target.server,
            ms(sent),
            ms(committed),
            n as f64 / committed.as_secs_f64().max(1e-9),
            generation.cpu.server * 1e3,
        );
        if last != target.base + n as u64 {
            report.frame.logs.push(format!(
                "{}: the log ended at {last}, not {} + {n}: other events were written",
                target.server, target.base
            ));
        }
        lasts.push(last);
        report.generation.push(generation);
    }
    for rep in 1..=config.replay_reads {
        for (target, &last) in targets.iter().zip(&lasts) {
            for (reader, readers, behind) in [
                ("from cursor 0", 1, last),
                ("near the edge", 1, config.edge),
                ("catch-up", config.catch_up, config.behind),
            ] {
                if readers == 0 {
                    continue;
                }
                settle(config.quiet_wait.as_secs_f64()).await;
                let from = (last.saturating_sub(behind), last);
                let run = replay_run(target, reader, readers, from, rep).await;
                println!("  {}", run.line());
                report.replay.push(run);
            }
        }
    }
    for target in targets.drain(..) {
        target.finish(report).await;
    }
}

/// `readers` subscribers at once, each from `after` until it has `last`.
async fn replay_run(
    target: &Target,
    reader: &'static str,
    readers: usize,
    (after, last): (u64, u64),
    rep: usize,
) -> ReplayRun {
    let path = format!("/sessions/{}/events?after={after}", target.session);
    let expect = Expect {
        first: after + 1,
        last,
        base: u64::MAX,
        sent: None,
    };
    let snap = CpuSnap::take(target.cpu);
    let began = Instant::now();
    let tasks: Vec<_> = (0..readers)
        .map(|_| {
            let (addr, path, token) = (target.addr, path.clone(), target.token.clone());
            let expect = expect.clone();
            tokio::spawn(async move {
                match Sse::open(addr, &path, &token).await {
                    Ok(sse) => follow(sse, expect).await,
                    Err(e) => Tally {
                        error: Some(e),
                        ..Tally::default()
                    },
                }
            })
        })
        .collect();
    let mut tallies = Vec::with_capacity(readers);
    for task in tasks {
        tallies.push(task.await.expect("a reader panicked"));
    }
    let cpu = snap.since(target.cpu);
    let since = |at: Option<Instant>| at.map_or(Duration::ZERO, |at| at - began);
    let mut each: Vec<Duration> = tallies.iter().map(|t| since(t.last_event)).collect();
    let mut first: Vec<Duration> = tallies.iter().map(|t| since(t.first_read)).collect();
    each.sort_unstable();
    first.sort_unstable();
    let expected = last - after;
    let mut errors: Vec<String> = tallies.iter().filter_map(|t| t.error.clone()).collect();
    errors.dedup();
    errors.truncate(5);
    ReplayRun {
        rep,
        server: target.server,
        reader,
        readers,
        after,
        received: tallies.iter().map(|t| t.received).sum(),
        first_byte: percentile(&first, 50.0),
        each: percentile(&each, 50.0),
        total: percentile(&each, 100.0),
        bytes: tallies.iter().map(|t| t.bytes).sum(),
        complete: tallies
            .iter()
            .filter(|t| t.received == expected && t.gaps + t.duplicates == 0 && t.error.is_none())
            .count(),
        missing: tallies
            .iter()
            .map(|t| expected.saturating_sub(t.received))
            .sum(),
        gaps: tallies.iter().map(|t| t.gaps).sum(),
        duplicates: tallies.iter().map(|t| t.duplicates).sum(),
        errors,
        cpu,
    }
}
