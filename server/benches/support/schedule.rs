//! An open-loop schedule: item `k` is due at `start + k / rate` and goes
//! out when it is due, whatever came back meanwhile; how late each went
//! out (its lag) is kept, so a "schedule lag" means the same in every
//! report that paces its load.

use std::time::{Duration, Instant};

use super::report::percentile;

pub(crate) struct Schedule {
    start: Instant,
    rate: f64,
    total: usize,
    /// The next item to go out.
    next: usize,
    lag: Vec<Duration>,
}

impl Schedule {
    /// `total` items at `rate` a second, the first due `lead` from now.
    pub(crate) fn new(rate: u64, total: usize, lead: Duration) -> Schedule {
        Schedule {
            start: Instant::now() + lead,
            rate: rate.max(1) as f64,
            total,
            next: 0,
            lag: Vec::with_capacity(total),
        }
    }

    /// When the first item is due.
    pub(crate) fn start(&self) -> Instant {
        self.start
    }

    fn due_at(&self, k: usize) -> Instant {
        self.start + Duration::from_secs_f64(k as f64 / self.rate)
    }

    /// When the next item is due (the last one's time once all went out).
    pub(crate) fn due(&self) -> Instant {
        self.due_at(self.next.min(self.total.saturating_sub(1)))
    }

    /// Items that went out so far.
    pub(crate) fn sent(&self) -> usize {
        self.next
    }

    /// Every item went out.
    pub(crate) fn done(&self) -> bool {
        self.next >= self.total
    }

    /// The next item, when it was due by `now`: it goes out, late by
    /// `now` less its due time.
    pub(crate) fn take(&mut self, now: Instant) -> Option<usize> {
        let k = self.next;
        if k >= self.total || self.due_at(k) > now {
            return None;
        }
        self.lag.push(now.saturating_duration_since(self.due_at(k)));
        self.next += 1;
        Some(k)
    }

    /// The lag's p99 and maximum.
    pub(crate) fn lag(&mut self) -> (Duration, Duration) {
        self.lag.sort_unstable();
        (percentile(&self.lag, 99.0), percentile(&self.lag, 100.0))
    }
}
