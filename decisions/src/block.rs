//! One block of a document: its kind, normalised text, digest and identity.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use unicode_normalization::{is_nfc_quick, IsNormalized, UnicodeNormalization};
use yrs::ID;

/// A block's address-independent fingerprint: `blake3` over its kind and
/// normalised text (SPEC S4, S4a: NFC, whitespace collapsed). Twins — blocks
/// with the same kind and text, however the text is spelled in Unicode —
/// share a digest; that is what makes them twins.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest([u8; 32]);

/// Inputs up to this many bytes are hashed from a buffer on the stack
/// (one `blake3` chunk).
const ONE_CALL: usize = 1024;

impl Digest {
    /// Digest of a block of `kind` whose text, once normalised, is `text`.
    ///
    /// The kind and text are length-prefixed so that no (kind, text) pair can
    /// collide with another by moving bytes across the boundary.
    pub fn of(kind: &str, normalised_text: &str) -> Self {
        let (kind_len, text_len) = (
            (kind.len() as u64).to_le_bytes(),
            (normalised_text.len() as u64).to_le_bytes(),
        );
        let parts = [
            &kind_len[..],
            kind.as_bytes(),
            &text_len[..],
            normalised_text.as_bytes(),
        ];
        let len: usize = parts.iter().map(|part| part.len()).sum();
        // Most blocks fit one `blake3` chunk. Hashing them from one buffer
        // in a single call skips the incremental hasher's bookkeeping for
        // four small updates; the bytes hashed, and so the digest, are the
        // same either way.
        if len <= ONE_CALL {
            let mut buffer = [0u8; ONE_CALL];
            let mut at = 0;
            for part in parts {
                buffer[at..at + part.len()].copy_from_slice(part);
                at += part.len();
            }
            return Digest(*blake3::hash(&buffer[..len]).as_bytes());
        }
        let mut hasher = blake3::Hasher::new();
        for part in parts {
            hasher.update(part);
        }
        Digest(*hasher.finalize().as_bytes())
    }

    /// Parses the wire form (64 hex digits, either case).
    pub fn from_hex(hex: &str) -> Option<Digest> {
        blake3::Hash::from_hex(hex)
            .ok()
            .map(|h| Digest(*h.as_bytes()))
    }

    /// The digest's 32 bytes.
    pub(crate) fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// Lower-case hex, the form used on the wire.
    pub fn to_hex(&self) -> String {
        let mut hex = String::with_capacity(64);
        self.push_hex(&mut hex);
        hex
    }

    /// Appends the wire form to `out`. Not through `Display`: that took
    /// a large share of `read_document`'s time.
    pub fn push_hex(&self, out: &mut String) {
        out.push_str(blake3::Hash::from(self.0).to_hex().as_str());
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
    /// The `client:clock` form, as `to_string` gives it but without the
    /// formatting machinery: `read_document` writes one per block.
    pub fn to_wire(&self) -> String {
        let mut wire = String::with_capacity(31);
        self.push_wire(&mut wire);
        wire
    }

    /// Appends the `client:clock` form to `out`.
    pub fn push_wire(&self, out: &mut String) {
        let (mut client, mut clock) = (itoa::Buffer::new(), itoa::Buffer::new());
        out.push_str(client.format(self.client));
        out.push(':');
        out.push_str(clock.format(self.clock));
    }

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
        let (mut client, mut clock) = (itoa::Buffer::new(), itoa::Buffer::new());
        f.write_str(client.format(self.client))?;
        f.write_str(":")?;
        f.write_str(clock.format(self.clock))
    }
}

impl fmt::Debug for BlockIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// One top-level element of the document's `prosemirror` fragment.
///
/// Its strings are shared (`Arc<str>`): the part of an outline a change
/// touches is copied whenever it changes while a snapshot of it is held (a
/// remembered read, SPEC S5), and a copied block then costs a reference
/// count per string instead of the text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Block {
    /// Position in the outline, from 0.
    pub index: usize,
    /// The element name (`paragraph`, `heading`, `bulletList`, …): the
    /// element's own tag, shared with `yrs`.
    pub kind: Arc<str>,
    /// The block's text, normalised (see [`normalise`]).
    pub text: Arc<str>,
    /// `blake3` of kind and normalised text.
    pub digest: Digest,
    /// The block element's item id.
    pub identity: BlockIdentity,
}

