//! Part 1 of the feed bench, SSE fan-out: `SUBSCRIBERS` follow one session
//! while `EVENTS` run reports are written, paced at `RATE` (and at once with
//! `BURST`), on Margin and the peer; delivery delay, completeness, CPU.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::support::cpu::{settle, CpuSnap, CpuUse};
use crate::support::process::loadavg;
use crate::support::report::{ms, percentile};
use crate::support::sse::Sse;

use crate::report::Report;
use crate::subscribers::{follow, Expect};
use crate::target::{generate, Sent, Target};
use crate::{Config, MARGIN, PEER};

/// One fan-out run.
#[derive(Default)]
pub(crate) struct FanRun {
    pub(crate) rep: usize,
    pub(crate) server: &'static str,
    pub(crate) mode: String,
    pub(crate) subscribers: usize,
    opened: usize,
    pub(crate) open_all: Duration,
    pub(crate) events: usize,
    pub(crate) sent_rate: f64,
    pub(crate) lag_p99: Duration,
    pub(crate) lag_max: Duration,
    pub(crate) deliveries: u64,
    /// First report written → last event read by anyone.
    pub(crate) wall: Duration,
    /// Last report written → last event read by anyone.
    pub(crate) drain: Duration,
    /// Delay percentiles (µs): p50, p90, p99, p99.9, max; and the mean.
    pub(crate) delay: [u32; 5],
    pub(crate) mean_us: f64,
    pub(crate) complete: usize,
    pub(crate) missing: u64,
    pub(crate) gaps: u64,
    pub(crate) duplicates: u64,
    pub(crate) wrong: u64,
    pub(crate) untimed: u64,
    pub(crate) frame_bytes: f64,
    pub(crate) errors: Vec<String>,
    pub(crate) cpu: CpuUse,
    pub(crate) rss_kib: Option<u64>,
    pub(crate) load: String,
}

impl FanRun {
    pub(crate) fn delivery_rate(&self) -> f64 {
        self.deliveries as f64 / self.wall.as_secs_f64().max(1e-9)
    }

    pub(crate) fn server_us(&self) -> f64 {
        1e6 * self.cpu.server / self.deliveries.max(1) as f64
    }

    fn line(&self) -> String {
        let d = |us: u32| format!("{:.1}", f64::from(us) / 1e3);
        format!(
            "{} {} rep {}: {} of {} subscribed in {:.1} ms; sent {:.0}/s (lag p99 {:.1} max {:.1} ms); {} deliveries in {:.1} ms = {:.0}/s ({:.0} events/s to all), drain {:.1} ms; delay p50 {} p90 {} p99 {} p99.9 {} max {} mean {:.1} ms; complete {} of {}, missing {}, gaps {}, duplicates {}, wrong {}, untimed {}; {:.0} B/event; server CPU {:.0}% ({:.2} µs/delivery), client {:.0}%, other {}; server RSS {} KiB; load {}",
            self.server, self.mode, self.rep, self.opened, self.subscribers, ms(self.open_all),
            self.sent_rate, ms(self.lag_p99), ms(self.lag_max), self.deliveries, ms(self.wall),
            self.delivery_rate(), self.delivery_rate() / self.subscribers.max(1) as f64, ms(self.drain),
            d(self.delay[0]), d(self.delay[1]), d(self.delay[2]), d(self.delay[3]), d(self.delay[4]), self.mean_us / 1e3,
            self.complete, self.subscribers, self.missing, self.gaps, self.duplicates, self.wrong, self.untimed,
            self.frame_bytes, self.cpu.pct(self.cpu.server), self.server_us(), self.cpu.pct(self.cpu.client),
            self.cpu.other_pct(), self.rss_kib.map_or("—".into(), |k| k.to_string()), self.load,
        )
    }
}

