//! `margin serve`: the server, with the demo Planner when asked.

use std::net::SocketAddr;
use std::num::NonZeroUsize;

use clap::Args;

use super::{CliError, Database};
use crate::admission::Limits;
use crate::auth;
use crate::cluster::ClusterSettings;
use crate::demo::Demo;
use crate::http::{Cidr, TrustedProxies};
use crate::link::LinkSettings;
use crate::serve::{start, Running, ServeOptions, Signals};
use crate::storage::Deadlines;

/// `margin serve`'s flags.
#[derive(Debug, Args)]
pub(super) struct ServeArgs {
    #[command(flatten)]
    database: Database,
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, env = "MARGIN_LISTEN", default_value = "127.0.0.1:7070")]
    listen: SocketAddr,
    /// How long an idle Planner session with nobody viewing is kept, in ms
    /// (SPEC P3).
    #[arg(long, env = "MARGIN_PLANNER_IDLE_MS", default_value_t = margin_planner::DEFAULT_IDLE.0)]
    planner_idle_ms: u64,
    /// How long a detached link's Planner sessions (or a dropped link's
    /// with nothing to keep) wait for the machine, in ms (SPEC L7).
    #[arg(long, env = "MARGIN_PLANNER_ATTACH_GRACE_MS", default_value_t = margin_planner::DEFAULT_ATTACH_GRACE.0)]
    planner_attach_grace_ms: u64,
    /// How many events each Planner session keeps behind its snapshot
    /// for applications to replay; a cursor further back resyncs (SPEC
    /// E2).
    #[arg(long, env = "MARGIN_SESSION_EVENTS_RETAINED", default_value_t = crate::sessions::DEFAULT_RETAINED, value_parser = clap::value_parser!(u64).range(1..))]
    session_events_retained: u64,
    /// How many Planner reads each document remembers (SPEC S5).
    #[arg(long, env = "MARGIN_REMEMBERED_READS", default_value_t = NonZeroUsize::new(margin_decisions::DEFAULT_READS).unwrap_or(NonZeroUsize::MIN))]
    remembered_reads: NonZeroUsize,
    /// Open HTTP connections in all; lowered to what the process's
    /// file-descriptor limit leaves room for (SPEC A3).
    #[arg(long, env = "MARGIN_MAX_CONNECTIONS", default_value_t = Limits::default().connections as u32, value_parser = clap::value_parser!(u32).range(1..))]
    max_connections: u32,
    /// Open HTTP connections from one IP address.
    #[arg(long, env = "MARGIN_MAX_CONNECTIONS_PER_ADDRESS", default_value_t = Limits::default().per_address as u32, value_parser = clap::value_parser!(u32).range(1..))]
    max_connections_per_address: u32,
    /// How long a request head may take to arrive, in ms.
    #[arg(long, env = "MARGIN_HEADER_TIMEOUT_MS", default_value_t = Limits::default().header_timeout.as_millis() as u64, value_parser = clap::value_parser!(u64).range(1..))]
    header_timeout_ms: u64,
    /// How long a request body may take to arrive, in ms.
    #[arg(long, env = "MARGIN_BODY_TIMEOUT_MS", default_value_t = Limits::default().body_timeout.as_millis() as u64, value_parser = clap::value_parser!(u64).range(1..))]
    body_timeout_ms: u64,
    /// How often each machine link is sent a heartbeat, in ms; a link that
    /// leaves three unanswered is closed as unresponsive (SPEC L2). Shorter
    /// finds a dead link sooner, and lets a machine use a shorter silence
    /// limit (behind a proxy that closes idle connections, say).
    #[arg(long, env = "MARGIN_HEARTBEAT_MS", default_value_t = LinkSettings::default().heartbeat.as_millis() as u64, value_parser = clap::value_parser!(u64).range(100..))]
    heartbeat_ms: u64,
    /// How long, after SIGTERM, the server keeps serving with `/readyz`
    /// answering 503, so a load balancer stops sending it new connections
    /// before it stops (SPEC C4, O1); a second signal ends the wait.
    #[arg(long, env = "MARGIN_DRAIN_SECONDS", default_value_t = 5, value_parser = clap::value_parser!(u64).range(0..=600))]
    drain_seconds: u64,
    /// Run as one node of a cluster sharing this PostgreSQL database
    /// with other `--cluster` nodes (SPEC C1–C4; docs/operations.md,
    /// "Running several servers").
    #[arg(long, env = "MARGIN_CLUSTER", conflicts_with = "demo_planner")]
    cluster: bool,
    /// In a cluster: the URL the other nodes reach this one at
    /// (`http://HOST:PORT`); by default the address it listens on,
    /// which must then not be 0.0.0.0 or [::].
    #[arg(
        long,
        env = "MARGIN_ADVERTISE",
        value_name = "URL",
        requires = "cluster"
    )]
    advertise: Option<String>,
    /// In a cluster: how long a node owns its documents after its last
    /// lease renewal, in ms; another node takes them once it passes.
    #[arg(long, env = "MARGIN_LEASE_TTL_MS", default_value_t = ClusterSettings::default().lease_ttl.as_millis() as u64, value_parser = clap::value_parser!(u64).range(1..))]
    lease_ttl_ms: u64,
    /// In a cluster: how often a node renews its lease, in ms (at most
    /// a third of the TTL).
    #[arg(long, env = "MARGIN_LEASE_RENEW_MS", default_value_t = ClusterSettings::default().renew_every.as_millis() as u64, value_parser = clap::value_parser!(u64).range(1..))]
    lease_renew_ms: u64,
    /// A reverse proxy in front of the server: an address or a block
    /// (`10.0.0.0/8`, `::1`); repeat the flag, or separate several with
    /// commas. When a request's peer is one of them, its failed sign-ins
    /// count against the client the proxy forwarded it for: the
    /// right-most address of `X-Forwarded-For` that is not itself a
    /// trusted proxy, or, without that header, of `Forwarded: for=`.
    /// From any other peer both headers are ignored (SPEC A3b).
    #[arg(
        long = "trusted-proxy",
        env = "MARGIN_TRUSTED_PROXY",
        value_name = "CIDR",
        value_delimiter = ','
    )]
    trusted_proxies: Vec<Cidr>,
    /// Also run the demo Planner for ACCOUNT (created if missing; default
    /// `demo`): pairs a machine, links it over a real socket, prints a
    /// token for the editor and adds a sample document.
    #[arg(long, value_name = "ACCOUNT", num_args = 0..=1, default_missing_value = "demo")]
    demo_planner: Option<String>,
}

