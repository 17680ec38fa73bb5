//! The client address a request counts against (SPEC A3b): the socket's
//! peer, unless that peer is a trusted proxy (`--trusted-proxy CIDR`) —
//! then the address the proxies say they served, read from
//! `X-Forwarded-For` or, without it, `Forwarded: for=`.
//!
//! Each proxy appends the address it was reached from, so a header is read
//! from its right: the first address that is not itself a trusted proxy is
//! the client; what lies left of it was written by the client and is never
//! believed. A header that cannot be read (an entry that is not an
//! address, `for=unknown`, an obfuscated node, an element with no `for`)
//! is ignored as a whole and the socket's peer counts — never an error to
//! the client. Only one header is read: `X-Forwarded-For` when the request
//! has one, so a proxy that writes only `Forwarded` must drop the
//! `X-Forwarded-For` its clients send.

use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;

use axum::http::header::FORWARDED;
use axum::http::HeaderMap;

use super::cidr::Cidr;

/// `X-Forwarded-For`, the header most proxies write.
const X_FORWARDED_FOR: &str = "x-forwarded-for";

/// The proxies whose forwarding headers are believed; none by default.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TrustedProxies(Vec<Cidr>);

impl TrustedProxies {
    /// The proxies in `blocks`.
    pub fn new(blocks: Vec<Cidr>) -> Self {
        TrustedProxies(blocks)
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `address` is one of them.
    pub fn contains(&self, address: IpAddr) -> bool {
        self.0.iter().any(|block| block.contains(address))
    }

    /// The address a request from `peer` with `headers` counts against:
    /// `peer` itself unless it is a trusted proxy, then what its
    /// forwarding header names (see the module's documentation).
    pub fn client(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        let peer = peer.to_canonical();
        if !self.contains(peer) {
            return peer;
        }
        let named = if headers.contains_key(X_FORWARDED_FOR) {
            joined(headers, X_FORWARDED_FOR).and_then(|list| {
                self.rightmost_client(
                    list.split(',')
                        .map(str::trim)
                        .filter(|entry| !entry.is_empty())
                        .map(node_address),
                )
            })
        } else {
            joined(headers, FORWARDED.as_str())
                .and_then(|list| split_forwarded(&list))
                .and_then(|elements| {
                    self.rightmost_client(elements.iter().map(|e| forwarded_for(e)))
                })
        };
        named.unwrap_or(peer)
    }

    /// Walks `hops` (the nearest proxy's last) from the right: the first
    /// address that is not a trusted proxy, or the left-most when all are.
    /// `None` when a hop on the way is not an address, or there are none.
    fn rightmost_client(
        &self,
        hops: impl DoubleEndedIterator<Item = Option<IpAddr>>,
    ) -> Option<IpAddr> {
        let mut leftmost = None;
        for hop in hops.rev() {
            let address = hop?.to_canonical();
            if !self.contains(address) {
                return Some(address);
            }
            leftmost = Some(address);
        }
        leftmost
    }
}

impl std::fmt::Display for TrustedProxies {
    /// The blocks, separated by commas, as `--trusted-proxy` takes them.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (n, block) in self.0.iter().enumerate() {
            if n > 0 {
                f.write_str(",")?;
            }
            write!(f, "{block}")?;
        }
        Ok(())
    }
}

/// Every line of header `name`, joined with commas as one list (RFC 9110
/// §5.3); `None` without one, or when one is not visible ASCII.
fn joined(headers: &HeaderMap, name: &str) -> Option<String> {
    let mut list: Option<String> = None;
    for line in headers.get_all(name) {
        let line = line.to_str().ok()?;
        match &mut list {
            Some(list) => {
                list.push(',');
                list.push_str(line);
            }
            None => list = Some(line.to_owned()),
        }
    }
    list
}

/// A node as a proxy writes it: an address, with a port or without
/// (`192.0.2.1`, `192.0.2.1:443`, `2001:db8::1`, `[2001:db8::1]`,
/// `[2001:db8::1]:443`).
fn node_address(node: &str) -> Option<IpAddr> {
    if let Ok(address) = IpAddr::from_str(node) {
        return Some(address);
    }
    if let Ok(socket) = SocketAddr::from_str(node) {
        return Some(socket.ip());
    }
    node.strip_prefix('[')?
        .strip_suffix(']')
        .and_then(|inner| std::net::Ipv6Addr::from_str(inner).ok())
        .map(IpAddr::V6)
}

