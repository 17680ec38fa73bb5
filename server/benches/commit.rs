//! The durable commit an edit costs, and its floors (SPEC S3, O5): what
//! Margin's store spends to commit one editor's change on SQLite, beside
//! a bare SQLite commit of one row and the disk's own write and sync, in
//! the same process and the same minutes. Issue 43's light-load target
//! allows Margin y-sweet's figures plus the sync; this bench says how much
//! of the rest is SQLite's commit and how much is Margin's own statements.
//! Results and how to read them: `server/benches/results/commit.md`.
//!
//! ```sh
//! cargo bench -p margin-server --bench commit
//! COMMITS=500 REPEAT=1 cargo bench -p margin-server --bench commit   # a quick look
//! ```
//!
//! Three ways to make one change durable, and a pass that makes nothing
//! durable, each `COMMITS` times at `RATE` a second (open loop, as an
//! editor types) from a task on the runtime's workers, in turn, `REPEAT`
//! rounds, each in a fresh temp folder on the disk the servers' data dirs
//! use:
//!
//! * **none** — the paced loop alone (a yield where the commit would be):
//!   its timer and wake-ups, which every other way pays too.
//! * **sync** — a 4 KiB block written at the next offset of a file, then
//!   `fdatasync`, on the blocking pool (as the peers bench measures the
//!   disk): what a log of our own would pay, and all durability owes.
//! * **sqlite** — `INSERT` of one `CHANGE_BYTES` row into a table of its
//!   own in autocommit, through a one-connection `sqlx` pool with the
//!   store's pragmas (WAL, `synchronous = FULL`): SQLite's commit, and
//!   `sqlx`'s hand-off to its worker thread, with no statement of ours.
//! * **margin** — `Store::append_updates` of one `CHANGE_BYTES` change to
//!   one document, fenced by its revision and owner epoch (SPEC W3), as a
//!   document task commits an editor's change: the group committer's one
//!   round trip and its statements.
//!
//! Each commit is timed from its call to its return (wall), and the
//! process's CPU over the run (`CLOCK_PROCESS_CPUTIME_ID`, ended threads
//! included) is divided by the commits:
//! the bench is alone in its process, so that is the commit's CPU, hand-
//! offs and threads included. "a delivery at 50" divides it by the 50
//! receivers of the peers bench's light-load rows, to read beside their
//! CPU per delivery.
//!
//! Knobs (env vars): `COMMITS` (3000 a run), `RATE` (200 a second),
//! `CHANGE_BYTES` (32: a typed word's update), `REPEAT` (3 rounds),
//! `QUIET_WAIT_SECONDS` (30: before each run, wait up to this long for
//! the machine to be idle), `WAYS` (`none,sync,sqlite,margin`: which to run,
//! in that order). The defaults take about 3 minutes.

// Each bench uses part of the shared helpers.
#[allow(dead_code)]
mod support;

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, Instant};

use margin_server::storage::{Epoch, Store};
use sqlx::any::AnyPoolOptions;
use sqlx::{AnyPool, Executor};

use support::accounts::owner;
use support::cpu::{process_cpu_ns, settle};
use support::knobs::{env_list, env_or, under_cargo_bench};
use support::report::{describe, ms, percentile, percentile_ms, print_summary, table_head};
use support::schedule::Schedule;

/// The peers bench's receivers per edit at light load.
const RECEIVERS: f64 = 50.0;
/// The disk probe's block, as the peers bench writes it.
const BLOCK: usize = 4096;

#[tokio::main(worker_threads = 2)]
async fn main() {
    if under_cargo_bench("commit") {
        bench().await;
    }
}

struct Knobs {
    commits: usize,
    rate: u64,
    change_bytes: usize,
    repeat: usize,
    quiet_wait: f64,
    ways: Vec<Way>,
}

impl Knobs {
    fn from_env() -> Knobs {
        Knobs {
            commits: env_or("COMMITS", 3000),
            rate: env_or("RATE", 200),
            change_bytes: env_or("CHANGE_BYTES", 32),
            repeat: env_or("REPEAT", 3),
            quiet_wait: env_or("QUIET_WAIT_SECONDS", 30.0),
            ways: env_list("WAYS", "none,sync,sqlite,margin"),
        }
    }
}

/// One way to commit a change.
#[derive(Clone, Copy, PartialEq)]
enum Way {
    Nothing,
    Sync,
    Sqlite,
    Margin,
}

impl std::str::FromStr for Way {
    type Err = ();

