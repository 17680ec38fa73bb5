//! Failed sign-ins per address (SPEC A1, A2): a token bucket per IP
//! address that only failures drain. An address that spent its burst is
//! answered 429 with `Retry-After` before its credential is looked up, so
//! guessing tokens costs the guesser time and the database nothing.

use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::request::Parts;

use super::AppError;

/// Failures an address may make at once.
pub const BURST: f64 = 20.0;

/// Failures an address earns back per second.
pub const REFILL_PER_SECOND: f64 = 1.0;

/// Addresses remembered; past it, those with a full bucket are forgotten
/// (and, failing that, all), so the table cannot grow without bound.
const MAX_ADDRESSES: usize = 10_000;

/// The failed-sign-in buckets; cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct Throttle {
    buckets: Arc<Mutex<HashMap<IpAddr, Bucket>>>,
}

#[derive(Clone, Copy, Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn now(self, now: Instant) -> Bucket {
        let earned = now.duration_since(self.at).as_secs_f64() * REFILL_PER_SECOND;
        Bucket {
            tokens: (self.tokens + earned).min(BURST),
            at: now,
        }
    }
}

impl Throttle {
    /// Runs `sign_in` for a request from `peer`, unless the address spent
    /// its failures: then a 429 says when to retry. A refused credential
    /// (`Unauthenticated`, `CredentialRefused`) drains the bucket; a
    /// storage failure does not.
    pub async fn sign_in<T>(
        &self,
        peer: Peer,
        sign_in: impl Future<Output = Result<T, AppError>>,
    ) -> Result<T, AppError> {
        let Peer(Some(address)) = peer else {
            return sign_in.await;
        };
        self.admit(address)?;
        let result = sign_in.await;
        if let Err(AppError::Unauthenticated(_) | AppError::CredentialRefused { .. }) = &result {
            self.failed(address);
        }
        result
    }

    fn admit(&self, address: IpAddr) -> Result<(), AppError> {
        let buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        let Some(bucket) = buckets.get(&address) else {
            return Ok(());
        };
        let bucket = bucket.now(Instant::now());
        if bucket.tokens >= 1.0 {
            return Ok(());
        }
        let wait = (1.0 - bucket.tokens) / REFILL_PER_SECOND;
        Err(AppError::Throttled {
            retry_after: Duration::from_secs_f64(wait.ceil().max(1.0)),
        })
    }

    fn failed(&self, address: IpAddr) {
        let now = Instant::now();
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        if buckets.len() >= MAX_ADDRESSES && !buckets.contains_key(&address) {
            buckets.retain(|_, bucket| bucket.now(now).tokens < BURST);
            if buckets.len() >= MAX_ADDRESSES {
                buckets.clear();
            }
        }
        let bucket = buckets.entry(address).or_insert(Bucket {
            tokens: BURST,
            at: now,
        });
        let mut drained = bucket.now(now);
        drained.tokens = (drained.tokens - 1.0).max(0.0);
        *bucket = drained;
    }
}

/// The address a request came from (none for a request that did not come
/// over a socket, which nothing throttles).
#[derive(Clone, Copy, Debug)]
pub struct Peer(pub Option<IpAddr>);

impl Peer {
    /// The peer of the request `parts` belong to.
    pub fn of(parts: &Parts) -> Peer {
        Peer(
            parts
                .extensions
                .get::<ConnectInfo<SocketAddr>>()
                .map(|ConnectInfo(addr)| addr.ip()),
        )
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Peer {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(Peer::of(parts))
    }
}