/// The address in one `Forwarded` element's `for=`: `None` when it has
/// none, two, or one that is not an address (`unknown`, `_hidden`).
fn forwarded_for(pairs: &[(String, String)]) -> Option<IpAddr> {
    let mut nodes = pairs
        .iter()
        .filter(|(name, _)| name.eq_ignore_ascii_case("for"));
    match (nodes.next(), nodes.next()) {
        (Some((_, node)), None) => node_address(node),
        _ => None,
    }
}

/// A `Forwarded` list (RFC 7239 §4) as its elements, each a list of
/// `(name, value)` pairs with quoted values unquoted. Empty elements are
/// skipped (RFC 9110 §5.6.1); `None` when the list breaks the grammar (a
/// pair with no name or no `=`, an unterminated quote, text after one).
fn split_forwarded(list: &str) -> Option<Vec<Vec<(String, String)>>> {
    let mut elements = Vec::new();
    let mut pairs = Vec::new();
    let mut rest = list;
    loop {
        rest = rest.trim_start_matches([' ', '\t']);
        let end = rest.find(['=', ';', ',']).unwrap_or(rest.len());
        let name = rest[..end].trim();
        rest = &rest[end..];
        if name.is_empty() {
            if !pairs.is_empty() {
                return None;
            }
            match rest.strip_prefix(',') {
                Some(after) => {
                    rest = after;
                    continue;
                }
                None if rest.is_empty() => return Some(elements),
                None => return None,
            }
        }
        rest = rest.strip_prefix('=')?;
        let value = match rest.strip_prefix('"') {
            Some(quoted) => {
                let (value, after) = unquote(quoted)?;
                rest = after;
                value
            }
            None => {
                let end = rest.find([';', ',']).unwrap_or(rest.len());
                let value = rest[..end].trim().to_owned();
                rest = &rest[end..];
                value
            }
        };
        pairs.push((name.to_owned(), value));
        rest = rest.trim_start_matches([' ', '\t']);
        if let Some(after) = rest.strip_prefix(';') {
            rest = after;
        } else if let Some(after) = rest.strip_prefix(',') {
            elements.push(std::mem::take(&mut pairs));
            rest = after;
        } else if rest.is_empty() {
            elements.push(pairs);
            return Some(elements);
        } else {
            return None;
        }
    }
}

