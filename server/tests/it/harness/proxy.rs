//! A loopback TCP proxy that can cut every connection through it at once —
//! a machine's link dropping without a close, as when Wi-Fi goes — or
//! partition them: both sockets stay open and every byte either way is
//! dropped, so neither end learns the link died and what each writes into
//! it is lost.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// A connection through the proxy: its pipe, and whether it is partitioned.
struct Connection {
    pipe: JoinHandle<()>,
    silenced: Arc<AtomicBool>,
}

pub struct Proxy {
    pub addr: SocketAddr,
    /// Where new connections go.
    upstream: Arc<Mutex<SocketAddr>>,
    /// Whether new connections are silenced from the start.
    dark: Arc<AtomicBool>,
    connections: Arc<Mutex<Vec<Connection>>>,
    accept: JoinHandle<()>,
}

impl Proxy {
    /// Forwards connections on a free port to `upstream`.
    pub async fn to(upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let connections: Arc<Mutex<Vec<Connection>>> = Arc::default();
        let tracked = connections.clone();
        let target = Arc::new(Mutex::new(upstream));
        let current = target.clone();
        let dark = Arc::new(AtomicBool::new(false));
        let darkened = dark.clone();
        let accept = tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                let upstream = *current.lock().unwrap();
                let silenced = Arc::new(AtomicBool::new(darkened.load(Ordering::SeqCst)));
                let quiet = silenced.clone();
                let pipe = tokio::spawn(async move {
                    if let Ok(outbound) = TcpStream::connect(upstream).await {
                        let (from_in, to_in) = inbound.into_split();
                        let (from_out, to_out) = outbound.into_split();
                        tokio::join!(
                            forward(from_in, to_out, quiet.clone()),
                            forward(from_out, to_in, quiet),
                        );
                    }
                });
                tracked.lock().unwrap().push(Connection { pipe, silenced });
            }
        });
        Proxy {
            addr,
            upstream: target,
            dark,
            connections,
            accept,
        }
    }

    /// Sends new connections to `upstream` from now on (a server restarted
    /// on another port).
    pub fn retarget(&self, upstream: SocketAddr) {
        *self.upstream.lock().unwrap() = upstream;
    }

    /// Drops every open connection without a WebSocket close.
    pub fn cut(&self) {
        for connection in self.connections.lock().unwrap().drain(..) {
            connection.pipe.abort();
        }
    }

    /// Black-holes everything through it, both ways: the open connections
    /// are silenced, and new ones are taken and silenced from the start, as
    /// a network that drops every packet.
    pub fn black_hole(&self) {
        self.dark.store(true, Ordering::SeqCst);
        self.partition();
    }

    /// Silences every open connection: from now on each drops what either
    /// end sends, with both sockets kept open. New connections pass.
    pub fn partition(&self) {
        for connection in self.connections.lock().unwrap().iter() {
            connection.silenced.store(true, Ordering::SeqCst);
        }
    }
}

/// Copies `from` to `to` until either closes, dropping the bytes once
/// `silenced`.
async fn forward(
    mut from: impl AsyncRead + Unpin,
    mut to: impl AsyncWrite + Unpin,
    silenced: Arc<AtomicBool>,
) {
    let mut buffer = vec![0; 16 * 1024];
    loop {
        let read = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(read) => read,
        };
        if silenced.load(Ordering::SeqCst) {
            continue;
        }
        if to.write_all(&buffer[..read]).await.is_err() {
            break;
        }
    }
    if !silenced.load(Ordering::SeqCst) {
        let _ = to.shutdown().await;
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut();
    }
}
