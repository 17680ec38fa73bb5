//! The reconnect bench's storm: the machines (accounts written before the
//! server starts), their links and what each Planner answers on one, and
//! `storm`, which links every machine at once, fresh or resuming its
//! session, and times each step.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::stream::StreamExt;
use margin_protocol::link::{
    ClientMessage, HeldSession, ResumedSession, RunStatus, ServerMessage, RESUMABLE_SESSIONS,
};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_tungstenite::MaybeTlsStream;
use tokio_util::sync::CancellationToken;

use crate::support::accounts::planners;
use crate::support::cpu::{CpuSnap, CpuUse, ServerCpu};
use crate::support::machine::{frame, hello, next_message, request, send, Frame, Ws};
use crate::support::margin::Margin;
use crate::support::process::{TcpCounters, ACCEPT_QUEUE};

use crate::{Error, Result, RUN_ID};

/// What one machine saw across all its links.
#[derive(Default)]
pub(crate) struct Seen {
    pub(crate) invokes: AtomicUsize,
    session: Mutex<Option<String>>,
    /// Anything a Planner in use should not get: refusals, closes, errors.
    pub(crate) unexpected: Mutex<Vec<String>>,
}

impl Seen {
    fn note(&self, what: String) {
        self.unexpected
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(what);
    }