/// A quoted string's text, from just after its opening quote, and what
/// follows its closing one; `None` when it never closes.
fn unquote(quoted: &str) -> Option<(String, &str)> {
    let mut value = String::new();
    let mut chars = quoted.char_indices();
    while let Some((at, c)) = chars.next() {
        match c {
            '"' => return Some((value, &quoted[at + 1..])),
            '\\' => value.push(chars.next()?.1),
            c => value.push(c),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::super::cidr::written::{cidr, ip};
    use super::*;
    use axum::http::HeaderValue;
    use pretty_assertions::assert_eq;

    fn proxies(blocks: &[&str]) -> TrustedProxies {
        TrustedProxies::new(blocks.iter().map(|b| cidr(b)).collect())
    }

    fn headers(lines: &[(&str, &[u8])]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in lines {
            map.append(
                axum::http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_bytes(value).unwrap(),
            );
        }
        map
    }

    #[test]
    fn forwarding_headers_are_ignored_unless_the_peer_is_a_trusted_proxy() {
        let sent = headers(&[
            ("x-forwarded-for", b"198.51.100.1"),
            ("forwarded", b"for=198.51.100.2"),
        ]);
        assert_eq!(
            proxies(&[]).client(ip("203.0.113.5"), &sent),
            ip("203.0.113.5")
        );
        assert_eq!(
            proxies(&["10.0.0.0/8"]).client(ip("203.0.113.5"), &sent),
            ip("203.0.113.5")
        );
        assert_eq!(
            proxies(&["10.0.0.0/8"]).client(ip("10.0.0.1"), &sent),
            ip("198.51.100.1")
        );
    }

    #[test]
    fn x_forwarded_for_names_the_rightmost_address_that_is_not_a_trusted_proxy() {
        let trusted = proxies(&["10.0.0.0/8", "fd00::/8"]);
        let proxy = ip("10.0.0.1");
        let client = |value: &[u8]| trusted.client(proxy, &headers(&[("x-forwarded-for", value)]));
        // What the client wrote itself, left of its own address, is not believed.
        assert_eq!(
            client(b"1.1.1.1, 198.51.100.7, 10.0.0.9"),
            ip("198.51.100.7")
        );
        assert_eq!(client(b"198.51.100.7"), ip("198.51.100.7"));
        assert_eq!(client(b"198.51.100.7:5555,10.0.0.2:80"), ip("198.51.100.7"));
        assert_eq!(client(b"[2001:db8::7]:443, fd00::1"), ip("2001:db8::7"));
        assert_eq!(client(b"2001:db8::7"), ip("2001:db8::7"));
        assert_eq!(client(b"[2001:db8::7]"), ip("2001:db8::7"));
        assert_eq!(client(b"::ffff:198.51.100.7"), ip("198.51.100.7"));
        // Every hop a proxy: the one furthest away.
        assert_eq!(client(b"10.0.0.3, 10.0.0.2"), ip("10.0.0.3"));
        // Garbage left of the client is never read.
        assert_eq!(client(b"not an address, 198.51.100.7"), ip("198.51.100.7"));
        // Empty entries are skipped, as in any list.
        assert_eq!(client(b"198.51.100.7, ,10.0.0.2,"), ip("198.51.100.7"));
        // Several lines are one list, in order.
        let lines = headers(&[
            ("x-forwarded-for", b"198.51.100.7"),
            ("x-forwarded-for", b"10.0.0.4"),
        ]);
        assert_eq!(trusted.client(proxy, &lines), ip("198.51.100.7"));
    }

    #[test]
    fn a_malformed_x_forwarded_for_is_ignored_and_the_proxy_counts() {
        let trusted = proxies(&["10.0.0.0/8"]);
        let proxy = ip("10.0.0.1");
        for value in [
            &b""[..],
            b" ",
            b",",
            b" , ",
            b"198.51.100.7, unknown",
            b"198.51.100.300",
            b"198.51.100.7;10.0.0.2",
            b"[198.51.100.7]",
            b"\xff\xfe",
        ] {
            let sent = headers(&[
                ("x-forwarded-for", value),
                ("forwarded", b"for=198.51.100.9"),
            ]);
            assert_eq!(
                trusted.client(proxy, &sent),
                proxy,
                "{:?}",
                String::from_utf8_lossy(value)
            );
        }
    }

    #[test]
    fn forwarded_for_is_read_when_there_is_no_x_forwarded_for() {
        let trusted = proxies(&["10.0.0.0/8"]);
        let proxy = ip("10.0.0.1");
        let client = |value: &[u8]| trusted.client(proxy, &headers(&[("forwarded", value)]));
        assert_eq!(client(b"for=198.51.100.7"), ip("198.51.100.7"));
        assert_eq!(client(b"For=\"198.51.100.7:4711\""), ip("198.51.100.7"));
        assert_eq!(
            client(b"for=1.1.1.1, for=198.51.100.7;proto=https;by=10.0.0.1, for=10.0.0.2"),
            ip("198.51.100.7")
        );
        assert_eq!(
            client(b"proto=https; for=\"[2001:db8:cafe::17]:4711\""),
            ip("2001:db8:cafe::17")
        );
        assert_eq!(client(b"for=\"[2001:db8::7]\""), ip("2001:db8::7"));
        assert_eq!(
            client(b"for=198.51.100.7;ext=\"a,b;c\\\"d\""),
            ip("198.51.100.7")
        );
        // Empty elements are skipped, as in any list.
        assert_eq!(
            client(b"for=198.51.100.7, , for=10.0.0.3,"),
            ip("198.51.100.7")
        );
        let lines = headers(&[
            ("forwarded", b"for=198.51.100.7"),
            ("forwarded", b"for=10.0.0.5"),
        ]);
        assert_eq!(trusted.client(proxy, &lines), ip("198.51.100.7"));
    }

    #[test]
    fn a_malformed_forwarded_is_ignored_and_the_proxy_counts() {
        let trusted = proxies(&["10.0.0.0/8"]);
        let proxy = ip("10.0.0.1");
        for value in [
            &b""[..],
            b"for",
            b"=198.51.100.7",
            b"for=unknown",
            b"for=_hidden",
            b"proto=https",
            b"for=198.51.100.7;for=198.51.100.8",
            b"for=\"198.51.100.7",
            b"for=\"198.51.100.7\"x",
            b"for=198.51.100.7, proto=http",
            b"for=198.51.100.7;",
            b",",
        ] {
            let sent = headers(&[("forwarded", value)]);
            assert_eq!(
                trusted.client(proxy, &sent),
                proxy,
                "{:?}",
                String::from_utf8_lossy(value)
            );
        }
    }
}
