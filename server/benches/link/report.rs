//! The link bench's report: the environment line, then a table per part
//! (round trips and their Margin/peer ratios; links, sessions and memory).

use std::fmt::Write as _;

use crate::support::process::{Mem, ACCEPT_QUEUE};
use crate::support::report::{ms, paired, percentile, ratio, table_head, ReportFrame};

use crate::many_links::LinksResult;
use crate::round_trips::RttRun;
use crate::{Config, PEER};

#[derive(Default)]
pub(crate) struct Report {
    pub(crate) frame: ReportFrame,
    pub(crate) rtt_doc: String,
    pub(crate) rtt: Vec<RttRun>,
    pub(crate) rtt_server_mem: Mem,
    pub(crate) links: Option<LinksResult>,
}

impl Report {
    pub(crate) fn environment(&mut self, config: &Config) {
        self.frame = ReportFrame::start(
            &config.bin,
format!(
            "config: RATE={} SECONDS={} WARMUP={} PARAGRAPHS={} REPEAT={} LINKS={} HOLD_SECONDS={} HTTP_CONCURRENCY={} QUIET_WAIT_SECONDS={} AFTER_DETACH_SECONDS={} RELINKS={} PEER_NODELAY={} parts:{}{}",
            config.rate,
            config.seconds,
            config.warmup,
            config.paragraphs,
            config.repeat,
            config.link_count,
            config.hold_seconds,
            config.http_concurrency,
            config.quiet_wait.as_secs(),
            config.after_detach.as_secs(),
            config.relinks,
            std::env::var("PEER_NODELAY").unwrap_or_else(|_| "0".into()),
            if config.rtt { " rtt" } else { "" },
            if config.links { " links" } else { "" },
        ),
        );
    }

