//! lib0's v1 primitives, read strictly: the varints, strings and buffers
//! every y-websocket message and Yjs update is made of.
//!
//! Strict means what lib0's own writer always does: a varint is written in
//! as few bytes as it takes, an unsigned one never passes 53 bits (a
//! JavaScript number), a string is UTF-8. yrs reads looser — a `u32` clock
//! wraps past 2^32, a 10-byte varint is taken — so a value the two read
//! differently is refused here before yrs sees it.

use crate::refusal::Malformed;

/// The largest integer lib0 writes: `Number.MAX_SAFE_INTEGER`.
pub const MAX_SAFE: u64 = (1 << 53) - 1;

/// Reads lib0 values from a byte slice, front to back.
#[derive(Clone, Debug)]
pub struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    /// A reader at the start of `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf, at: 0 }
    }

    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.at
    }

    /// Whether every byte was read.
    pub fn is_done(&self) -> bool {
        self.at == self.buf.len()
    }

    /// The offset of the next byte.
    pub fn at(&self) -> usize {
        self.at
    }

    /// The bytes read since offset `start`.
    pub fn since(&self, start: usize) -> &'a [u8] {
        self.buf.get(start..self.at).unwrap_or_default()
    }

    /// One byte.
    pub fn u8(&mut self) -> Result<u8, Malformed> {
        let byte = *self.buf.get(self.at).ok_or(Malformed::Truncated(self.at))?;
        self.at += 1;
        Ok(byte)
    }

    /// `len` bytes.
    pub fn exact(&mut self, len: usize) -> Result<&'a [u8], Malformed> {
        let end = self
            .at
            .checked_add(len)
            .filter(|end| *end <= self.buf.len())
            .ok_or(Malformed::Truncated(self.buf.len()))?;
        let bytes = &self.buf[self.at..end];
        self.at = end;
        Ok(bytes)
    }

    /// An unsigned varint of at most 53 bits, minimally encoded.
    pub fn var_u53(&mut self) -> Result<u64, Malformed> {
        let start = self.at;
        let mut value: u64 = 0;
        let mut shift = 0u32;
        loop {
            let byte = self.u8()?;
            let bits = u64::from(byte & 0x7f);
            if shift >= 53 || (bits << shift) >> shift != bits || (bits << shift) > MAX_SAFE {
                return Err(Malformed::TooLarge(start));
            }
            value |= bits << shift;
            if byte & 0x80 == 0 {
                // A last byte of 0 after others is a longer spelling of a
                // shorter number.
                if byte == 0 && shift > 0 {
                    return Err(Malformed::Overlong(start));
                }
                return Ok(value);
            }
            shift += 7;
        }
    }

    /// An unsigned varint that fits 32 bits (yrs' clocks and lengths).
    pub fn var_u32(&mut self) -> Result<u32, Malformed> {
        let start = self.at;
        let value = self.var_u53()?;
        u32::try_from(value).map_err(|_| Malformed::TooLarge(start))
    }

    /// A count of things still to read, each taking `min_bytes` at least:
    /// a count the rest of the input cannot hold is refused before anything
    /// is reserved for it.
    pub fn count(&mut self, min_bytes: usize) -> Result<usize, Malformed> {
        let start = self.at;
        let count = self.var_u32()? as usize;
        if count.saturating_mul(min_bytes.max(1)) > self.remaining() {
            return Err(Malformed::CountTooLarge(start));
        }
        Ok(count)
    }

    /// A signed varint (lib0 `writeVarInt`: sign and six bits first) of
    /// at most 53 bits, minimally encoded.
    pub fn var_i53(&mut self) -> Result<i64, Malformed> {
        let start = self.at;
        let first = self.u8()?;
        let negative = first & 0x40 != 0;
        let mut value = u64::from(first & 0x3f);
        if first & 0x80 != 0 {
            let mut shift = 6u32;
            loop {
                let byte = self.u8()?;
                let bits = u64::from(byte & 0x7f);
                if shift >= 53 || (bits << shift) > MAX_SAFE {
                    return Err(Malformed::TooLarge(start));
                }
                value |= bits << shift;
                if byte & 0x80 == 0 {
                    if byte == 0 {
                        return Err(Malformed::Overlong(start));
                    }
                    break;
                }
                shift += 7;
            }
        }
        if value > MAX_SAFE {
            return Err(Malformed::TooLarge(start));
        }
        let value = value as i64;
        Ok(if negative { -value } else { value })
    }

    /// A length-prefixed byte buffer.
    pub fn buf(&mut self) -> Result<&'a [u8], Malformed> {
        let len = self.var_u32()? as usize;
        self.exact(len)
    }

    /// A length-prefixed UTF-8 string.
    pub fn string(&mut self) -> Result<&'a str, Malformed> {
        let start = self.at;
        let bytes = self.buf()?;
        std::str::from_utf8(bytes).map_err(|_| Malformed::NotUtf8(start))
    }
}