    fn from_str(name: &str) -> Result<Way, ()> {
        Way::ALL
            .into_iter()
            .find(|way| way.name() == name)
            .ok_or(())
    }
}

impl Way {
    const ALL: [Way; 4] = [Way::Nothing, Way::Sync, Way::Sqlite, Way::Margin];

    fn name(self) -> &'static str {
        match self {
            Way::Nothing => "none",
            Way::Sync => "sync",
            Way::Sqlite => "sqlite",
            Way::Margin => "margin",
        }
    }
}

/// One run's figures.
struct Run {
    way: Way,
    round: usize,
    cpu_us: f64,
    p50_ms: f64,
    p99_ms: f64,
    late_p99_ms: f64,
    other_cores: f64,
}

/// What commits: opened in its own temp folder, one change at a time.
enum Committer {
    Nothing,
    Sync {
        file: std::sync::Arc<std::fs::File>,
        next: u64,
    },
    Sqlite(AnyPool),
    Margin {
        store: Store,
        document: String,
        epoch: Epoch,
        revision: i64,
    },
}

impl Committer {
    async fn open(way: Way, dir: &Path) -> Committer {
        match way {
            Way::Nothing => Committer::Nothing,
            Way::Sync => {
                let file = std::fs::File::create(dir.join("log")).expect("creating the log file");
                Committer::Sync {
                    file: std::sync::Arc::new(file),
                    next: 0,
                }
            }
            Way::Sqlite => {
                sqlx::any::install_default_drivers();
                let url = Store::sqlite_url_in(dir).expect("creating the data folder");
                let pool = AnyPoolOptions::new()
                    .max_connections(1)
                    .after_connect(|conn, _| {
                        Box::pin(async move {
                            conn.execute("PRAGMA journal_mode = WAL").await?;
                            conn.execute("PRAGMA synchronous = FULL").await?;
                            Ok(())
                        })
                    })
                    .connect(&url)
                    .await
                    .expect("opening the bare SQLite database");
                pool.execute("CREATE TABLE log (id INTEGER PRIMARY KEY, data BLOB NOT NULL)")
                    .await
                    .expect("creating the bare table");
                Committer::Sqlite(pool)
            }
            Way::Margin => {
                let url = Store::sqlite_url_in(dir).expect("creating the data folder");
                let store = Store::open(&url).await.expect("opening the store");
                let member = owner(&store, "ada", Some("plan")).await;
                let document = member.document.expect("the bench's document");
                let epoch = store
                    .claim_document(&document)
                    .await
                    .expect("claiming the document");
                Committer::Margin {
                    store,
                    document,
                    epoch,
                    revision: 0,
                }
            }
        }
    }

    async fn commit(&mut self, change: &[u8]) {
        match self {
            Committer::Nothing => tokio::task::yield_now().await,
            Committer::Sync { file, next } => {
                let file = file.clone();
                let at = *next;
                *next += BLOCK as u64;
                tokio::task::spawn_blocking(move || {
                    let block = [7u8; BLOCK];
                    file.write_all_at(&block, at)?;
                    file.sync_data()
                })
                .await
                .expect("the sync task")
                .expect("writing and syncing the log");
            }
            Committer::Sqlite(pool) => {
                sqlx::query("INSERT INTO log (data) VALUES ($1)")
                    .bind(change)
                    .execute(&*pool)
                    .await
                    .expect("the bare insert");
            }
            Committer::Margin {
                store,
                document,
                epoch,
                revision,
            } => {
                *revision = store
                    .append_updates(document, *epoch, *revision, &[change.to_vec()])
                    .await
                    .expect("the fenced append");
            }
        }
    }

    async fn close(self) {
        match self {
            Committer::Nothing | Committer::Sync { .. } => {}
            Committer::Sqlite(pool) => pool.close().await,
            Committer::Margin { store, .. } => store.close().await,
        }
    }
}