    pub(crate) fn session(&self) -> Option<String> {
        self.session
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

pub(crate) struct Machine {
    pub(crate) token: String,
    credential: String,
    pub(crate) document: String,
    pub(crate) seen: Arc<Seen>,
}

/// N accounts, each with a token, a document and a paired machine, written
/// straight into the store the server will open.
pub(crate) async fn set_up(data: &std::path::Path, n: usize) -> Result<Vec<Machine>> {
    Ok(planners(data, "storm-", n)
        .await
        .into_iter()
        .map(|m| Machine {
            token: m.token,
            credential: m.credential.expect("a paired machine"),
            document: m.document.expect("a document"),
            seen: Arc::default(),
        })
        .collect())
}

/// A TCP connection that a drop aborts (RST, no FIN, no close frame), with
/// the machine link's upgrade done; when TCP connected and the upgrade was
/// answered, since `t0`.
async fn connect(
    addr: SocketAddr,
    credential: &str,
    t0: Instant,
) -> Result<(Ws, Duration, Duration)> {
    let tcp = TcpStream::connect(addr).await?;
    let connected = t0.elapsed();
    tcp.set_zero_linger()?;
    tcp.set_nodelay(true)?;
    let request = request(addr, Some(credential))?;
    let (ws, _) = tokio_tungstenite::client_async(request, MaybeTlsStream::Plain(tcp)).await?;
    Ok((ws, connected, t0.elapsed()))
}

/// A machine's Planner on an open link until `cut`: answers heartbeats; for
/// an `invoke` reports a live run and replies; notes anything else. On
/// `cut` it drops the socket without a close frame.
async fn planner(mut ws: Ws, seen: Arc<Seen>, cut: CancellationToken) {
    loop {
        let next = tokio::select! {
            _ = cut.cancelled() => return,
            next = ws.next() => next,
        };
        let answered = match frame(next) {
            Frame::Message(ServerMessage::Heartbeat { seq }, _) => {
                send(&mut ws, &ClientMessage::HeartbeatAck { seq }).await
            }
            Frame::Message(ServerMessage::Invoke { session, turn, .. }, _) => {
                seen.invokes.fetch_add(1, Ordering::SeqCst);
                {
                    let mut held = seen.session.lock().unwrap_or_else(|e| e.into_inner());
                    match held.as_deref() {
                        Some(s) if s != session => {
                            seen.note(format!("an invoke for another session {session}"))
                        }
                        _ => *held = Some(session.clone()),
                    }
                }
                let run = ClientMessage::Run {
                    session: session.clone(),
                    run: RUN_ID.into(),
                    name: "Storm run".into(),
                    status: RunStatus::Running,
                    attempt: None,
                };
                let reply = ClientMessage::Reply {
                    session,
                    turn,
                    text: "Working on it.".into(),
                };
                match send(&mut ws, &run).await {
                    Ok(()) => send(&mut ws, &reply).await,
                    Err(e) => Err(e),
                }
            }
            Frame::Message(ServerMessage::Credential { .. }, _) | Frame::Other => Ok(()),
            Frame::Message(other, _) => {
                seen.note(format!("unexpected: {other:?}"));
                Ok(())
            }
            Frame::Closed(why) => {
                seen.note(format!("the link closed: {why}"));
                return;
            }
        };
        if let Err(e) = answered {
            seen.note(format!("send failed: {e}"));
            return;
        }
    }
}

/// One machine's part in a storm, in time since the storm was released.
pub(crate) struct Arrival {
    /// TCP connected (a SYN the kernel dropped is retried after 1 s).
    connected: Duration,
    /// The WebSocket upgrade answered (the credential checked).
    upgraded: Duration,
    welcome: Duration,
    /// `resumed` (resume storm) or `welcome` (fresh storm).
    done: Duration,
    pub(crate) resumed: Option<(Vec<ResumedSession>, Vec<String>)>,
}

/// Connects, says `hello` and, with `resume`, resumes the held session.
async fn handshake(
    addr: SocketAddr,
    credential: &str,
    resume: Option<String>,
    t0: Instant,
) -> Result<(Ws, Arrival)> {
    let (mut ws, connected, upgraded) = connect(addr, credential, t0).await?;
    let granted = hello(&mut ws).await?;
    if !granted.features.iter().any(|f| f == RESUMABLE_SESSIONS) {
        return Err(format!("expected a resumable welcome, got {granted:?}").into());
    }
    let welcome = t0.elapsed();
    let Some(session) = resume else {
        return Ok((
            ws,
            Arrival {
                connected,
                upgraded,
                welcome,
                done: welcome,
                resumed: None,
            },
        ));
    };
    let resume = ClientMessage::Resume {
        sessions: vec![HeldSession {
            session,
            questions: Vec::new(),
            turn: None,
            calls: Vec::new(),
        }],
    };
    send(&mut ws, &resume).await?;
    match next_message(&mut ws).await? {
        (ServerMessage::Resumed { sessions, ended }, _) => {
            let done = t0.elapsed();
            Ok((
                ws,
                Arrival {
                    connected,
                    upgraded,
                    welcome,
                    done,
                    resumed: Some((sessions, ended)),
                },
            ))
        }
        (other, _) => Err(format!("expected resumed, got {other:?}").into()),
    }
}

/// N open links, each served by [`planner`] until `cut` fires.
pub(crate) struct Links {
    cut: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
}

impl Links {
    /// Drops every link at once, without a close frame; returns when every
    /// socket is closed.
    pub(crate) async fn abort(self) -> Instant {
        let at = Instant::now();
        self.cut.cancel();
        for task in self.tasks {
            let _ = task.await;
        }
        at
    }
}

/// What a storm measured.
#[derive(Clone, Debug, Default)]
pub(crate) struct StormFigures {
    pub(crate) machines: usize,
    pub(crate) failed: usize,
    pub(crate) errors: Vec<String>,
    /// Per machine: time to TCP connected, to the upgrade, to `welcome`,
    /// and to done (`resumed`, or `welcome`).
    pub(crate) connected: Vec<Duration>,
    pub(crate) upgraded: Vec<Duration>,
    pub(crate) welcome: Vec<Duration>,
    pub(crate) done: Vec<Duration>,
    pub(crate) cpu: CpuUse,
    /// The machine-wide [`ACCEPT_QUEUE`] counters over the storm.
    pub(crate) tcp: Option<TcpCounters<{ ACCEPT_QUEUE.len() }>>,
}

impl StormFigures {
    /// Machines whose TCP connect took a SYN retry (≥ 1 s).
    pub(crate) fn retried(&self) -> usize {
        self.connected
            .iter()
            .filter(|d| **d >= Duration::from_millis(1000))
            .count()
    }
}

impl StormFigures {
    pub(crate) fn wall(&self) -> Duration {
        self.done.iter().max().copied().unwrap_or_default()
    }
}

/// Every machine links at once (each client task waits at a gate until
/// all are spawned); with `resume`, each then resumes its session.
pub(crate) async fn storm(
    server: &Margin,
    machines: &[Machine],
    resume: bool,
    timeout: Duration,
) -> Result<(Links, StormFigures, Vec<Option<Arrival>>)> {
    let (go, gate) = watch::channel(None::<Instant>);
    let cut = CancellationToken::new();
    let mut tasks = Vec::with_capacity(machines.len());
    for machine in machines {
        let mut gate = gate.clone();
        let addr = server.addr;
        let credential = machine.credential.clone();
        let seen = machine.seen.clone();
        let held = if resume {
            Some(seen.session().ok_or("a machine has no session to resume")?)
        } else {
            None
        };
        let cut = cut.clone();
        tasks.push(tokio::spawn(async move {
            let t0 = match gate.wait_for(Option::is_some).await {
                Ok(t0) => t0.unwrap_or_else(Instant::now),
                Err(_) => return Err::<_, Error>("the storm was never released".into()),
            };
            let (ws, arrival) =
                tokio::time::timeout(timeout, handshake(addr, &credential, held, t0))
                    .await
                    .map_err(|_| format!("no answer within {timeout:?}"))??;
            let serving = tokio::spawn(planner(ws, seen, cut));
            Ok((arrival, serving))
        }));
    }
    // Let every task reach the gate before releasing them together.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let cpu = ServerCpu::Process(server.pid);
    let mark = CpuSnap::take(cpu);
    let tcp = TcpCounters::now(ACCEPT_QUEUE);
    let _ = go.send(Some(Instant::now()));
    let mut figures = StormFigures {
        machines: machines.len(),
        ..Default::default()
    };
    let mut arrivals = Vec::with_capacity(machines.len());
    let mut serving = Vec::with_capacity(machines.len());
    for task in tasks {
        match task.await {
            Ok(Ok((arrival, link))) => {
                figures.connected.push(arrival.connected);
                figures.upgraded.push(arrival.upgraded);
                figures.welcome.push(arrival.welcome);
                figures.done.push(arrival.done);
                arrivals.push(Some(arrival));
                serving.push(link);
            }
            Ok(Err(e)) => {
                figures.failed += 1;
                if figures.errors.len() < 5 {
                    figures.errors.push(e.to_string());
                }
                arrivals.push(None);
            }
            Err(e) => {
                figures.failed += 1;
                figures.errors.push(format!("a client task failed: {e}"));
                arrivals.push(None);
            }
        }
    }
    figures.cpu = mark.since(cpu);
    figures.tcp = Some(tcp.since());
    Ok((
        Links {
            cut,
            tasks: serving,
        },
        figures,
        arrivals,
    ))
}