/// How many UTF-16 code units `text` takes: Yjs counts a string's length,
/// and so its clocks, in them.
pub fn utf16_len(text: &str) -> usize {
    text.chars().map(char::len_utf16).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn var_u(bytes: &[u8]) -> Result<u64, Malformed> {
        Reader::new(bytes).var_u53()
    }

    #[test]
    fn unsigned_varints_read_as_lib0_writes_them() {
        assert_eq!(var_u(&[0]), Ok(0));
        assert_eq!(var_u(&[0x7f]), Ok(127));
        assert_eq!(var_u(&[0x80, 0x01]), Ok(128));
        assert_eq!(
            var_u(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x0f]),
            Ok(MAX_SAFE)
        );
    }

    #[test]
    fn a_longer_spelling_of_a_number_is_refused() {
        assert_eq!(var_u(&[0x80, 0x00]), Err(Malformed::Overlong(0)));
        assert_eq!(var_u(&[0x81, 0x80, 0x00]), Err(Malformed::Overlong(0)));
        assert_eq!(
            Reader::new(&[0xc0, 0x00]).var_i53(),
            Err(Malformed::Overlong(0))
        );
    }

    #[test]
    fn a_number_past_53_bits_is_refused() {
        assert_eq!(
            var_u(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x1f]),
            Err(Malformed::TooLarge(0))
        );
        assert_eq!(
            var_u(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]),
            Err(Malformed::TooLarge(0))
        );
        assert_eq!(
            Reader::new(&[0x80, 0x80, 0x80, 0x80, 0x10]).var_u32(),
            Err(Malformed::TooLarge(0))
        );
    }

    #[test]
    fn signed_varints_keep_their_sign() {
        assert_eq!(Reader::new(&[0x41]).var_i53(), Ok(-1));
        assert_eq!(Reader::new(&[0x40]).var_i53(), Ok(0));
        assert_eq!(Reader::new(&[0x80, 0x01]).var_i53(), Ok(64));
        assert_eq!(Reader::new(&[0xc0, 0x01]).var_i53(), Ok(-64));
    }

    #[test]
    fn a_count_the_rest_cannot_hold_is_refused() {
        let mut reader = Reader::new(&[0x05, 1, 2, 3]);
        assert_eq!(reader.count(1), Err(Malformed::CountTooLarge(0)));
        let mut reader = Reader::new(&[0x03, 1, 2, 3]);
        assert_eq!(reader.count(1), Ok(3));
    }

    #[test]
    fn strings_must_be_utf8_and_whole() {
        assert_eq!(Reader::new(&[2, b'h', b'i']).string(), Ok("hi"));
        assert_eq!(
            Reader::new(&[2, 0xc3, 0x28]).string(),
            Err(Malformed::NotUtf8(0))
        );
        assert_eq!(
            Reader::new(&[5, b'h']).string(),
            Err(Malformed::Truncated(2))
        );
    }

    #[test]
    fn utf16_length_counts_surrogate_pairs_twice() {
        assert_eq!(utf16_len("a\u{e9}\u{1f600}"), 4);
    }
}