/// Runs the server until a signal, with the demo Planner when asked.
pub(super) async fn serve(args: ServeArgs) -> Result<(), CliError> {
    let ServeArgs {
        database,
        listen,
        planner_idle_ms,
        planner_attach_grace_ms,
        session_events_retained,
        remembered_reads,
        max_connections,
        max_connections_per_address,
        header_timeout_ms,
        body_timeout_ms,
        heartbeat_ms,
        drain_seconds,
        cluster,
        advertise,
        lease_ttl_ms,
        lease_renew_ms,
        trusted_proxies,
        demo_planner,
    } = args;
    // Everything that can be checked is checked before the port opens.
    if let Some(account) = &demo_planner {
        auth::valid_account_name(account).map_err(|why| CliError::DemoAccount {
            name: account.clone(),
            why,
        })?;
    }
    // Heard from here on: a stop asked for while starting drains once up.
    let mut signals = Signals::listen().map_err(CliError::Signals)?;
    let lease_ttl = std::time::Duration::from_millis(lease_ttl_ms);
    // A node's transactions end before its lease can (SPEC C5).
    let store = database
        .open_with(cluster.then(|| Deadlines::for_lease(lease_ttl)))
        .await?;
    let mut options = ServeOptions::new(listen);
    options.hub.read_capacity = remembered_reads;
    options.planner_idle = std::time::Duration::from_millis(planner_idle_ms);
    options.attach_grace = std::time::Duration::from_millis(planner_attach_grace_ms);
    options.session_events_retained = session_events_retained;
    options.limits = Limits {
        connections: max_connections as usize,
        per_address: max_connections_per_address as usize,
        header_timeout: std::time::Duration::from_millis(header_timeout_ms),
        body_timeout: std::time::Duration::from_millis(body_timeout_ms),
    };
    options.links.heartbeat = std::time::Duration::from_millis(heartbeat_ms);
    options.cluster = cluster.then(|| ClusterSettings {
        advertise,
        lease_ttl,
        renew_every: std::time::Duration::from_millis(lease_renew_ms),
    });
    options.trusted_proxies = TrustedProxies::new(trusted_proxies);
    let running = start(store, options).await?;
    // Tests and scripts read the bound address (useful with port 0).
    println!("margin listening on http://{}", running.addr);
    let demo = match demo_planner {
        Some(account) => match Demo::start(&running, &account, &database.data).await {
            Ok(demo) => Some(announce(&running, demo)),
            Err(e) => {
                running.stop().await?;
                return Err(e.into());
            }
        },
        None => None,
    };
    signals.recv().await;
    running.begin_draining();
    tokio::select! {
        () = tokio::time::sleep(std::time::Duration::from_secs(drain_seconds)) => {}
        () = signals.recv() => {}
    }
    if let Some(demo) = demo {
        demo.stop().await;
    }
    running.stop().await?;
    Ok(())
}

/// Prints how to watch the demo Planner; the token is the last line.
fn announce(running: &Running, demo: Demo) -> Demo {
    println!(
        "demo Planner linked for account {}; open http://{}/ with this token",
        demo.account.name, running.addr
    );
    if demo.document.is_some() {
        println!("then open \"Beta launch (demo)\" and write @planner in its Chat");
    }
    println!("{}", demo.token);
    demo
}