async fn bench() {
    let knobs = Knobs::from_env();
    let exe = std::env::current_exe().expect("the bench's own path");
    let [machine, binary] = describe(&exe);
    let head = format!(
        "{machine}\n{binary}\nCOMMITS={} RATE={} CHANGE_BYTES={} REPEAT={}",
        knobs.commits, knobs.rate, knobs.change_bytes, knobs.repeat
    );
    println!("{head}");
    let change = vec![7u8; knobs.change_bytes];
    let mut runs = Vec::new();
    for round in 1..=knobs.repeat {
        for &way in &knobs.ways {
            let dir = tempfile::tempdir_in(std::env::temp_dir()).expect("a temp folder");
            let mut committer = Committer::open(way, dir.path()).await;
            // A few commits first: files created, statements prepared.
            for _ in 0..20 {
                committer.commit(&change).await;
            }
            let other_cores = settle(knobs.quiet_wait).await;
            // On a worker, as a document task commits its editors' changes.
            let (commits, rate, change) = (knobs.commits, knobs.rate, change.clone());
            let measured = tokio::spawn(async move {
                let run = measure(commits, rate, &mut committer, &change, way).await;
                (run, committer)
            });
            let (mut run, committer) = measured.await.expect("the measured task");
            run.round = round;
            run.other_cores = other_cores;
            println!(
                "round {round} {:<6}: {:.1} µs CPU a commit, p50 {:.3} ms, p99 {:.3} ms",
                way.name(),
                run.cpu_us,
                run.p50_ms,
                run.p99_ms
            );
            runs.push(run);
            committer.close().await;
        }
    }
    print_summary(&summary(&head, &runs));
}

/// `commits` of `change` at `rate` a second through `committer`; the
/// caller fills in the round and the machine's load.
async fn measure(
    commits: usize,
    rate: u64,
    committer: &mut Committer,
    change: &[u8],
    way: Way,
) -> Run {
    let mut schedule = Schedule::new(rate, commits, Duration::from_millis(50));
    let mut took = Vec::with_capacity(commits);
    let cpu = process_cpu_ns();
    while !schedule.done() {
        tokio::time::sleep_until(schedule.due().into()).await;
        if schedule.take(Instant::now()).is_none() {
            continue;
        }
        let began = Instant::now();
        committer.commit(change).await;
        took.push(began.elapsed());
    }
    let cpu_s = process_cpu_ns().saturating_sub(cpu) as f64 / 1e9;
    Run {
        way,
        cpu_us: cpu_s * 1e6 / commits.max(1) as f64,
        p50_ms: percentile_ms(&took, 50.0),
        p99_ms: percentile_ms(&took, 99.0),
        late_p99_ms: ms(schedule.lag().0),
        round: 0,
        other_cores: 0.0,
    }
}

/// The kit's nearest-rank p50 of the rounds' figures.
fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    percentile(&values, 50.0)
}

/// Every run, then each way's medians and what each adds to the one below.
fn summary(head: &str, runs: &[Run]) -> String {
    let mut out = format!("{}\n\n", head.replace('\n', "  \n"));
    out.push_str(&table_head(
        "| round | way | CPU µs a commit | a delivery at 50, µs | wall p50, ms | wall p99, ms | schedule lag p99, ms | machine busy before, cores |",
    ));
    out.push('\n');
    for run in runs {
        out.push_str(&format!(
            "| {} | {} | {:.1} | {:.2} | {:.3} | {:.3} | {:.3} | {:.2} |\n",
            run.round,
            run.way.name(),
            run.cpu_us,
            run.cpu_us / RECEIVERS,
            run.p50_ms,
            run.p99_ms,
            run.late_p99_ms,
            run.other_cores
        ));
    }
    let of = |way: Way, figure: fn(&Run) -> f64| {
        median(runs.iter().filter(|r| r.way == way).map(figure).collect())
    };
    out.push_str("\nMedians of the rounds, and what each way adds to the one above it:\n\n");
    out.push_str(&table_head(
        "| way | CPU µs a commit | a delivery at 50, µs | wall p50, ms | wall p99, ms | CPU added, µs | p50 added, ms | p99 added, ms |",
    ));
    out.push('\n');
    let mut below: Option<(f64, f64, f64)> = None;
    for way in Way::ALL
        .into_iter()
        .filter(|way| runs.iter().any(|r| r.way == *way))
    {
        let (cpu, p50, p99) = (
            of(way, |r| r.cpu_us),
            of(way, |r| r.p50_ms),
            of(way, |r| r.p99_ms),
        );
        let added = match below {
            Some((c, a, b)) => format!("{:.1} | {:.3} | {:.3}", cpu - c, p50 - a, p99 - b),
            None => "— | — | —".into(),
        };
        out.push_str(&format!(
            "| {} | {cpu:.1} | {:.2} | {p50:.3} | {p99:.3} | {added} |\n",
            way.name(),
            cpu / RECEIVERS
        ));
        below = Some((cpu, p50, p99));
    }
    out
}
