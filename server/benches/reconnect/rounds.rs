//! The reconnect bench's rounds: drop every link, wait until the server
//! and Chat show it, come back on fresh links, then resume; the server's
//! views over HTTP and its memory samples along the way.

use std::future::Future;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use futures_util::stream::{self, StreamExt};
use margin_protocol::chat::{ChatKind, ChatList};
use margin_protocol::link::{PlannerView, RunStatus};

use crate::support::cpu::{settle_process, CpuSnap, CpuUse, ServerCpu};
use crate::support::margin::Margin;
use crate::support::planner::Api;
use crate::support::process::{open_fds, rss_kib};

use crate::storm::{storm, Arrival, Links, Machine, StormFigures};
use crate::{Config, Result, DISCONNECTED, RECONNECTED};

/// What the server shows of the machines, over its HTTP API,
/// `concurrency` requests at a time.
pub(crate) struct Views {
    pub(crate) api: Api,
    pub(crate) concurrency: usize,
}

impl Views {
    pub(crate) async fn view(&self, machine: &Machine) -> Result<PlannerView> {
        Ok(self.api.planner(&machine.token, &machine.document).await?)
    }

    /// (DISCONNECTED, RECONNECTED, other system lines) in the document's Chat.
    async fn system_lines(&self, machine: &Machine) -> Result<(usize, usize, Vec<String>)> {
        let path = format!("/documents/{}/chat", machine.document);
        let chat: ChatList = self.api.get(&machine.token, &path).await?;
        let (mut down, mut back, mut other) = (0, 0, Vec::new());
        for message in chat.messages {
            if message.kind != ChatKind::System {
                continue;
            }
            match message.text.as_str() {
                DISCONNECTED => down += 1,
                RECONNECTED => back += 1,
                _ => other.push(message.text),
            }
        }
        Ok((down, back, other))
    }

    pub(crate) async fn say(&self, machine: &Machine, text: &str) -> Result<()> {
        self.api
            .chat(&machine.token, &machine.document, text)
            .await?;
        Ok(())
    }

