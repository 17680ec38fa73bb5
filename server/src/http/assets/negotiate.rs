//! What a request's headers ask of an embedded asset: the content coding to
//! send (`Accept-Encoding`, RFC 9110 §12.5.3) and whether the browser's copy
//! is still current (`If-None-Match`, §13.1.2).

use axum::http::header::{ACCEPT_ENCODING, IF_NONE_MATCH};
use axum::http::HeaderMap;

/// A body's content coding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Coding {
    Br,
    Gzip,
    Identity,
}

impl Coding {
    /// Its `Content-Encoding` token; identity sends none.
    pub(super) fn token(self) -> Option<&'static str> {
        match self {
            Coding::Br => Some("br"),
            Coding::Gzip => Some("gzip"),
            Coding::Identity => None,
        }
    }

    fn matches(self, token: &str) -> bool {
        match self {
            Coding::Br => token.eq_ignore_ascii_case("br"),
            // RFC 9110 §8.4.1.3: x-gzip is gzip.
            Coding::Gzip => {
                token.eq_ignore_ascii_case("gzip") || token.eq_ignore_ascii_case("x-gzip")
            }
            Coding::Identity => token.eq_ignore_ascii_case("identity"),
        }
    }
}

/// Of `offered` (best first), the coding the request accepts with the
/// highest q-value, a tie going to the earlier; identity when it accepts none
/// of them. Identity competes only when the request names it (or `*`):
/// otherwise it is just the fallback, so `gzip;q=0.1` still gets gzip.
/// Without `Accept-Encoding` any coding is allowed, but a client that says
/// nothing may not decode one, so it gets identity. When even identity is
/// refused (`identity;q=0`) it is sent anyway: a 406 helps no browser.
pub(super) fn coding(request: &HeaderMap, offered: &[Coding]) -> Coding {
    let accepts: Vec<(&str, u16)> = request
        .get_all(ACCEPT_ENCODING)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .filter_map(entry)
        .collect();
    let weight = |coding: Coding| {
        let named = accepts.iter().find(|(token, _)| coding.matches(token));
        let any = accepts.iter().find(|(token, _)| *token == "*");
        named.or(any).map_or(0, |(_, q)| *q)
    };
    let mut best = (Coding::Identity, 0);
    for &coding in offered.iter().chain([&Coding::Identity]) {
        let q = weight(coding);
        if q > best.1 {
            best = (coding, q);
        }
    }
    best.0
}

/// `token[;q=V][;other=…]` → the token and its q-value in thousandths (1000
/// when unstated); None when blank or its q-value is malformed, so the entry
/// counts as unsaid rather than guessed.
fn entry(item: &str) -> Option<(&str, u16)> {
    let mut params = item.split(';').map(str::trim);
    let token = params.next().filter(|t| !t.is_empty())?;
    let mut q = 1000;
    for param in params {
        if let Some((name, value)) = param.split_once('=') {
            if name.trim().eq_ignore_ascii_case("q") {
                q = qvalue(value.trim())?;
            }
        }
    }
    Some((token, q))
}

/// RFC 9110 §12.4.2: `0[.ddd]` or `1[.000]`, in thousandths.
fn qvalue(s: &str) -> Option<u16> {
    let (whole, fraction) = s.split_once('.').unwrap_or((s, ""));
    if fraction.len() > 3 || !fraction.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let thousandths = fraction
        .bytes()
        .chain(std::iter::repeat(b'0'))
        .take(3)
        .fold(0u16, |n, b| n * 10 + u16::from(b - b'0'));
    match whole {
        "0" => Some(thousandths),
        "1" if thousandths == 0 => Some(1000),
        _ => None,
    }
}

/// Whether `If-None-Match` names `etag` (or is `*`), by weak comparison: the
/// browser's copy is current and a 304 will do.
pub(super) fn copy_is_current(request: &HeaderMap, etag: &str) -> bool {
    let opaque = |tag: &str| {
        tag.trim()
            .strip_prefix("W/")
            .unwrap_or(tag.trim())
            .to_owned()
    };
    let ours = opaque(etag);
    request
        .get_all(IF_NONE_MATCH)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .any(|tag| tag.trim() == "*" || opaque(tag) == ours)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;
    use pretty_assertions::assert_eq;

    fn asking(values: &[&'static str], header: axum::http::HeaderName) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for value in values {
            headers.append(header.clone(), HeaderValue::from_static(value));
        }
        headers
    }

    #[test]
    fn qvalues_parse_as_the_grammar_allows_and_nothing_more() {
        let parsed: Vec<_> = [
            "0", "0.", "0.5", "0.125", "1", "1.000", "0.0001", "1.5", "2", ".5", "", "x",
        ]
        .into_iter()
        .map(|s| (s, qvalue(s)))
        .collect();
        assert_eq!(
            parsed,
            vec![
                ("0", Some(0)),
                ("0.", Some(0)),
                ("0.5", Some(500)),
                ("0.125", Some(125)),
                ("1", Some(1000)),
                ("1.000", Some(1000)),
                ("0.0001", None),
                ("1.5", None),
                ("2", None),
                (".5", None),
                ("", None),
                ("x", None),
            ]
        );
    }

    #[test]
    fn codings_are_chosen_by_q_then_by_the_servers_preference() {
        use Coding::*;
        let both = [Br, Gzip];
        let cases: Vec<(&[&'static str], &[Coding], Coding)> = vec![
            (&[], &both, Identity),
            (&["br, gzip"], &both, Br),
            (&["gzip, br"], &both, Br),
            (&["gzip"], &both, Gzip),
            (&["x-gzip"], &both, Gzip),
            (&["br"], &[Gzip], Identity),
            (&["gzip;q=0.9", "br;q=0.8"], &both, Gzip),
            (&["br;q=0, gzip;q=0"], &both, Identity),
            (&["*"], &both, Br),
            (&["*;q=0.5, br;q=0"], &both, Gzip),
            (&["br;q=0.5, identity"], &both, Identity),
            (&["identity;q=0"], &both, Identity),
            (&["gzip ; Q=0.2 ; level=1"], &both, Gzip),
            (&["br;q=2, gzip"], &both, Gzip),
            (&[""], &both, Identity),
        ];
        for (values, offered, want) in cases {
            assert_eq!(
                coding(&asking(values, ACCEPT_ENCODING), offered),
                want,
                "{values:?} of {offered:?}"
            );
        }
    }

    #[test]
    fn if_none_match_compares_entity_tags_weakly() {
        let ours = "W/\"0123456789\"";
        let matched: Vec<_> = [
            "W/\"0123456789\"",
            "\"0123456789\"",
            "\"x\", W/\"0123456789\"",
            "*",
            "\"x\"",
            "\"01234567\"",
        ]
        .into_iter()
        .map(|v| (v, copy_is_current(&asking(&[v], IF_NONE_MATCH), ours)))
        .collect();
        assert_eq!(
            matched,
            vec![
                ("W/\"0123456789\"", true),
                ("\"0123456789\"", true),
                ("\"x\", W/\"0123456789\"", true),
                ("*", true),
                ("\"x\"", false),
                ("\"01234567\"", false),
            ]
        );
        assert!(!copy_is_current(&HeaderMap::new(), ours));
    }
}
