//! The peer servers a bench measures Margin against: the runtime, listener
//! and socket options they share, in this process (its CPU told apart by
//! its threads' name) or as a child process (its memory read on its own).
//! What a peer answers is in a module of its own ([`super::link_peer`],
//! [`super::feed_peer`]).

use std::future::Future;
use std::net::SocketAddr;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::net::TcpListener;
use tokio::process::{Child, Command};

/// Thread name of the in-process peer's runtime: [`super::cpu::CpuSnap`]
/// counts these threads as the peer's CPU, not the client's.
pub(crate) const PEER_THREAD: &str = "peer-server";

/// The bench's own runtime, for its clients; its threads are named apart
/// from the in-process peer's, whose CPU is counted by thread name.
pub(crate) fn client_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .thread_name("bench-client")
        .enable_all()
        .build()
        .expect("cannot build the bench's tokio runtime")
}

/// Worker threads of a peer: as many as CPUs, like `margin`'s runtime.
pub(crate) fn workers() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get())
}

/// `PEER_NODELAY=1` sets TCP_NODELAY on the peer's sockets; by default
/// they keep Nagle on, as Margin's do (axum's default).
pub(crate) fn nodelay() -> bool {
    std::env::var("PEER_NODELAY").is_ok_and(|v| v == "1")
}

/// A listener on a free loopback port with the accept backlog `margin`
/// uses (`ACCEPT_BACKLOG` in `server/src/serve.rs`, 4096; tokio's
/// `TcpListener::bind` would ask for 128). Call within a runtime.
pub(crate) fn listener() -> TcpListener {
    let socket = tokio::net::TcpSocket::new_v4().expect("peer socket");
    socket.set_reuseaddr(true).expect("peer SO_REUSEADDR");
    socket
        .bind(SocketAddr::from(([127, 0, 0, 1], 0)))
        .expect("peer cannot bind");
    socket.listen(4096).expect("peer cannot listen")
}

/// Starts a peer on its own runtime in this process, on threads named
/// [`PEER_THREAD`]; `serve` gets its listener and runs as long as the
/// bench. Returns the peer's address.
pub(crate) fn spawn<F, Fut>(serve: F) -> SocketAddr
where
    F: FnOnce(TcpListener) -> Fut + Send + 'static,
    Fut: Future<Output = ()>,
{
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name(PEER_THREAD.into())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(workers())
                .thread_name(PEER_THREAD)
                .enable_all()
                .build()
                .expect("cannot build the peer's runtime");
            runtime.block_on(async move {
                let listener = listener();
                tx.send(listener.local_addr().expect("peer address"))
                    .expect("bench gone");
                serve(listener).await;
            });
        })
        .expect("cannot start the peer thread");
    rx.recv().expect("the peer did not start")
}

/// The child's side of [`PeerProcess`]: prints its address, serves with
/// `serve` and exits when the bench closes its stdin (or goes away).
pub(crate) fn serve_as_child<F, Fut>(serve: F)
where
    F: FnOnce(TcpListener) -> Fut,
    Fut: Future<Output = ()>,
{
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers())
        .enable_all()
        .build()
        .expect("cannot build the peer's runtime");
    runtime.block_on(async {
        let listener = listener();
        println!(
            "peer listening on {}",
            listener.local_addr().expect("peer address")
        );
        std::thread::spawn(|| {
            let mut line = String::new();
            while std::io::stdin().read_line(&mut line).is_ok_and(|n| n > 0) {}
            std::process::exit(0);
        });
        serve(listener).await;
    });
}

/// A peer run as a child process (this bench binary with `env`=`serve`),
/// so its memory can be read apart from the bench's.
pub(crate) struct PeerProcess {
    child: Child,
    pub(crate) pid: u32,
    pub(crate) addr: SocketAddr,
}

impl PeerProcess {
    pub(crate) async fn start(env: &str) -> PeerProcess {
        let exe = std::env::current_exe().expect("the bench's own path");
        let mut child = Command::new(exe)
            .arg("--bench")
            .env(env, "serve")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("cannot start the peer process");
        let pid = child.id().expect("the peer exited at once");
        let stdout = child.stdout.take().expect("peer stdout is piped");
        let mut lines = BufReader::new(stdout).lines();
        let addr = tokio::time::timeout(Duration::from_secs(10), async {
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(addr) = line.strip_prefix("peer listening on ") {
                    return addr
                        .parse::<SocketAddr>()
                        .expect("peer printed a bad address");
                }
            }
            panic!("the peer process exited before listening");
        })
        .await
        .expect("the peer process did not start within 10 s");
        PeerProcess { child, pid, addr }
    }

    /// Closes its stdin (it exits), killing it after 10 s.
    pub(crate) async fn stop(mut self) {
        drop(self.child.stdin.take());
        if tokio::time::timeout(Duration::from_secs(10), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }
}
