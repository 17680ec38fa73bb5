//! The feed bench's report: the environment line, then the fan-out and
//! replay tables with their Margin/peer ratios.

use std::fmt::Write as _;

use crate::support::report::{ms, paired, ratio, table_head, ReportFrame};

use crate::fan_out::FanRun;
use crate::replay::{Generation, ReplayRun};
use crate::{Config, MARGIN, PEER};

#[derive(Default)]
pub(crate) struct Report {
    pub(crate) frame: ReportFrame,
    pub(crate) fan: Vec<FanRun>,
    pub(crate) generation: Vec<Generation>,
    pub(crate) replay: Vec<ReplayRun>,
}

impl Report {
    pub(crate) fn environment(&mut self, config: &Config) {
        self.frame = ReportFrame::start(
            &config.bin,
format!(
            "config: SUBSCRIBERS={} EVENTS={} RATE={} BURST={} REPEAT={} REPLAY_EVENTS={} RETAINED={} EDGE={} REPLAY_READS={} CATCH_UP={} BEHIND={} QUIET_WAIT_SECONDS={} PEER_NODELAY={} parts:{}{}",
            config.subscribers,
            config.events,
            config.rate,
            u8::from(config.burst),
            config.repeat,
            config.replay_events,
            config.retained,
            config.edge,
            config.replay_reads,
            config.catch_up,
            config.behind,
            config.quiet_wait.as_secs(),
            std::env::var("PEER_NODELAY").unwrap_or_else(|_| "0".into()),
            if config.fanout { " fanout" } else { "" },
            if config.replay { " replay" } else { "" },
        ),
        );
    }

    pub(crate) fn render(&self) -> String {
        let mut out = String::new();
        self.frame.open(&mut out);
        self.render_fan(&mut out);
        self.render_replay(&mut out);
        self.frame.close(&mut out);
        out
    }

    fn render_fan(&self, out: &mut String) {
        let Some(first) = self.fan.first() else {
            return;
        };
        let d = |us: u32| format!("{:.1}", f64::from(us) / 1e3);
        let _ = writeln!(
            out,
            "\n### Fan-out: {} SSE subscribers on one session, {} events\n",
            first.subscribers, first.events
        );
        let _ = writeln!(out, "{}", table_head("| rep | server | mode | subscribed in ms | sent/s | deliveries/s | events/s to all | first send → last delivery ms | drain ms | p50 ms | p90 ms | p99 ms | p99.9 ms | max ms | mean ms | complete | missing | gaps | dups | wrong | server CPU | server µs/delivery | client CPU | other CPU | server RSS KiB |"));
        for r in &self.fan {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {:.1} | {:.0} | {:.0} | {:.0} | {:.1} | {:.1} | {} | {} | {} | {} | {} | {:.1} | {} / {} | {} | {} | {} | {} | {:.0}% | {:.2} | {:.0}% | {} | {} |",
                r.rep, r.server, r.mode, ms(r.open_all), r.sent_rate, r.delivery_rate(),
                r.delivery_rate() / r.subscribers.max(1) as f64, ms(r.wall), ms(r.drain),
                d(r.delay[0]), d(r.delay[1]), d(r.delay[2]), d(r.delay[3]), d(r.delay[4]), r.mean_us / 1e3,
                r.complete, r.subscribers, r.missing, r.gaps, r.duplicates, r.wrong,
                r.cpu.pct(r.cpu.server), r.server_us(), r.cpu.pct(r.cpu.client), r.cpu.other_pct(),
                r.rss_kib.map_or("—".into(), |k| k.to_string()),
            );
        }
        let frame = self
            .fan
            .iter()
            .map(|r| format!("{} {} {:.0} B", r.server, r.mode, r.frame_bytes));
        let _ = writeln!(
            out,
            "\nBytes read per event (frames and chunk framing): {}.",
            frame.collect::<Vec<_>>().join(", ")
        );
        for r in self
            .fan
            .iter()
            .filter(|r| !r.errors.is_empty() || r.untimed > 0)
        {
            let _ = writeln!(
                out,
                "\n{} {} rep {}: {} untimed; errors: {:?}",
                r.server, r.mode, r.rep, r.untimed, r.errors
            );
        }
        let _ = writeln!(out, "\n{}", table_head("| rep | mode | Margin/peer deliveries/s | Margin/peer p50 | Margin/peer p99 | Margin/peer max | Margin/peer server µs/delivery |"));
        let pairs = paired(
            &self.fan,
            |r| r.server == MARGIN,
            |m, p| p.server == PEER && p.mode == m.mode && p.rep == m.rep,
        );
        for (m, p) in pairs {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} |",
                m.rep,
                m.mode,
                ratio(m.delivery_rate(), p.delivery_rate()),
                ratio(f64::from(m.delay[0]), f64::from(p.delay[0])),
                ratio(f64::from(m.delay[2]), f64::from(p.delay[2])),
                ratio(f64::from(m.delay[4]), f64::from(p.delay[4])),
                ratio(m.server_us(), p.server_us()),
            );
        }
    }

    fn render_replay(&self, out: &mut String) {
        if self.generation.is_empty() {
            return;
        }
        let _ = writeln!(out, "\n### Replay\n");
        let _ = writeln!(out, "{}", table_head("| server | reports written unpaced | written in ms | all committed in ms | committed events/s | server CPU s |"));
        for g in &self.generation {
            let _ = writeln!(
                out,
                "| {} | {} | {:.1} | {:.1} | {:.0} | {:.2} |",
                g.server,
                g.events,
                ms(g.sent),
                ms(g.committed),
                g.events as f64 / g.committed.as_secs_f64().max(1e-9),
                g.cpu.server
            );
        }
        let _ = writeln!(out, "\n{}", table_head("| rep | server | reader | readers | after | events read | first byte ms (p50) | per reader ms (p50) | all done ms | events/s | MB/s | complete | missing | gaps | dups | server CPU ms | other CPU |"));
        for r in &self.replay {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {:.1} | {:.1} | {:.1} | {:.0} | {:.1} | {} / {} | {} | {} | {} | {:.0} | {} |",
                r.rep,
                r.server,
                r.reader,
                r.readers,
                r.after,
                r.received,
                ms(r.first_byte),
                ms(r.each),
                ms(r.total),
                r.rate(),
                r.bytes as f64 / 1e6 / r.total.as_secs_f64().max(1e-9),
                r.complete,
                r.readers,
                r.missing,
                r.gaps,
                r.duplicates,
                r.cpu.server * 1e3,
                r.cpu.other_pct(),
            );
        }
        for r in self.replay.iter().filter(|r| !r.errors.is_empty()) {
            let _ = writeln!(
                out,
                "\n{} {} rep {}: {:?}",
                r.server, r.reader, r.rep, r.errors
            );
        }
        let _ = writeln!(out, "\n{}", table_head("| rep | reader | Margin/peer events/s | Margin/peer all done | Margin/peer first byte |"));
        let pairs = paired(
            &self.replay,
            |r| r.server == MARGIN,
            |m, p| p.server == PEER && p.reader == m.reader && p.rep == m.rep,
        );
        for (m, p) in pairs {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} |",
                m.rep,
                m.reader,
                ratio(m.rate(), p.rate()),
                ratio(m.total.as_secs_f64(), p.total.as_secs_f64()),
                ratio(m.first_byte.as_secs_f64(), p.first_byte.as_secs_f64()),
            );
        }
    }
}
