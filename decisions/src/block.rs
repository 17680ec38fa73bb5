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
    for word in text
        .split(|c: char| c.is_whitespace())
        .filter(|w| !w.is_empty())
    {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
    }
    out
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

    #[test]
    fn digest_depends_on_kind_and_text() {
        assert_eq!(Digest::of("paragraph", "x"), Digest::of("paragraph", "x"));
        assert_ne!(Digest::of("paragraph", "x"), Digest::of("heading", "x"));
        assert_ne!(Digest::of("paragraph", "x"), Digest::of("paragraph", "y"));
        // The length prefix keeps the kind/text boundary unambiguous.
        assert_ne!(Digest::of("ab", "c"), Digest::of("a", "bc"));
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