    pub(crate) fn render(&self) -> String {
        let mut out = String::new();
        self.frame.open(&mut out);
        if !self.rtt.is_empty() {
            let _ = writeln!(
                out,
                "\n### Tool-call round trip (`read_document`, {})\n",
                self.rtt_doc
            );
            let _ = writeln!(out, "{}", table_head("| rep | server | mode | calls | sent/s | results/s | p50 ms | p90 ms | p99 ms | p99.9 ms | max ms | mean ms | refused | missing | server CPU | server µs/call | client CPU | other CPU | load avg |"));
            for r in &self.rtt {
                let [p50, p90, p99, p999, max, mean] = r.latencies();
                let _ = writeln!(
                    out,
                    "| {} | {} | {} | {} | {:.0} | {:.0} | {} | {} | {} | {} | {} | {} | {} | {} | {:.0}% | {:.1} | {:.0}% | {:.0}% | {} |",
                    r.rep,
                    r.server,
                    r.mode,
                    r.sent,
                    r.sent_rate,
                    r.achieved_rate,
                    p50,
                    p90,
                    p99,
                    p999,
                    max,
                    mean,
                    r.refused,
                    r.missing,
                    r.cpu.pct(r.cpu.server),
                    r.server_us_per_call(),
                    r.cpu.pct(r.cpu.client),
                    r.cpu.pct(r.cpu.other),
                    r.load,
                );
            }
            let paced_lag: Vec<String> = self
                .rtt
                .iter()
                .filter(|r| r.mode.starts_with("paced"))
                .map(|r| {
                    format!(
                        "{} rep {}: p99 {:.3} ms, max {:.3} ms",
                        r.server,
                        r.rep,
                        ms(r.lag_p99),
                        ms(r.lag_max)
                    )
                })
                .collect();
            let _ = writeln!(
                out,
                "\nPaced schedule lag (send time − due time): {}.",
                paced_lag.join("; ")
            );
            let _ = writeln!(out, "\n{}", table_head("| rep | server | mode | Margin/peer p50 | Margin/peer p99 | Margin/peer max | Margin/peer results/s | Margin/peer server µs/call |"));
            let pairs = paired(
                &self.rtt,
                |r| r.server != PEER,
                |m, p| p.server == PEER && p.mode == m.mode && p.rep == m.rep,
            );
            for (m, p) in pairs {
                let _ = writeln!(
                    out,
                    "| {} | {} | {} | {} | {} | {} | {} | {} |",
                    m.rep,
                    m.server,
                    m.mode,
                    ratio(ms(m.p(50.0)), ms(p.p(50.0))),
                    ratio(ms(m.p(99.0)), ms(p.p(99.0))),
                    ratio(ms(m.p(100.0)), ms(p.p(100.0))),
                    ratio(m.achieved_rate, p.achieved_rate),
                    ratio(m.server_us_per_call(), p.server_us_per_call()),
                );
            }
            let _ = writeln!(
                out,
                "\nRound-trip server at the end: RSS {} KiB (RssAnon {} KiB, peak {} KiB), {} threads.",
                self.rtt_server_mem.rss_kib,
                self.rtt_server_mem.anon_kib,
                self.rtt_server_mem.hwm_kib,
                self.rtt_server_mem.threads
            );
        }
        if let Some(l) = &self.links {
            let n = l.burst.opened.max(1) as f64;
            let pn = l.peer.burst.opened.max(1) as f64;
            let _ = writeln!(
                out,
                "\n### {} machine links at once, one session each\n",
                l.links
            );
            let _ = writeln!(
                out,
                "| links opened at once | Margin | peer | Margin/peer |\n|---|---|---|---|"
            );
            let _ = writeln!(
                out,
                "| welcomed / failed | {} / {} | {} / {} | |",
                l.burst.opened, l.burst.failed, l.peer.burst.opened, l.peer.burst.failed
            );
            let _ = writeln!(
                out,
                "| burst start → last `welcome` | {:.0} ms | {:.0} ms | {} |",
                l.burst.all_welcomed.as_secs_f64() * 1e3,
                l.peer.burst.all_welcomed.as_secs_f64() * 1e3,
                ratio(
                    l.burst.all_welcomed.as_secs_f64(),
                    l.peer.burst.all_welcomed.as_secs_f64()
                )
            );
            for (name, p) in [("p50", 50.0), ("p99", 99.0), ("max", 100.0)] {
                let (a, b) = (
                    percentile(&l.burst.open_sorted, p),
                    percentile(&l.peer.burst.open_sorted, p),
                );
                let _ = writeln!(
                    out,
                    "| link open (connect → `welcome`) {name} | {:.3} ms | {:.3} ms | {} |",
                    ms(a),
                    ms(b),
                    ratio(ms(a), ms(b))
                );
            }
            let per = |a: u64, b: u64, n: f64| (a as f64 - b as f64) * 1024.0 / n;
            let (m_link, p_link) = (
                per(l.mem_links.anon_kib, l.mem_start.anon_kib, n),
                per(l.peer.mem_links.anon_kib, l.peer.mem_start.anon_kib, pn),
            );
            let _ = writeln!(
                out,
                "| RssAnon per idle link (no session) | {m_link:.0} B | {p_link:.0} B | {} |",
                ratio(m_link, p_link)
            );
            let (m_rss, p_rss) = (
                per(l.mem_links.rss_kib, l.mem_start.rss_kib, n),
                per(l.peer.mem_links.rss_kib, l.peer.mem_start.rss_kib, pn),
            );
            let _ = writeln!(
                out,
                "| VmRSS per idle link (no session) | {m_rss:.0} B | {p_rss:.0} B | {} |",
                ratio(m_rss, p_rss)
            );
            let _ = writeln!(
                out,
                "| closed before the end | {} | {} | |",
                l.closed_during, l.peer.closed
            );
            for (i, name) in ACCEPT_QUEUE.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "| kernel `{name}` during the burst | {} | {} | |",
                    l.burst.tcp[i], l.peer.burst.tcp[i]
                );
            }
            if !l.burst.failures.is_empty() {
                let _ = writeln!(out, "| Margin failures | {:?} | | |", l.burst.failures);
            }
            let _ = writeln!(out, "\n| Margin, the rest | |\n|---|---|");
            let _ = writeln!(
                out,
                "| setup (accounts, machines, documents written to the store) | {:.1} s |",
                l.setup.as_secs_f64()
            );
            let _ = writeln!(
                out,
                "| sessions: `@planner` posts → every `invoke` answered | {} of {} in {:.1} s |",
                l.replies,
                l.links,
                l.sessions.as_secs_f64()
            );
            let _ = writeln!(
                out,
                "| idle hold | {:.1} s; {} heartbeats answered; server CPU {:.1}% of a core |",
                l.hold.as_secs_f64(),
                l.heartbeats,
                l.hold_cpu.pct(l.hold_cpu.server)
            );
            let _ = writeln!(
                out,
                "| links closed before the end | {} {:?} |",
                l.closed_during, l.close_reasons
            );
            let _ = writeln!(out, "| server says connected (`GET …/planner`) | {} of {} ({} replying, {} check errors) |", l.connected, l.links, l.replying, l.check_errors);
            let _ = writeln!(
                out,
                "| open at the end, then detached | {} in {:.0} ms |",
                l.still_open,
                l.detach.as_secs_f64() * 1e3
            );
            let _ = writeln!(
                out,
                "| graceful shutdown (SIGTERM) | {:.0} ms, {} |",
                l.shutdown.as_secs_f64() * 1e3,
                l.shutdown_status
            );
            let _ = writeln!(
                out,
                "| load average start → end | {} → {} |",
                l.load_start, l.load_end
            );
            let _ = writeln!(
                out,
                "\n{}",
                table_head("| server memory | VmRSS KiB | RssAnon KiB | Pss KiB | threads |")
            );
            for (name, m) in [
                ("Margin started, no links", l.mem_start),
                ("Margin, links open", l.mem_links),
                ("Margin, + one session each", l.mem_sessions),
                ("Margin, after the idle hold", l.mem_hold),
                (
                    "Margin, all detached (3 s later; sessions leased)",
                    l.mem_detached,
                ),
                ("Margin, after the leases ended", l.mem_released),
            ]
            .into_iter()
            .map(|(name, m)| (name.to_owned(), m))
            .chain(
                l.relinks
                    .iter()
                    .enumerate()
                    .flat_map(|(i, (n, linked, detached))| {
                        [
                            (
                                format!("Margin, relink {}: {n} links again (no sessions)", i + 1),
                                *linked,
                            ),
                            (format!("Margin, relink {}: all detached", i + 1), *detached),
                        ]
                    }),
            )
            .chain([
                ("peer started".to_owned(), l.peer.mem_start),
                ("peer, links open".to_owned(), l.peer.mem_links),
            ]) {
                let _ = writeln!(
                    out,
                    "| {name} | {} | {} | {} | {} |",
                    m.rss_kib, m.anon_kib, m.pss_kib, m.threads
                );
            }
            let _ = writeln!(out, "\n| Margin per machine (Δ ÷ {} linked) | VmRSS bytes | RssAnon bytes | Pss bytes |", l.burst.opened);
            let _ = writeln!(out, "|---|---|---|---|");
            for (name, a, b) in [
                ("link only", l.mem_links, l.mem_start),
                ("session on top of the link", l.mem_sessions, l.mem_links),
                ("link + session", l.mem_sessions, l.mem_start),
                ("link + session, after the hold", l.mem_hold, l.mem_start),
            ] {
                let _ = writeln!(
                    out,
                    "| {name} | {:.0} | {:.0} | {:.0} |",
                    per(a.rss_kib, b.rss_kib, n),
                    per(a.anon_kib, b.anon_kib, n),
                    per(a.pss_kib, b.pss_kib, n)
                );
            }
            let _ = writeln!(
                out,
                "\nMargin peak RSS (VmHWM): {} KiB.",
                l.mem_detached.hwm_kib
            );
        }
        self.frame.close(&mut out);
        out
    }
}
