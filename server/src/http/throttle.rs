//! Failed sign-ins (SPEC A3, A3b): token buckets that only failures drain,
//! one per client address and one per credential.
//!
//! The credential is looked up first, so a valid one always signs in,
//! whatever its address or its neighbours did. Only a credential that
//! fails meets the buckets: while its address's or its own bucket is
//! empty it is answered 429 with `Retry-After` and drains nothing more;
//! otherwise it is answered 401 and drains one from each. Guessing
//! therefore costs the database one read by primary key per guess — what
//! every valid request pays too — and no valid credential is ever refused
//! for someone else's failures behind the same NAT or proxy. There is no
//! cache of valid credentials: a cache would have to hear of every
//! sign-out and revocation, including `margin token revoke` run as another
//! process and acts on other nodes, to never accept a credential that is
//! gone; the read is cheap enough not to need one.
//!
//! The address bucket (20 at once, one more a second) stops one address
//! guessing many credentials. The credential bucket (5 at once, one more
//! every 10 s) stops one stale credential retried by a client — or by a
//! fleet of them, from any address — without spending its address's
//! bucket: once the credential's own bucket is empty its retries drain
//! nothing, so another client behind the same address whose credential
//! fails is still told 401 rather than 429. A credential is known by the
//! first 8 bytes of its `blake3` hash: a fixed size whatever was sent, and
//! the secret is never kept.
//!
//! The client address is the socket's peer, or what a trusted proxy
//! forwarded for it ([`super::forwarded`]).

use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::request::Parts;

use super::forwarded::TrustedProxies;
use super::{AppError, AppState};

/// Failures an address may make at once.
pub const BURST: f64 = 20.0;

/// Failures an address earns back per second.
pub const REFILL_PER_SECOND: f64 = 1.0;

/// Failures one credential may make at once, from any address.
pub const CREDENTIAL_BURST: f64 = 5.0;

/// Failures a credential earns back per second: one every 10 s.
pub const CREDENTIAL_REFILL_PER_SECOND: f64 = 0.1;

/// Addresses, and credentials, remembered; past it, those with a full
/// bucket are forgotten (and, failing that, all), so neither table can
/// grow without bound.
const MAX_REMEMBERED: usize = 10_000;

/// The failed-sign-in buckets and whose forwarding headers are believed;
/// cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct Throttle {
    tables: Arc<Mutex<Tables>>,
    proxies: Arc<TrustedProxies>,
}

#[derive(Debug, Default)]
struct Tables {
    addresses: HashMap<IpAddr, Bucket>,
    credentials: HashMap<CredentialKey, Bucket>,
}

/// The first 8 bytes of a credential's `blake3` hash.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct CredentialKey([u8; 8]);

impl CredentialKey {
    fn of(credential: &str) -> CredentialKey {
        let hash = blake3::hash(credential.as_bytes());
        let mut key = [0u8; 8];
        key.copy_from_slice(&hash.as_bytes()[..8]);
        CredentialKey(key)
    }
}

/// A bucket's rules: how many failures at once, how fast they come back.
#[derive(Clone, Copy, Debug)]
struct Rate {
    burst: f64,
    per_second: f64,
}

const ADDRESS: Rate = Rate {
    burst: BURST,
    per_second: REFILL_PER_SECOND,
};

const CREDENTIAL: Rate = Rate {
    burst: CREDENTIAL_BURST,
    per_second: CREDENTIAL_REFILL_PER_SECOND,
};

#[derive(Clone, Copy, Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn now(self, now: Instant, rate: Rate) -> Bucket {
        let earned = now.saturating_duration_since(self.at).as_secs_f64() * rate.per_second;
        Bucket {
            tokens: (self.tokens + earned).min(rate.burst),
            at: now,
        }
    }

    /// How long until one more failure may be answered; zero when it may
    /// be now.
    fn wait(self, rate: Rate) -> f64 {
        if self.tokens >= 1.0 {
            return 0.0;
        }
        (1.0 - self.tokens) / rate.per_second
    }
}

