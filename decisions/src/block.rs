//! One block of a document: its kind, normalised text, digest and identity.

use std::fmt;

use yrs::ID;

/// A block's address-independent fingerprint: `blake3` over its kind and
/// normalised text (SPEC S4). Twins — blocks with the same kind and text —
/// share a digest; that is what makes them twins.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest([u8; 32]);

impl Digest {
    /// Digest of a block of `kind` whose text, once normalised, is `text`.
    ///
    /// The kind and text are length-prefixed so that no (kind, text) pair can
    /// collide with another by moving bytes across the boundary.
    pub fn of(kind: &str, normalised_text: &str) -> Self {
        let mut hasher = blake3::Hasher::new();
        hasher.update(&(kind.len() as u64).to_le_bytes());
        hasher.update(kind.as_bytes());
        hasher.update(&(normalised_text.len() as u64).to_le_bytes());
        hasher.update(normalised_text.as_bytes());
        Digest(*hasher.finalize().as_bytes())
    }

    /// Parses the wire form (64 hex digits, either case).
    pub fn from_hex(hex: &str) -> Option<Digest> {
        blake3::Hash::from_hex(hex)
            .ok()
            .map(|h| Digest(*h.as_bytes()))
    }

    /// Lower-case hex, the form used on the wire.
    pub fn to_hex(&self) -> String {
        blake3::Hash::from(self.0).to_hex().to_string()
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Digest({})", &self.to_hex()[..12])
    }
}

/// The identity of a block: the `yrs` item id of its element. It is stable
/// while the block lives and new when a block is deleted and re-created, so it
/// tells "the same paragraph, edited" from "an identical paragraph".
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlockIdentity {
    /// The client that created the block element.
    pub client: u64,
    /// That client's clock when it created the element.
    pub clock: u32,
}

impl From<ID> for BlockIdentity {
    fn from(id: ID) -> Self {
        BlockIdentity {
            client: id.client.get(),
            clock: id.clock,
        }
    }
}

impl BlockIdentity {
    /// Parses the `client:clock` form.
    pub fn parse(text: &str) -> Option<BlockIdentity> {
        let (client, clock) = text.split_once(':')?;
        Some(BlockIdentity {
            client: client.parse().ok()?,
            clock: clock.parse().ok()?,
        })
    }
}

impl fmt::Display for BlockIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.client, self.clock)
    }
}

impl fmt::Debug for BlockIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// One top-level element of the document's `prosemirror` fragment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Block {
    /// Position in the outline, from 0.
    pub index: usize,
    /// The element name (`paragraph`, `heading`, `bulletList`, …).
    pub kind: String,
    /// The block's text, normalised (see [`normalise`]).
    pub text: String,
    /// `blake3` of kind and normalised text.
    pub digest: Digest,
    /// The block element's item id.
    pub identity: BlockIdentity,
}

/// Normalises block text so that invisible differences do not change a
/// digest: runs of whitespace (including non-breaking spaces, which editors
/// insert for doubled spaces) become one space, and the ends are trimmed.
pub fn normalise(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    push_normalised(text, &mut out);
    out
}

/// [`normalise`], reusing `text`'s buffer when it is already normal.
pub(crate) fn normalise_owned(text: String) -> String {
    if plainly_normal(text.as_bytes()) {
        return text;
    }
    normalise(&text)
}

/// Whether `bytes` are certainly normal already: no leading, trailing or
/// doubled space, no ASCII control character, and no lead byte of a
/// non-ASCII whitespace character (U+0085 and U+00A0 start with `C2`,
/// U+1680 with `E1`, U+2000–U+205F with `E2`, U+3000 with `E3`). A `false`
/// only means "take the careful path". Written without early exits so the
/// compiler can check many bytes at a time.
fn plainly_normal(bytes: &[u8]) -> bool {
    let (Some(&first), Some(&last)) = (bytes.first(), bytes.last()) else {
        return true;
    };
    if first == b' ' || last == b' ' {
        return false;
    }
    let odd = bytes.iter().fold(false, |odd, &b| {
        odd | (b < b' ') | (b == 0xC2) | (b.wrapping_sub(0xE1) < 3)
    });
    let doubled = bytes
        .iter()
        .zip(&bytes[1..])
        .fold(false, |doubled, (&a, &b)| {
            doubled | ((a == b' ') & (b == b' '))
        });
    !odd && !doubled
}

