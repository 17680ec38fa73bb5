//! A loopback TCP proxy that can cut every connection through it at once:
//! a machine's link dropping without a close, as when Wi-Fi goes.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

pub struct Proxy {
    pub addr: SocketAddr,
    /// Where new connections go.
    upstream: Arc<Mutex<SocketAddr>>,
    connections: Arc<Mutex<Vec<JoinHandle<()>>>>,
    accept: JoinHandle<()>,
}

impl Proxy {
    /// Forwards connections on a free port to `upstream`.
    pub async fn to(upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let connections: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let tracked = connections.clone();
        let target = Arc::new(Mutex::new(upstream));
        let current = target.clone();
        let accept = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let upstream = *current.lock().unwrap();
                let pipe = tokio::spawn(async move {
                    if let Ok(mut outbound) = TcpStream::connect(upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                tracked.lock().unwrap().push(pipe);
            }
        });
        Proxy {
            addr,
            upstream: target,
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
        for pipe in self.connections.lock().unwrap().drain(..) {
            pipe.abort();
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut();
    }
}
