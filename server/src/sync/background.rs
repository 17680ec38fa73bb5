//! The thread that does work nobody waits for — compaction's rebuild, encode
//! and check — at the lowest CPU priority, so it only takes the CPU that
//! edits and the Planner's calls leave. On blocking threads at the normal
//! priority, a 10,000-paragraph document's compaction took the CPU from
//! whoever met it, and those calls were the tools bench's slowest
//! (server/benches/results/tools.md). One thread: such work is queued,
//! never urgent.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{mpsc, OnceLock};

use tokio::sync::oneshot;

/// A unit of background work.
type Job = Box<dyn FnOnce() + Send>;

/// The nice value of the background thread: the lowest priority there is.
pub const NICEST: i32 = 19;

/// Why background work gave no answer.
#[derive(Debug, thiserror::Error)]
pub enum BackgroundError {
    #[error("the background thread could not start: {0}")]
    Unavailable(String),
    #[error("the background job panicked")]
    Panicked,
}

/// Runs `job` on the background thread and waits for its answer.
pub async fn run<T, F>(job: F) -> Result<T, BackgroundError>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let (answer, answered) = oneshot::channel();
    let job: Job = Box::new(move || {
        // The thread outlives a panicking job; its caller hears of it.
        let _ = answer.send(catch_unwind(AssertUnwindSafe(job)));
    });
    thread()?
        .send(job)
        .map_err(|_| BackgroundError::Unavailable("it stopped".into()))?;
    match answered.await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(_)) | Err(_) => Err(BackgroundError::Panicked),
    }
}

/// The background thread's queue, started on first use.
fn thread() -> Result<&'static mpsc::Sender<Job>, BackgroundError> {
    static THREAD: OnceLock<Result<mpsc::Sender<Job>, String>> = OnceLock::new();
    THREAD
        .get_or_init(|| {
            let (queue, jobs) = mpsc::channel::<Job>();
            std::thread::Builder::new()
                .name("margin-background".into())
                .spawn(move || {
                    lower_priority();
                    for job in jobs {
                        job();
                    }
                })
                .map(|_| queue)
                .map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|cause| BackgroundError::Unavailable(cause.clone()))
}

/// Lowers the calling thread's priority to [`NICEST`]. On Linux a nice
/// value belongs to a thread; elsewhere it would be the whole server's, so
/// there the thread keeps the normal priority.
fn lower_priority() {
    #[cfg(target_os = "linux")]
    if let Err(e) = rustix::process::setpriority_process(Some(rustix::thread::gettid()), NICEST) {
        tracing::warn!(error = %e, "the background thread keeps the normal CPU priority");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn background_work_runs_at_the_lowest_cpu_priority() {
        let nice = run(|| rustix::process::getpriority_process(Some(rustix::thread::gettid())))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(nice, NICEST);
        let here = rustix::process::getpriority_process(Some(rustix::thread::gettid())).unwrap();
        assert_ne!(here, NICEST, "only the background thread is lowered");
    }

    #[tokio::test]
    async fn a_panicking_job_is_an_error_and_the_next_job_still_runs() {
        let panicked = run(|| -> u8 { panic!("a job that fails") }).await;
        assert!(matches!(panicked, Err(BackgroundError::Panicked)));
        assert_eq!(run(|| 7).await.unwrap(), 7);
    }
}
