//! The reconnect bench's report: each storm's figures as a log line, a
//! table row and JSON, then the tables (storms, resume against fresh,
//! server memory), the server log's summary and the `JSON` file.

use std::time::Duration;

use serde_json::json;

use crate::support::report::{ms, percentile_ms, ratio, table_head};

use crate::rounds::{Round, Sample};
use crate::storm::StormFigures;
use crate::{Config, Result};

impl StormFigures {
    /// Per machine: from `welcome` to done (the `resume` step alone).
    fn step(&self) -> Vec<Duration> {
        self.done
            .iter()
            .zip(&self.welcome)
            .map(|(done, welcome)| done.saturating_sub(*welcome))
            .collect()
    }

    fn json(&self) -> serde_json::Value {
        let mut figures = json!({
            "machines": self.machines,
            "failed": self.failed,
            "errors": self.errors,
            "syn_retried": self.retried(),
            "wall_ms": ms(self.wall()),
            "server_cpu_ms": self.cpu.server * 1e3,
            "bench_cpu_ms": self.cpu.client * 1e3,
            "other_cpu_pct": self.cpu.other_share(),
            "listen_overflows": self.tcp("ListenOverflows"),
            "listen_drops": self.tcp("ListenDrops"),
            "syn_retransmits": self.tcp("TCPSynRetrans"),
        });
        let steps = self.step();
        for (name, samples) in [
            ("connect", &self.connected),
            ("upgrade", &self.upgraded),
            ("welcome", &self.welcome),
            ("done", &self.done),
            ("step", &steps),
        ] {
            for p in [50, 99] {
                figures[format!("{name}_p{p}_ms")] = json!(percentile_ms(samples, f64::from(p)));
            }
        }
        figures
    }

    /// Counter `name` of [`ACCEPT_QUEUE`] over the storm.
    fn tcp(&self, name: &str) -> u64 {
        self.tcp.map_or(0, |tcp| tcp.get(name))
    }

    /// The figures the running log and the table both show, formatted:
    /// ok, failed, TCP connect, SYN retried, `welcome`, the resume step,
    /// done (each of those four p50 / p99 ms), all done ms, server CPU
    /// ms, bench CPU ms, other CPU, listen overflows.
    fn cells(&self) -> [String; 12] {
        let [connect, welcome, step, done] =
            [&self.connected, &self.welcome, &self.step(), &self.done].map(|s| {
                format!(
                    "{:.1} / {:.1}",
                    percentile_ms(s, 50.0),
                    percentile_ms(s, 99.0)
                )
            });
        [
            (self.machines - self.failed).to_string(),
            self.failed.to_string(),
            connect,
            self.retried().to_string(),
            welcome,
            step,
            done,
            format!("{:.1}", ms(self.wall())),
            format!("{:.0}", self.cpu.server * 1e3),
            format!("{:.0}", self.cpu.client * 1e3),
            self.cpu.other_pct(),
            self.tcp("ListenOverflows").to_string(),
        ]
    }

    pub(crate) fn print(&self, label: &str) {
        let [ok, failed, connect, retried, welcome, step, done, wall, server, bench, other, overflows] =
            self.cells();
        eprintln!(
            "  {label}: {ok} ok, {failed} failed; TCP connect p50 / p99 {connect} ms ({retried} took a SYN retry); welcome {welcome} ms; resume step {step} ms; done {done} ms; all done {wall} ms; server CPU {server} ms, bench CPU {bench} ms, other {other}; listen overflows {overflows}, SYN retransmits {}",
            self.tcp("TCPSynRetrans"),
        );
        for e in &self.errors {
            eprintln!("    error: {e}");
        }
    }

    fn row(&self, round: &str, label: &str) {
        println!("| {round} | {label} | {} |", self.cells().join(" | "));
    }
}

/// Everything the report shows besides the knobs and the checks.
pub(crate) struct Figures {
    pub(crate) load_start: String,
    pub(crate) load_end: String,
    pub(crate) setup: Duration,
    pub(crate) sessions: Duration,
    pub(crate) first: StormFigures,
    pub(crate) rounds: Vec<Round>,
    pub(crate) memory: Vec<Sample>,
    pub(crate) peak: f64,
    pub(crate) log: (u64, u64, Vec<String>),
}

