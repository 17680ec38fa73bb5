//! Whether text is JSON that every party reads the same: `JSON.parse` in
//! each y-websocket client, and `serde_json` inside yrs.
//!
//! Yjs embeds JSON text in updates (an embed, a format mark's value) and in
//! awareness states; a client relayed text `JSON.parse` throws on stops
//! applying what follows. This is the grammar of RFC 8259, which both
//! accept, less the two corners where they differ: an escaped lone
//! surrogate (JavaScript takes it, serde_json refuses) and a number too
//! large for a double (JavaScript reads infinity, serde_json refuses).
//! Nesting is bounded, so no input can run the stack down.

/// Deepest nesting of arrays and objects accepted.
pub const MAX_DEPTH: usize = 64;

/// Whether `text` is one JSON value, with optional whitespace around it.
pub fn is_json(text: &str) -> bool {
    let mut parser = Parser {
        bytes: text.as_bytes(),
        at: 0,
    };
    parser.whitespace();
    if parser.value(0).is_none() {
        return false;
    }
    parser.whitespace();
    parser.at == parser.bytes.len()
}

/// Whether `text` is a JSON object, or `null` — the shapes y-protocols'
/// awareness takes (`null` for a client that left).
pub fn is_object_or_null(text: &str) -> bool {
    let shape = text.trim_start_matches([' ', '\t', '\n', '\r']);
    (shape.starts_with('{') || shape.starts_with("null")) && is_json(text)
}

struct Parser<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    fn eat(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.at += 1)
    }

    fn whitespace(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        let end = self.at.checked_add(word.len())?;
        (self.bytes.get(self.at..end)? == word).then(|| self.at = end)
    }

    fn value(&mut self, depth: usize) -> Option<()> {
        match self.peek()? {
            b'{' => self.object(depth + 1),
            b'[' => self.array(depth + 1),
            b'"' => self.string(),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            b'-' | b'0'..=b'9' => self.number(),
            _ => None,
        }
    }

    fn object(&mut self, depth: usize) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.eat(b'{')?;
        self.whitespace();
        if self.eat(b'}').is_some() {
            return Some(());
        }
        loop {
            self.whitespace();
            self.string()?;
            self.whitespace();
            self.eat(b':')?;
            self.whitespace();
            self.value(depth)?;
            self.whitespace();
            if self.eat(b'}').is_some() {
                return Some(());
            }
            self.eat(b',')?;
        }
    }

    fn array(&mut self, depth: usize) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.eat(b'[')?;
        self.whitespace();
        if self.eat(b']').is_some() {
            return Some(());
        }
        loop {
            self.whitespace();
            self.value(depth)?;
            self.whitespace();
            if self.eat(b']').is_some() {
                return Some(());
            }
            self.eat(b',')?;
        }
    }

    fn string(&mut self) -> Option<()> {
        self.eat(b'"')?;
        loop {
            match self.peek()? {
                b'"' => {
                    self.at += 1;
                    return Some(());
                }
                b'\\' => {
                    self.at += 1;
                    match self.peek()? {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => self.at += 1,
                        b'u' => {
                            self.at += 1;
                            let unit = self.hex4()?;
                            if (0xd800..0xdc00).contains(&unit) {
                                // A high surrogate must be followed by
                                // an escaped low one.
                                self.literal(b"\\u")?;
                                let low = self.hex4()?;
                                if !(0xdc00..0xe000).contains(&low) {
                                    return None;
                                }
                            } else if (0xdc00..0xe000).contains(&unit) {
                                return None;
                            }
                        }
                        _ => return None,
                    }
                }
                // Control characters must be escaped.
                0x00..=0x1f => return None,
                _ => self.at += 1,
            }
        }
    }

    fn hex4(&mut self) -> Option<u32> {
        let end = self.at.checked_add(4)?;
        let digits = self.bytes.get(self.at..end)?;
        let mut unit = 0;
        for &digit in digits {
            unit = unit * 16 + char::from(digit).to_digit(16)?;
        }
        self.at = end;
        Some(unit)
    }

    fn digits(&mut self) -> usize {
        let start = self.at;
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.at += 1;
        }
        self.at - start
    }

    fn number(&mut self) -> Option<()> {
        let start = self.at;
        let _ = self.eat(b'-');
        match self.peek()? {
            b'0' => self.at += 1,
            b'1'..=b'9' => {
                self.digits();
            }
            _ => return None,
        }
        if self.eat(b'.').is_some() && self.digits() == 0 {
            return None;
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.at += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.at += 1;
            }
            if self.digits() == 0 {
                return None;
            }
        }
        // Within a double's range, where both readers agree.
        let text = std::str::from_utf8(&self.bytes[start..self.at]).ok()?;
        text.parse::<f64>().ok().filter(|n| n.is_finite())?;
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_json_parse_and_serde_both_take_is_json() {
        for text in [
            "null",
            " {\"a\": [1, -2.5e3, true, false, null, \"x\\n\\u00e9\"]} ",
            "\"\\ud83d\\ude00\"",
            "0",
            "[]",
            "{}",
        ] {
            assert!(is_json(text), "{text}");
        }
    }

    #[test]
    fn what_either_would_refuse_is_not() {
        for text in [
            "",
            "{",
            "[1,]",
            "01",
            "1.",
            "+1",
            "\"\\ud800\"",
            "\"\\udc00\"",
            "\"a\u{1}\"",
            "1e400",
            "nul",
            "{\"a\" 1}",
            "1 2",
            "undefined",
        ] {
            assert!(!is_json(text), "{text}");
        }
    }

    #[test]
    fn nesting_is_bounded() {
        let deep = "[".repeat(MAX_DEPTH) + &"]".repeat(MAX_DEPTH);
        assert!(is_json(&deep));
        let deeper = "[".repeat(MAX_DEPTH + 1) + &"]".repeat(MAX_DEPTH + 1);
        assert!(!is_json(&deeper));
        assert!(!is_json(&"[".repeat(1_000_000)));
    }

    #[test]
    fn awareness_states_are_objects_or_null() {
        assert!(is_object_or_null("{\"user\":{\"name\":\"ada\"}}"));
        assert!(is_object_or_null("null"));
        assert!(!is_object_or_null("[1]"));
        assert!(!is_object_or_null("\"x\""));
        assert!(!is_object_or_null("{"));
    }
}