/// Normalises block text so that invisible differences do not change a
/// digest (SPEC S4a): the text is put in Unicode NFC, so that a composed
/// "é" (U+00E9) and a decomposed one (`e` + U+0301) are the same text; then
/// runs of whitespace (including non-breaking spaces, which editors insert
/// for doubled spaces) become one space, and the ends are trimmed.
///
/// The result is NFC too: every Unicode whitespace character is a starter
/// that composes with nothing, so collapsing or trimming whitespace never
/// makes text un-composed again, and `normalise` is idempotent.
pub fn normalise(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    push_normalised(text, &mut out);
    out
}

/// [`normalise`], reusing `text`'s buffer when it is already normal (ASCII
/// or NFC text without stray whitespace, which is most of a plan).
pub(crate) fn normalise_owned(text: String) -> String {
    let text = match composed(&text) {
        Cow::Borrowed(_) => text,
        // Not NFC: composing has built a new buffer; collapse that one.
        Cow::Owned(composed) => composed,
    };
    if plainly_normal(text.as_bytes()) {
        return text;
    }
    let mut out = String::with_capacity(text.len());
    push_collapsed(&text, &mut out);
    out
}

/// `text` in NFC, borrowed when it certainly is already. ASCII is NFC and is
/// checked a word at a time; other text asks the quick check of UAX #15,
/// and composes whenever that is not a certain yes.
fn composed(text: &str) -> Cow<'_, str> {
    if text.is_ascii() || is_nfc_quick(text.chars()) == IsNormalized::Yes {
        Cow::Borrowed(text)
    } else {
        Cow::Owned(text.nfc().collect())
    }
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
/// `text` is put in NFC first (see [`composed`]); `out` ends in a word or
/// is empty, and a word is joined to it by a space, which nothing composes
/// across, so appending keeps `out` in NFC.
pub(crate) fn push_normalised(text: &str, out: &mut String) {
    push_collapsed(&composed(text), out);
}

