//! The feed bench's subscribers: what one expects (`Expect`), what it read
//! (`Tally`), and `follow`, which reads one SSE stream and checks every event.

use std::sync::Arc;
use std::time::Instant;

use crate::support::machine::PATIENCE;
use crate::support::sse::Sse;

use crate::target::Sent;

/// What a subscriber expects: ids `first..=last`; with `sent`, the id
/// `base + 1 + k` is report `k`, checked and timed.
#[derive(Clone)]
pub(crate) struct Expect {
    pub(crate) first: u64,
    pub(crate) last: u64,
    pub(crate) base: u64,
    pub(crate) sent: Option<Arc<Sent>>,
}

/// What one subscriber read.
#[derive(Default)]
pub(crate) struct Tally {
    /// Distinct events in order (a gap skips some; they are missing).
    pub(crate) received: u64,
    pub(crate) gaps: u64,
    pub(crate) duplicates: u64,
    /// Not a `run_updated`, or not the status report `k` had.
    pub(crate) wrong: u64,
    /// Read before its send time was recorded.
    pub(crate) untimed: u64,
    pub(crate) delays_us: Vec<u32>,
    pub(crate) bytes: u64,
    pub(crate) first_read: Option<Instant>,
    pub(crate) last_event: Option<Instant>,
    pub(crate) error: Option<String>,
}

/// Reads `sse` until it has `expect.last`, or it ends, or `PATIENCE`
/// passes with nothing to read.
pub(crate) async fn follow(mut sse: Sse, expect: Expect) -> Tally {
    let mut tally = Tally::default();
    if expect.sent.is_some() {
        tally
            .delays_us
            .reserve((expect.last + 1 - expect.first) as usize);
    }
    let mut next = expect.first;
    // Body bytes that came with the response head are read first.
    let mut now = Instant::now();
    if sse.buffered() > 0 {
        tally.first_read = Some(now);
        tally.bytes = sse.buffered() as u64;
    }
    loop {
        let mut resync = None;
        let read = sse.frames(|id, event, data| {
            let Some(id) = id else {
                if event == b"resync" {
                    resync = Some(String::from_utf8_lossy(data).into_owned());
                }
                return;
            };
            if id < next {
                tally.duplicates += 1;
                return;
            }
            tally.gaps += id - next;
            tally.received += 1;
            tally.last_event = Some(now);
            next = id + 1;
            let Some(sent) = expect.sent.as_ref().filter(|_| id > expect.base) else {
                return;
            };
            let k = (id - expect.base - 1) as usize;
            // Report `k` said `running` for even `k`, `paused` for odd.
            let status = [b"\"running\"}}".as_slice(), b"\"paused\"}}"][k % 2];
            if event != b"run_updated" || !data.ends_with(status) {
                tally.wrong += 1;
            }
            match sent.at(k) {
                Some(at) => tally.delays_us.push(
                    u32::try_from(now.saturating_duration_since(at).as_micros())
                        .unwrap_or(u32::MAX),
                ),
                None => tally.untimed += 1,
            }
        });
        if let Err(e) = read {
            tally.error = Some(e);
            break;
        }
        if let Some(reason) = resync {
            tally.error = Some(format!("told to resync: {reason}"));
            break;
        }
        if next > expect.last {
            break;
        }
        if sse.ended() {
            tally.error = Some("the stream ended".into());
            break;
        }
        match tokio::time::timeout(PATIENCE, sse.fill()).await {
            Ok(Ok(0)) => {
                tally.error = Some("the server closed the stream".into());
                break;
            }
            Ok(Ok(n)) => tally.bytes += n as u64,
            Ok(Err(e)) => {
                tally.error = Some(format!("read: {e}"));
                break;
            }
            Err(_) => {
                tally.error = Some(format!("nothing read for {} s", PATIENCE.as_secs()));
                break;
            }
        }
        now = Instant::now();
        tally.first_read.get_or_insert(now);
    }
    tally
}