/// Appends `text`, normalised, to `out` (empty, or ending in a word).
///
/// Text that is already normal (most of a plan) is copied whole. Otherwise
/// it walks bytes rather than `split(char::is_whitespace)`: ASCII is
/// classified by one comparison, and only non-ASCII bytes are decoded to ask
/// `char::is_whitespace`. Same result as the definition, faster.
pub(crate) fn push_normalised(text: &str, out: &mut String) {
    if out.is_empty() && plainly_normal(text.as_bytes()) {
        out.push_str(text);
        return;
    }
    let bytes = text.as_bytes();
    let mut word_start = None;
    let mut i = 0;
    while i < bytes.len() {
        let byte = bytes[i];
        let (space, len) = if byte.is_ascii() {
            // The ASCII members of Unicode White_Space: TAB, LF, VT, FF, CR, SP.
            (matches!(byte, b'\t'..=b'\r' | b' '), 1)
        } else {
            // `i` is always on a character boundary.
            text[i..]
                .chars()
                .next()
                .map_or((false, 1), |c| (c.is_whitespace(), c.len_utf8()))
        };
        match (space, word_start) {
            (true, Some(start)) => {
                push_word(out, &text[start..i]);
                word_start = None;
            }
            (false, None) => word_start = Some(i),
            _ => {}
        }
        i += len;
    }
    if let Some(start) = word_start {
        push_word(out, &text[start..]);
    }
}

fn push_word(out: &mut String, word: &str) {
    if !out.is_empty() {
        out.push(' ');
    }
    out.push_str(word);
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn normalise_collapses_whitespace_and_trims() {
        assert_eq!(normalise("  a\u{a0}\u{a0}b\n\tc  "), "a b c");
        assert_eq!(normalise(""), "");
    }

    /// The definition `normalise` must keep: words split on Unicode
    /// whitespace, joined by one space.
    fn normalise_by_definition(text: &str) -> String {
        text.split(char::is_whitespace)
            .filter(|w| !w.is_empty())
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn normalise_matches_its_definition_on_unicode_whitespace_and_text() {
        let samples = [
            "",
            " ",
            "plain words already normal",
            "\t\n\u{b}\u{c}\r lead and trail \r\n",
            "nbsp\u{a0}\u{a0}and\u{2003}em\u{3000}ideographic\u{2028}line\u{85}nel",
            "not space: \u{200b}zero-width \u{1c}\u{1f} file sep",
            "héllo wörld — ünïcödé  ✓ 日本語　テキスト",
            "a",
            "\u{a0}",
            "trailing multibyte é",
            "héllo wörld, non-ASCII but no whitespace lead bytes",
            "smart “quotes” and an em — dash, U+2026…",
            "ends in nbsp\u{a0}",
            "double  space in the middle",
            " leading space",
            "trailing space ",
        ];
        for sample in samples {
            assert_eq!(
                normalise(sample),
                normalise_by_definition(sample),
                "{sample:?}"
            );
        }
    }

    #[test]
    fn normalise_matches_its_definition_on_every_short_mix_of_tricky_characters() {
        let alphabet = [
            " ", "\t", "a", "é", "\u{a0}", "—", "\u{2003}", "\u{1c}", "\u{3000}",
        ];
        let mut strings = vec![String::new()];
        for _ in 0..4 {
            let longer: Vec<String> = strings
                .iter()
                .flat_map(|s| alphabet.iter().map(move |c| format!("{s}{c}")))
                .collect();
            strings.extend(longer);
            strings.sort();
            strings.dedup();
        }
        for sample in strings {
            let expected = normalise_by_definition(&sample);
            assert_eq!(normalise(&sample), expected, "{sample:?}");
            assert_eq!(normalise_owned(sample.clone()), expected, "{sample:?}");
        }
    }

    #[test]
    fn digest_depends_on_kind_and_text() {
        assert_eq!(Digest::of("paragraph", "x"), Digest::of("paragraph", "x"));
        assert_ne!(Digest::of("paragraph", "x"), Digest::of("heading", "x"));
        assert_ne!(Digest::of("paragraph", "x"), Digest::of("paragraph", "y"));
        // The length prefix keeps the kind/text boundary unambiguous.
        assert_ne!(Digest::of("ab", "c"), Digest::of("a", "bc"));
    }

    #[test]
    fn digest_wire_value_is_pinned() {
        // Digests travel to clients and are stored with cards: the bytes
        // hashed must never change.
        assert_eq!(
            Digest::of("paragraph", "Ship the beta").to_hex(),
            "e5b5d65ce9a50c297a4cf6b28c8eb93f6e0757ac08bd9fbd3ba5efcf258928c0"
        );
    }

    #[test]
    fn identity_text_round_trips() {
        let identity = BlockIdentity {
            client: 42,
            clock: 7,
        };
        assert_eq!(BlockIdentity::parse(&identity.to_string()), Some(identity));
        assert_eq!(BlockIdentity::parse("42"), None);
        assert_eq!(BlockIdentity::parse("a:1"), None);
    }

    #[test]
    fn digest_hex_round_trips() {
        let digest = Digest::of("paragraph", "x");
        assert_eq!(Digest::from_hex(&digest.to_hex()), Some(digest));
        assert_eq!(Digest::from_hex("not hex"), None);
    }
}