/// Appends `text`, already NFC, to `out` with its whitespace collapsed.
///
/// Text that is already normal (most of a plan) is copied whole. Otherwise
/// it walks bytes rather than `split(char::is_whitespace)`: ASCII is
/// classified by one comparison, and only non-ASCII bytes are decoded to ask
/// `char::is_whitespace`. Same result as the definition, faster.
fn push_collapsed(text: &str, out: &mut String) {
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

    /// The definition `normalise` must keep: the text in NFC, split into
    /// words on Unicode whitespace, joined by one space.
    fn normalise_by_definition(text: &str) -> String {
        let text: String = text.nfc().collect();
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
            "decomposed cafe\u{301} au\u{a0}\u{a0}lait",
            "\u{212b}ngstro\u{308}m, a singleton and a decomposed umlaut",
            " \u{301} a lone mark after a space",
            "marks out of order: s\u{307}\u{323}",
            "\u{1100}\u{1161}\u{11a8} jamo\u{2000}en quad",
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
            // Pieces that compose or reorder: `e` + acute is `é`, dot below
            // sorts before acute, jamo L + V is one syllable, and U+2000 is
            // a whitespace singleton (NFC maps it to U+2002).
            "e", "\u{301}", "\u{323}", "\u{1100}", "\u{1161}", "\u{2000}",
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
            // Normal text is NFC, and normalising it again changes nothing.
            assert!(unicode_normalization::is_nfc(&expected), "{sample:?}");
            assert_eq!(normalise(&expected), expected, "{sample:?}");
        }
    }

    /// Pairs of one text in two canonically equivalent spellings: composed
    /// (NFC) first, then decomposed or otherwise non-NFC.
    const SPELLINGS: [(&str, &str); 6] = [
        ("caf\u{e9}", "cafe\u{301}"),
        ("\u{c5}ngstr\u{f6}m", "A\u{30a}ngstro\u{308}m"),
        // U+212B ANGSTROM SIGN is a singleton: NFC maps it to U+00C5.
        ("\u{c5}", "\u{212b}"),
        // Hangul jamo compose into one syllable.
        ("\u{ac00}", "\u{1100}\u{1161}"),
        // Combining marks in non-canonical order: dot below (ccc 220)
        // sorts before dot above (ccc 230), then composes with `s`.
        ("\u{1e69}", "s\u{307}\u{323}"),
        (
            "Pick a caf\u{e9} in M\u{fc}nchen",
            "Pick a cafe\u{301} in Mu\u{308}nchen",
        ),
    ];

    #[test]
    fn normalise_composes_every_spelling_to_nfc() {
        for (nfc, other) in SPELLINGS {
            assert_eq!(normalise(other), nfc, "{other:?}");
            assert_eq!(normalise_owned(other.to_owned()), nfc, "{other:?}");
            assert_eq!(normalise(nfc), nfc, "{nfc:?}");
        }
    }

    #[test]
    fn normalise_composes_and_collapses_whitespace_together() {
        assert_eq!(
            normalise("  cafe\u{301}\u{a0}\u{a0}au\n\tlait  "),
            "caf\u{e9} au lait"
        );
        // A mark after a space has nothing to compose with; it stays.
        assert_eq!(normalise("e \u{301}"), "e \u{301}");
        let mut out = String::new();
        push_normalised(" first cafe\u{301}  second ", &mut out);
        assert_eq!(out, "first caf\u{e9} second");
    }

    #[test]
    fn normalise_owned_keeps_the_buffer_of_text_already_normal() {
        for text in [
            "Ship the beta",
            "caf\u{e9} au lait, M\u{fc}nchen, \u{65e5}\u{672c}",
        ] {
            let owned = text.to_owned();
            let at = owned.as_ptr();
            let normal = normalise_owned(owned);
            assert_eq!(normal, text);
            assert_eq!(normal.as_ptr(), at, "{text:?} was copied");
        }
    }

    #[test]
    fn digests_of_two_spellings_of_one_text_agree() {
        for kind in ["paragraph", "heading"] {
            for (nfc, other) in SPELLINGS {
                assert_eq!(
                    Digest::of(kind, &normalise(other)),
                    Digest::of(kind, &normalise(nfc)),
                    "{kind} {other:?}"
                );
            }
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
    fn digest_is_the_same_whether_or_not_its_input_fits_one_call() {
        // Short inputs are hashed in one call, long ones incrementally: the
        // digest is `blake3` of the same bytes on both sides of the limit.
        let by_definition = |kind: &str, text: &str| {
            let mut hasher = blake3::Hasher::new();
            hasher.update(&(kind.len() as u64).to_le_bytes());
            hasher.update(kind.as_bytes());
            hasher.update(&(text.len() as u64).to_le_bytes());
            hasher.update(text.as_bytes());
            Digest(*hasher.finalize().as_bytes())
        };
        let kind = "paragraph";
        let fixed = 16 + kind.len();
        for len in [
            0,
            1,
            ONE_CALL - fixed - 1,
            ONE_CALL - fixed,
            ONE_CALL - fixed + 1,
            5000,
        ] {
            let text = "é".repeat(len / 2) + &"x".repeat(len % 2);
            assert_eq!(
                Digest::of(kind, &text),
                by_definition(kind, &text),
                "{len} bytes"
            );
        }
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
    fn identity_is_written_as_client_colon_clock_at_every_width() {
        for (client, clock, text) in [
            (0, 0, "0:0"),
            (10, 9, "10:9"),
            (1_234_567_890, 100, "1234567890:100"),
            (u64::MAX, u32::MAX, "18446744073709551615:4294967295"),
        ] {
            let identity = BlockIdentity { client, clock };
            assert_eq!(identity.to_wire(), text);
            assert_eq!(identity.to_string(), text);
            assert_eq!(BlockIdentity::parse(text), Some(identity));
        }
    }

    #[test]
    fn digest_hex_round_trips() {
        let digest = Digest::of("paragraph", "x");
        assert_eq!(Digest::from_hex(&digest.to_hex()), Some(digest));
        assert_eq!(Digest::from_hex("not hex"), None);
    }
}