/// Prints the report's tables, and with `JSON` writes every figure to
/// that file too.
pub(crate) fn print(config: &Config, figures: &Figures, problems: &[String]) -> Result<()> {
    let Figures {
        load_start,
        load_end,
        first,
        rounds,
        memory,
        log,
        ..
    } = figures;
    let (setup, sessions, peak) = (figures.setup, figures.sessions, figures.peak);
    let n = config.machines;
    println!();
    println!(
        "Reconnect storm: {n} machines, {} rounds, away {:?} after the server noticed; load average {load_start} at start, {load_end} at end; setup {setup:.1?}; first {n} sessions in use after {sessions:.1?}",
        config.rounds, config.away
    );
    println!();
    println!("Times in ms from the storm's release, per machine (p50 / p99). \"resume step\" is from `welcome` to `resumed` on the same link; \"done\" is `resumed` (resume) or `welcome` (fresh).");
    println!();
    println!("{}", table_head("| round | storm | ok | failed | TCP connect p50 / p99 | SYN retried (≥ 1 s) | welcome p50 / p99 | resume step p50 / p99 | done p50 / p99 | all done (wall) | server CPU ms | bench CPU ms | other CPU | listen overflows |"));
    first.row("0", "first link-up (no sessions)");
    for (i, r) in rounds.iter().enumerate() {
        r.fresh.row(&(i + 1).to_string(), "fresh links (peer)");
        r.resume.row(&(i + 1).to_string(), "resume");
    }
    println!();
    println!("{}", table_head("| round | resume/fresh all done | resume/fresh p50 | resume/fresh p99 | resume/fresh server CPU | drop noticed (all disconnected) ms | Chat said disconnected ms | run cards back ms | other CPU over the round |"));
    for (i, r) in rounds.iter().enumerate() {
        println!(
            "| {} | {} | {} | {} | {} | {:.0} | {:.0} | {:.0} | {} |",
            i + 1,
            ratio(ms(r.resume.wall()), ms(r.fresh.wall())),
            ratio(
                percentile_ms(&r.resume.done, 50.0),
                percentile_ms(&r.fresh.done, 50.0)
            ),
            ratio(
                percentile_ms(&r.resume.done, 99.0),
                percentile_ms(&r.fresh.done, 99.0)
            ),
            ratio(r.resume.cpu.server, r.fresh.cpu.server),
            ms(r.noticed),
            ms(r.chat_said),
            ms(r.cards_back),
            r.cpu.other_pct(),
        );
    }
    println!();
    println!("{}", table_head("| server | VmRSS MiB | open fds |"));
    for s in memory {
        println!("| {} | {:.1} | {} |", s.label, s.rss, s.fds);
    }
    println!("| peak (VmHWM) | {peak:.1} | |");
    println!();
    println!(
        "server log: {} WARN, {} ERROR lines{}",
        log.0,
        log.1,
        if log.2.is_empty() { "" } else { ":" }
    );
    for line in &log.2 {
        println!("  {line}");
    }

    if let Some(path) = &config.json {
        let value = json!({
            "machines": n,
            "rounds": config.rounds,
            "away_secs": config.away.as_secs_f64(),
            "load_average": {"start": load_start, "end": load_end},
            "setup_ms": ms(setup),
            "sessions_in_use_ms": ms(sessions),
            "first_link_up": first.json(),
            "rounds_figures": rounds.iter().map(|r| json!({
                "fresh": r.fresh.json(),
                "resume": r.resume.json(),
                "noticed_ms": ms(r.noticed),
                "chat_said_ms": ms(r.chat_said),
                "cards_back_ms": ms(r.cards_back),
                "round_other_cpu_pct": r.cpu.other_share(),
            })).collect::<Vec<_>>(),
            "memory": memory.iter().map(|s| json!({"at": s.label, "rss_mib": s.rss, "fds": s.fds})).collect::<Vec<_>>(),
            "peak_mib": peak,
            "server_log": {"warn": log.0, "error": log.1, "samples": log.2},
            "problems": problems,
        });
        std::fs::write(path, serde_json::to_string_pretty(&value)?)?;
    }
    Ok(())
}