    /// Polls every machine until `check` holds for all of them; the time
    /// from `since` until it did. Machines already done are not asked again.
    pub(crate) async fn until_all<'m, F, Fut>(
        &self,
        machines: &'m [Machine],
        since: Instant,
        timeout: Duration,
        what: &str,
        check: F,
    ) -> Result<Duration>
    where
        F: Fn(&'m Machine) -> Fut,
        Fut: Future<Output = Result<bool>>,
    {
        let mut left: Vec<usize> = (0..machines.len()).collect();
        let mut last_error = None;
        loop {
            let results: Vec<(usize, Result<bool>)> = stream::iter(left.iter().copied())
                .map(|i| {
                    let fut = check(&machines[i]);
                    async move { (i, fut.await) }
                })
                .buffer_unordered(self.concurrency)
                .collect()
                .await;
            left.clear();
            for (i, result) in results {
                match result {
                    Ok(true) => {}
                    Ok(false) => left.push(i),
                    Err(e) => {
                        last_error = Some(e.to_string());
                        left.push(i);
                    }
                }
            }
            if left.is_empty() {
                return Ok(since.elapsed());
            }
            if since.elapsed() > timeout {
                return Err(format!(
                    "{what}: {} of {} machines still not there after {timeout:?} (last error: {last_error:?})",
                    left.len(),
                    machines.len()
                )
                .into());
            }
            left.sort_unstable();
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// The server's memory and open descriptors at one point.
pub(crate) struct Sample {
    pub(crate) label: String,
    pub(crate) rss: f64,
    pub(crate) fds: usize,
}

pub(crate) fn sample(server: &Margin, label: impl Into<String>) -> Sample {
    let sample = Sample {
        label: label.into(),
        rss: rss_kib(server.pid).unwrap_or(0) as f64 / 1024.0,
        fds: open_fds(server.pid),
    };
    eprintln!(
        "  memory: {} — VmRSS {:.1} MiB, {} fds",
        sample.label, sample.rss, sample.fds
    );
    sample
}

pub(crate) struct Round {
    pub(crate) noticed: Duration,
    pub(crate) chat_said: Duration,
    pub(crate) fresh: StormFigures,
    pub(crate) resume: StormFigures,
    pub(crate) cards_back: Duration,
    pub(crate) cpu: CpuUse,
}

/// What every round works on: the knobs, the server, its machines and its
/// HTTP API.
pub(crate) struct Stage<'a> {
    pub(crate) config: &'a Config,
    pub(crate) server: &'a Margin,
    pub(crate) machines: &'a [Machine],
    pub(crate) api: &'a Views,
}

/// One round: every link dropped at once; wait for the server and Chat to
/// notice; away for `AWAY_SECS`; the same machines on fresh links (the
/// peer figure), cut again; then the storm of resumes, checked machine by
/// machine. Returns the resumed links and the round's figures.
pub(crate) async fn run_round(
    round: usize,
    stage: &Stage<'_>,
    mut links: Links,
    memory: &mut Vec<Sample>,
    problems: &mut Vec<String>,
) -> Result<(Links, Round)> {
    let Stage {
        config,
        server,
        machines,
        api,
    } = *stage;
    let n = config.machines;
    eprintln!("round {round}:");
    let round_cpu = CpuSnap::take(ServerCpu::Process(server.pid));
    memory.push(sample(server, format!("round {round}: before the drop")));
    let cut_at = links.abort().await;
    let noticed = api
        .until_all(
            machines,
            cut_at,
            config.timeout,
            "server noticed the drop",
            |m| async move {
                let view = api.view(m).await?;
                Ok(view.disconnected && !view.connected)
            },
        )
        .await?;
    memory.push(sample(
        server,
        format!("round {round}: all shown disconnected"),
    ));
    let chat_said = api
        .until_all(
            machines,
            cut_at,
            config.timeout,
            "Chat says disconnected",
            |m| async move { Ok(api.system_lines(m).await?.0 == round) },
        )
        .await?;
    eprintln!(
        "  all {n} shown disconnected after {noticed:.1?}, Chat said so after {chat_said:.1?}"
    );
    tokio::time::sleep(config.away).await;
    memory.push(sample(
        server,
        format!("round {round}: away, {:?} later", config.away),
    ));

    // Peer: the same N machines, fresh links, no resume.
    let (fresh_links, fresh, _) = storm(server, machines, false, config.timeout).await?;
    fresh.print("fresh links (peer)");
    if fresh.failed > 0 {
        problems.push(format!(
            "round {round}: {} fresh links failed: {:?}",
            fresh.failed, fresh.errors
        ));
    }
    memory.push(sample(
        server,
        format!("round {round}: {n} fresh links open, sessions away"),
    ));
    fresh_links.abort().await;
    settle_process(server.pid).await;
    memory.push(sample(
        server,
        format!("round {round}: fresh links cut, sessions away"),
    ));

    // The storm: every machine comes back and resumes its session.
    let (resumed_links, resume, arrivals) = storm(server, machines, true, config.timeout).await?;
    links = resumed_links;
    resume.print("resume");
    if resume.failed > 0 {
        problems.push(format!(
            "round {round}: {} resumes failed: {:?}",
            resume.failed, resume.errors
        ));
    }
    for (machine, arrival) in machines.iter().zip(&arrivals) {
        let Some(Arrival {
            resumed: Some((sessions, ended)),
            ..
        }) = arrival
        else {
            continue;
        };
        let session = machine.seen.session().unwrap_or_default();
        let carried = sessions.len() == 1
            && sessions[0].session == session
            && sessions[0].document == machine.document
            && sessions[0].withdrawn.is_empty();
        if !carried || !ended.is_empty() {
            problems.push(format!(
                "round {round}: document {} resumed {sessions:?}, ended {ended:?}",
                machine.document
            ));
        }
    }
    let checked = Instant::now();
    let cards_back = api
        .until_all(
            machines,
            checked,
            config.timeout,
            "run cards back",
            |m| async move {
                let view = api.view(m).await?;
                Ok(view.connected
                    && !view.disconnected
                    && view.runs.len() == 1
                    && view.runs[0].status == RunStatus::Running
                    && !view.runs[0].disconnected)
            },
        )
        .await;
    let cards_back = match cards_back {
        Ok(d) => d,
        Err(e) => {
            problems.push(format!("round {round}: {e}"));
            Duration::ZERO
        }
    };
    let said = api
        .until_all(
            machines,
            checked,
            config.timeout,
            "Chat says reconnected",
            |m| async move {
                let (down, back, other) = api.system_lines(m).await?;
                if !other.is_empty() {
                    return Err(format!("unexpected Chat lines: {other:?}").into());
                }
                Ok(down == round && back == round)
            },
        )
        .await;
    if let Err(e) = said {
        problems.push(format!("round {round}: {e}"));
    }
    // Give a stray invoke time to arrive before counting.
    settle_process(server.pid).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    for machine in machines {
        let invokes = machine.seen.invokes.load(Ordering::SeqCst);
        if invokes != 1 {
            problems.push(format!(
                "round {round}: document {} got {invokes} invokes",
                machine.document
            ));
        }
        let unexpected = std::mem::take(
            &mut *machine
                .seen
                .unexpected
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
        );
        if !unexpected.is_empty() {
            problems.push(format!(
                "round {round}: document {}: {unexpected:?}",
                machine.document
            ));
        }
    }
    memory.push(sample(server, format!("round {round}: all resumed")));
    eprintln!("  run cards back {cards_back:.1?} after the check began");
    Ok((
        links,
        Round {
            noticed,
            chat_said,
            fresh,
            resume,
            cards_back,
            cpu: round_cpu.since(ServerCpu::Process(server.pid)),
        },
    ))
}
