//! An SSE client on a raw HTTP/1.1 connection (a tokio `TcpStream`, no
//! HTTP library between the bench and the bytes): the request and the
//! response head, chunked decoding, and the frames (`id`, `event`, `data`)
//! of the body. What a subscriber expects of the frames is the bench's.

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Bytes a subscriber reads at a time.
const READ_CHUNK: usize = 16 * 1024;

/// One subscriber: an HTTP/1.1 GET on its own connection, its chunked body
/// decoded into `text`, where frames are parsed from.
pub(crate) struct Sse {
    stream: TcpStream,
    raw: Vec<u8>,
    chunked: bool,
    /// Body bytes left in the current chunk.
    left: usize,
    /// The CRLF after a chunk's data is still to come.
    crlf: bool,
    text: Vec<u8>,
    ended: bool,
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

impl Sse {
    /// GETs `path` at `addr` as `token` and reads the response head; a
    /// status other than 200 is an error carrying the body read so far.
    pub(crate) async fn open(addr: SocketAddr, path: &str, token: &str) -> Result<Sse, String> {
        let mut stream = TcpStream::connect(addr)
            .await
            .map_err(|e| format!("connect: {e}"))?;
        let _ = stream.set_nodelay(true);
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\n\
             Authorization: Bearer {token}\r\n\r\n"
        );
        stream
            .write_all(request.as_bytes())
            .await
            .map_err(|e| format!("request: {e}"))?;
        let mut raw = Vec::with_capacity(READ_CHUNK);
        let head = loop {
            if let Some(at) = find(&raw, b"\r\n\r\n") {
                break at;
            }
            if raw.len() > READ_CHUNK {
                return Err("response head over 16 KiB".into());
            }
            raw.reserve(READ_CHUNK);
            match stream.read_buf(&mut raw).await {
                Ok(0) => return Err("closed before the response head".into()),
                Ok(_) => {}
                Err(e) => return Err(format!("response: {e}")),
            }
        };
        let head_text = String::from_utf8_lossy(&raw[..head]).to_ascii_lowercase();
        let status = head_text
            .split_whitespace()
            .nth(1)
            .unwrap_or("?")
            .to_owned();
        if status != "200" {
            return Err(format!(
                "{status}: {}",
                String::from_utf8_lossy(&raw[head + 4..])
            ));
        }
        let chunked = head_text.contains("transfer-encoding: chunked");
        raw.drain(..head + 4);
        Ok(Sse {
            stream,
            raw,
            chunked,
            left: 0,
            crlf: false,
            text: Vec::with_capacity(READ_CHUNK),
            ended: false,
        })
    }

    /// Body bytes that came with the response head, not decoded yet.
    pub(crate) fn buffered(&self) -> usize {
        self.raw.len()
    }

    /// The last chunk was read: the server ended the body.
    pub(crate) fn ended(&self) -> bool {
        self.ended
    }

    /// Reads more of the body: how many bytes, 0 once the server closed.
    pub(crate) async fn fill(&mut self) -> std::io::Result<usize> {
        self.raw.reserve(READ_CHUNK);
        self.stream.read_buf(&mut self.raw).await
    }

    /// Moves the body bytes read so far from `raw` to `text`.
    fn dechunk(&mut self) -> Result<(), String> {
        if !self.chunked {
            self.text.extend_from_slice(&self.raw);
            self.raw.clear();
            return Ok(());
        }
        let mut at = 0;
        loop {
            if self.left > 0 {
                let take = self.left.min(self.raw.len() - at);
                self.text.extend_from_slice(&self.raw[at..at + take]);
                at += take;
                self.left -= take;
                if self.left > 0 {
                    break;
                }
                self.crlf = true;
            }
            if self.crlf {
                if self.raw.len() - at < 2 {
                    break;
                }
                at += 2;
                self.crlf = false;
            }
            let Some(nl) = self.raw[at..].iter().position(|&b| b == b'\n') else {
                break;
            };
            let line = String::from_utf8_lossy(&self.raw[at..at + nl]);
            let hex = line.split(';').next().unwrap_or("").trim();
            let size = usize::from_str_radix(hex, 16)
                .map_err(|_| format!("bad chunk size line {line:?}"))?;
            at += nl + 1;
            if size == 0 {
                self.ended = true;
                break;
            }
            self.left = size;
        }
        self.raw.drain(..at);
        Ok(())
    }

    /// Decodes the body read so far and calls `on(id, event, data)` for
    /// each whole frame in it (a comment gives a frame with no id and no
    /// event); an error when the chunked encoding is broken.
    pub(crate) fn frames(
        &mut self,
        on: impl FnMut(Option<u64>, &[u8], &[u8]),
    ) -> Result<(), String> {
        self.dechunk()?;
        frames(&mut self.text, on);
        Ok(())
    }
}

/// Calls `on(id, event, data)` for each whole frame in `text` and drops
/// them from it.
fn frames(text: &mut Vec<u8>, mut on: impl FnMut(Option<u64>, &[u8], &[u8])) {
    let (mut start, mut line) = (0, 0);
    let (mut id, mut event, mut data) = (None, 0..0, 0..0);
    while let Some(nl) = text[line..].iter().position(|&b| b == b'\n') {
        let end = line + nl;
        let content = &text[line..end];
        if content.is_empty() {
            on(id, &text[event.clone()], &text[data.clone()]);
            (id, event, data) = (None, 0..0, 0..0);
            start = end + 1;
        } else if let Some(value) = content.strip_prefix(b"id: ") {
            id = value.iter().try_fold(0u64, |n, &b| {
                b.is_ascii_digit().then(|| n * 10 + u64::from(b - b'0'))
            });
        } else if content.starts_with(b"event: ") {
            event = line + 7..end;
        } else if content.starts_with(b"data: ") {
            data = line + 6..end;
        }
        line = end + 1;
    }
    text.drain(..start);
}