pub(crate) async fn fan_out(config: &Config, peer: SocketAddr, report: &mut Report) {
    println!(
        "\n== part 1: {} subscribers, {} events ==",
        config.subscribers, config.events
    );
    let mut modes = vec![Some(config.rate)];
    if config.burst {
        modes.push(None);
    }
    let mut sessions = 0;
    for rep in 1..=config.repeat {
        for &rate in &modes {
            for server in [MARGIN, PEER] {
                let target = if server == MARGIN {
                    Target::margin(config, &[]).await
                } else {
                    sessions += 1;
                    Target::peer(peer, format!("fanout-{sessions}")).await
                };
                let mut run = fan_out_run(config, &target, rate).await;
                run.rep = rep;
                println!("  {}", run.line());
                target.finish(report).await;
                report.fan.push(run);
            }
        }
    }
}

async fn fan_out_run(config: &Config, target: &Target, rate: Option<u64>) -> FanRun {
    let n = config.subscribers;
    let sent = Sent::new(config.events);
    let expect = Expect {
        first: target.base + 1,
        last: target.base + config.events as u64,
        base: target.base,
        sent: Some(sent.clone()),
    };
    let path = format!("/sessions/{}/events?after={}", target.session, target.base);
    let began = Instant::now();
    let opened = futures_util::future::join_all(
        (0..n).map(|_| Sse::open(target.addr, &path, &target.token)),
    )
    .await;
    let open_all = began.elapsed();
    let mut errors = Vec::new();
    let mut followers = Vec::with_capacity(n);
    for sse in opened {
        match sse {
            Ok(sse) => followers.push(tokio::spawn(follow(sse, expect.clone()))),
            Err(e) => errors.push(format!("subscribe: {e}")),
        }
    }
    settle(config.quiet_wait.as_secs_f64()).await;
    let snap = CpuSnap::take(target.cpu);
    let generated = generate(&target.machine, &target.session, &sent, rate).await;
    let mut tallies = Vec::with_capacity(followers.len());
    for follower in followers {
        tallies.push(follower.await.expect("a subscriber panicked"));
    }
    let cpu = snap.since(target.cpu);
    let rss_kib = target.rss_kib();
    let first_sent = sent.at(0).unwrap_or(generated.last_sent);
    let last_event = tallies
        .iter()
        .filter_map(|t| t.last_event)
        .max()
        .unwrap_or(first_sent);
    let expected = config.events as u64;
    let mut delays: Vec<u32> = Vec::with_capacity(tallies.iter().map(|t| t.delays_us.len()).sum());
    let mut run = FanRun {
        server: target.server,
        mode: rate.map_or("burst".into(), |r| format!("paced {r}/s")),
        subscribers: n,
        opened: tallies.len(),
        open_all,
        events: config.events,
        sent_rate: generated.sent_rate,
        lag_p99: generated.lag_p99,
        lag_max: generated.lag_max,
        wall: last_event.saturating_duration_since(first_sent),
        drain: last_event.saturating_duration_since(generated.last_sent),
        missing: expected * (n - tallies.len()) as u64,
        cpu,
        rss_kib,
        load: loadavg(),
        ..FanRun::default()
    };
    let mut bytes = 0;
    for tally in tallies {
        run.deliveries += tally.received;
        run.missing += expected - tally.received.min(expected);
        run.gaps += tally.gaps;
        run.duplicates += tally.duplicates;
        run.wrong += tally.wrong;
        run.untimed += tally.untimed;
        bytes += tally.bytes;
        let whole = tally.received == expected && tally.gaps == 0 && tally.duplicates == 0;
        if whole && tally.wrong == 0 && tally.error.is_none() {
            run.complete += 1;
        }
        if let Some(e) = tally.error {
            errors.push(e);
        }
        delays.extend_from_slice(&tally.delays_us);
    }
    delays.sort_unstable();
    run.delay = [50.0, 90.0, 99.0, 99.9, 100.0].map(|p| percentile(&delays, p));
    run.mean_us = delays.iter().map(|&d| f64::from(d)).sum::<f64>() / delays.len().max(1) as f64;
    run.frame_bytes = bytes as f64 / run.deliveries.max(1) as f64;
    errors.sort();
    errors.dedup();
    run.errors = errors.into_iter().take(5).collect();
    run
}