/// `key`'s bucket in `table` as of `now`: full when it is not there.
fn current<K: Eq + Hash>(table: &HashMap<K, Bucket>, key: &K, now: Instant, rate: Rate) -> Bucket {
    match table.get(key) {
        Some(bucket) => bucket.now(now, rate),
        None => Bucket {
            tokens: rate.burst,
            at: now,
        },
    }
}

/// Takes one failure from `key`'s bucket, making room first when `table`
/// is full.
fn drain<K: Eq + Hash>(table: &mut HashMap<K, Bucket>, key: K, bucket: Bucket, rate: Rate) {
    if table.len() >= MAX_REMEMBERED && !table.contains_key(&key) {
        table.retain(|_, kept| kept.now(bucket.at, rate).tokens < rate.burst);
        if table.len() >= MAX_REMEMBERED {
            table.clear();
        }
    }
    table.insert(
        key,
        Bucket {
            tokens: (bucket.tokens - 1.0).max(0.0),
            at: bucket.at,
        },
    );
}

impl Throttle {
    /// Buckets for a server behind `proxies` (none: every address is the
    /// socket's peer).
    pub fn new(proxies: TrustedProxies) -> Self {
        Throttle {
            tables: Arc::default(),
            proxies: Arc::new(proxies),
        }
    }

    /// The address the request `parts` belong to counts against (none
    /// for a request that did not come over a socket).
    pub fn client(&self, parts: &Parts) -> ClientAddress {
        ClientAddress(
            parts
                .extensions
                .get::<ConnectInfo<SocketAddr>>()
                .map(|ConnectInfo(peer)| self.proxies.client(peer.ip(), &parts.headers)),
        )
    }

    /// Runs `sign_in`, which looks `credential` up, for a request from
    /// `client`. Its success is returned whatever the buckets hold; a
    /// refused credential (`Unauthenticated`, `CredentialRefused`) is
    /// answered 429 while the address's or the credential's bucket is
    /// empty, and otherwise drains both. A storage failure drains nothing.
    pub async fn sign_in<T>(
        &self,
        client: ClientAddress,
        credential: &str,
        sign_in: impl Future<Output = Result<T, AppError>>,
    ) -> Result<T, AppError> {
        let result = sign_in.await;
        if let Err(AppError::Unauthenticated(_) | AppError::CredentialRefused { .. }) = &result {
            self.failed(client.0, CredentialKey::of(credential), Instant::now())?;
        }
        result
    }

    /// Counts a failure of `credential` from `address` at `now`, or the
    /// 429 saying when either may fail again.
    fn failed(
        &self,
        address: Option<IpAddr>,
        credential: CredentialKey,
        now: Instant,
    ) -> Result<(), AppError> {
        let mut tables = self.tables.lock().unwrap_or_else(|p| p.into_inner());
        let own = current(&tables.credentials, &credential, now, CREDENTIAL);
        let from = address.map(|a| (a, current(&tables.addresses, &a, now, ADDRESS)));
        let own_wait = own.wait(CREDENTIAL);
        let from_wait = from.map_or(0.0, |(_, bucket)| bucket.wait(ADDRESS));
        let cause = match (from_wait > 0.0, own_wait > 0.0) {
            (false, false) => None,
            (true, false) => Some("from this address"),
            (false, true) => Some("with this credential"),
            (true, true) => Some("from this address and with this credential"),
        };
        if let Some(cause) = cause {
            let wait = own_wait.max(from_wait);
            return Err(AppError::Throttled {
                retry_after: Duration::from_secs_f64(wait.ceil().max(1.0)),
                cause,
            });
        }
        drain(&mut tables.credentials, credential, own, CREDENTIAL);
        if let Some((address, bucket)) = from {
            drain(&mut tables.addresses, address, bucket, ADDRESS);
        }
        Ok(())
    }
}

/// The address a request counts against: its socket's peer, or the client
/// a trusted proxy forwarded it for (none for a request that did not come
/// over a socket).
#[derive(Clone, Copy, Debug)]
pub struct ClientAddress(pub Option<IpAddr>);

