//! Running the server until SIGINT/SIGTERM, then shutting down gracefully:
//! sockets are closed with "going away", document tasks write their final
//! snapshots, and storage is closed.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::http::{router, AppState};
use crate::storage::Store;
use crate::sync::{Compaction, Hub};

/// Longest wait for document tasks at shutdown.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(15);

/// Server settings.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// Where to listen.
    pub listen: SocketAddr,
    /// Snapshot compaction.
    pub compaction: Compaction,
}

impl ServeOptions {
    /// Defaults, listening on `listen`.
    pub fn new(listen: SocketAddr) -> Self {
        ServeOptions {
            listen,
            compaction: Compaction::default(),
        }
    }
}

/// Why the server stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The listener failed.
    #[error("server failed: {0}")]
    Io(#[from] std::io::Error),
}

/// Serves until a shutdown signal.
pub async fn serve(store: Store, options: ServeOptions) -> Result<(), ServeError> {
    let listener = TcpListener::bind(options.listen)
        .await
        .map_err(|source| ServeError::Bind {
            addr: options.listen,
            source,
        })?;
    let addr = listener.local_addr()?;
    let tracker = TaskTracker::new();
    let shutdown = CancellationToken::new();
    let hub = Hub::new(
        store.clone(),
        tracker.clone(),
        shutdown.clone(),
        options.compaction,
    );
    let app = router(AppState { hub });

    tracing::info!(%addr, backend = ?store.backend(), "listening");
    // Tests and scripts read the bound address (useful with port 0).
    println!("margin listening on http://{addr}");

    tokio::spawn(signal_shutdown(shutdown.clone()));
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown.clone().cancelled_owned())
        .await?;

    tracker.close();
    if tokio::time::timeout(DRAIN_TIMEOUT, tracker.wait())
        .await
        .is_err()
    {
        tracing::warn!(
            "document tasks did not finish in time; everything acknowledged is already committed"
        );
    }
    store.close().await;
    tracing::info!("stopped");
    Ok(())
}

async fn signal_shutdown(shutdown: CancellationToken) {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = ctrl_c => {},
                    _ = term.recv() => {},
                }
            }
            Err(_) => {
                let _ = ctrl_c.await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
    tracing::info!("shutting down");
    shutdown.cancel();
}