impl FromRequestParts<AppState> for ClientAddress {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        Ok(state.throttle.client(parts))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    /// What a failure was answered: 401 (`None`) or 429 with its
    /// `Retry-After` in seconds.
    fn answer(throttle: &Throttle, address: &str, credential: &str, at: Instant) -> Option<u64> {
        let address = Some(address.parse().unwrap());
        match throttle.failed(address, CredentialKey::of(credential), at) {
            Ok(()) => None,
            Err(AppError::Throttled { retry_after, .. }) => Some(retry_after.as_secs()),
            Err(other) => panic!("{other}"),
        }
    }

    #[test]
    fn one_credential_failing_again_and_again_is_throttled_and_spares_its_address() {
        let throttle = Throttle::default();
        let start = Instant::now();
        let answers: Vec<_> = (0..8)
            .map(|_| answer(&throttle, "192.0.2.1", "mgn_stale", start))
            .collect();
        assert_eq!(
            answers,
            [None, None, None, None, None, Some(10), Some(10), Some(10)]
        );
        // Another credential failing from the same address is told 401:
        // the stale one's retries took only its own five from the address.
        let others: Vec<_> = (0..15)
            .map(|i| answer(&throttle, "192.0.2.1", &format!("mgn_other{i}"), start))
            .collect();
        assert_eq!(others, vec![None; 15]);
        // Ten seconds on, the stale one has earned one failure back.
        let later = start + Duration::from_secs(10);
        assert_eq!(answer(&throttle, "192.0.2.1", "mgn_stale", later), None);
        assert_eq!(answer(&throttle, "192.0.2.1", "mgn_stale", later), Some(10));
    }

    #[test]
    fn many_credentials_failing_from_one_address_throttle_the_address_alone() {
        let throttle = Throttle::default();
        let start = Instant::now();
        let answers: Vec<_> = (0..22)
            .map(|i| answer(&throttle, "192.0.2.1", &format!("mgn_guess{i}"), start))
            .collect();
        let mut expected = vec![None; 20];
        expected.extend([Some(1), Some(1)]);
        assert_eq!(answers, expected);
        // Another address is not throttled.
        assert_eq!(answer(&throttle, "192.0.2.2", "mgn_guess99", start), None);
        // A second on, the address may fail once more.
        let later = start + Duration::from_secs(1);
        assert_eq!(answer(&throttle, "192.0.2.1", "mgn_guess100", later), None);
        assert_eq!(
            answer(&throttle, "192.0.2.1", "mgn_guess101", later),
            Some(1)
        );
    }

    #[test]
    fn a_throttled_failure_drains_nothing_so_retry_after_is_kept() {
        let throttle = Throttle::default();
        let start = Instant::now();
        for i in 0..20 {
            assert_eq!(
                answer(&throttle, "192.0.2.1", &format!("mgn_{i}"), start),
                None
            );
        }
        // Hammering while throttled does not push the retry further off.
        let mut at = start;
        for _ in 0..9 {
            at += Duration::from_millis(100);
            assert_eq!(answer(&throttle, "192.0.2.1", "mgn_x", at), Some(1));
        }
        let retry = start + Duration::from_secs(1);
        assert_eq!(answer(&throttle, "192.0.2.1", "mgn_x", retry), None);
    }

    #[test]
    fn the_tables_stay_bounded() {
        let throttle = Throttle::default();
        let start = Instant::now();
        for i in 0..(MAX_REMEMBERED as u32 + 10) {
            let address = std::net::Ipv4Addr::from(0x0a00_0000 + i).to_string();
            answer(&throttle, &address, &format!("mgn_{i}"), start);
        }
        let tables = throttle.tables.lock().unwrap();
        assert!(
            tables.addresses.len() <= MAX_REMEMBERED,
            "{}",
            tables.addresses.len()
        );
        assert!(
            tables.credentials.len() <= MAX_REMEMBERED,
            "{}",
            tables.credentials.len()
        );
    }
}
