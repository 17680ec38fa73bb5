//! `read_document`'s output written straight from an outline, and written
//! again for the next revision from the last one.
//!
//! A 10,000-block read is megabytes of JSON. Writing it block by block costs
//! milliseconds, most of it the first touch of each block's text, scattered
//! through the heap. Between two reads a Planner's document changes in a few
//! blocks, so each read also notes where every block's entry lies
//! ([`ReadLayout`]); the next read copies the bytes of each block whose
//! identity and digest are unchanged — the digest is over kind and text, so
//! the entry's bytes after its index are the same — and writes only the
//! rest. A read's buffers, once nobody holds it, are what the read after
//! next is written into ([`ReadBuffers`]): a read's megabytes written into
//! pages new to the process each time cost more than the writing.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

use margin_protocol::decisions::EncodedRead;

use crate::block::{Block, BlockIdentity, Digest};
use crate::outline::Outline;

/// A read's JSON and where its blocks' entries lie in it.
#[derive(Clone, Debug)]
pub struct WrittenRead {
    read: EncodedRead,
    layout: Arc<ReadLayout>,
    copied: usize,
}

/// Where each block's entry lies in a written read, in outline order.
#[derive(Debug, Default)]
struct ReadLayout {
    entries: Vec<Entry>,
}

/// One block's entry: the bytes after its index (`,"kind":…}`) are fixed
/// by its kind, text, digest and identity; the index is written afresh.
#[derive(Debug)]
struct Entry {
    identity: BlockIdentity,
    digest: Digest,
    tail: Range<usize>,
}

/// The buffers of a read nobody holds any more, emptied: what a later read
/// is written into.
#[derive(Debug, Default)]
pub struct ReadBuffers {
    json: String,
    entries: Vec<Entry>,
}

impl ReadBuffers {
    /// Bytes held.
    pub fn size(&self) -> usize {
        self.json.capacity() + self.entries.capacity() * std::mem::size_of::<Entry>()
    }
}

impl WrittenRead {
    /// Its buffers, emptied, if nothing else holds its JSON; its layout's
    /// too, if nothing else holds that.
    pub fn into_buffers(self) -> Option<ReadBuffers> {
        let mut json = self.read.into_json()?;
        json.clear();
        let mut entries = Arc::try_unwrap(self.layout)
            .map(|layout| layout.entries)
            .unwrap_or_default();
        entries.clear();
        Some(ReadBuffers { json, entries })
    }

    /// The read, as sent.
    pub fn read(&self) -> &EncodedRead {
        &self.read
    }

    /// How many blocks' entries were copied from the last read.
    pub fn copied(&self) -> usize {
        self.copied
    }

    /// Bytes held: the JSON and its layout.
    pub fn size(&self) -> usize {
        self.read.json().len() + self.layout.entries.len() * std::mem::size_of::<Entry>()
    }
}

/// How far past the expected place a block is looked for in the last read
/// before its entries are indexed by identity: a few blocks deleted.
const NEAR: usize = 8;

/// The last read's entries, matched to the next read's blocks in order.
struct Last<'a> {
    json: &'a str,
    entries: &'a [Entry],
    /// Where the next block is expected.
    next: usize,
    /// Every entry's place by identity, built the first time a block is
    /// not found near where it was expected (blocks added or moved).
    by_identity: Option<HashMap<BlockIdentity, usize>>,
}

impl<'a> Last<'a> {
    fn of(last: &'a WrittenRead) -> Self {
        Last {
            json: last.read.json(),
            entries: &last.layout.entries,
            next: 0,
            by_identity: None,
        }
    }

    /// The bytes of `block`'s entry after its index, if the last read had
    /// the same block with the same words.
    fn tail(&mut self, block: &Block) -> Option<&'a str> {
        let at = self.place(block.identity)?;
        self.next = at + 1;
        let entry = &self.entries[at];
        (entry.digest == block.digest)
            .then(|| self.json.get(entry.tail.clone()))
            .flatten()
    }

    fn place(&mut self, identity: BlockIdentity) -> Option<usize> {
        let near = self.entries.get(self.next..)?.iter().take(NEAR);
        if let Some(k) = near.into_iter().position(|e| e.identity == identity) {
            return Some(self.next + k);
        }
        let entries = self.entries;
        self.by_identity
            .get_or_insert_with(|| {
                entries
                    .iter()
                    .enumerate()
                    .map(|(at, e)| (e.identity, at))
                    .collect()
            })
            .get(&identity)
            .copied()
    }
}

/// `read_document`'s output for `outline` at `revision`, the same JSON as
/// a [`ReadDocumentOutput`] of [`crate::wire::blocks`], byte for byte,
/// without a `BlockEntry` and five strings per block and without serde's
/// byte-at-a-time escaping of text that, in a plan, almost never needs it.
/// Entries of blocks unchanged since `last` are copied from it.
///
/// [`ReadDocumentOutput`]: margin_protocol::decisions::ReadDocumentOutput
pub fn encoded_read(
    revision: i64,
    outline: &Outline,
    last: Option<&WrittenRead>,
) -> Result<WrittenRead, serde_json::Error> {
    encoded_read_into(revision, outline, last, ReadBuffers::default())
}

/// [`encoded_read`], written into `buffers`, grown as needed.
pub fn encoded_read_into(
    revision: i64,
    outline: &Outline,
    last: Option<&WrittenRead>,
    buffers: ReadBuffers,
) -> Result<WrittenRead, serde_json::Error> {
    // Empty already: only `into_buffers` and `default` make them.
    let ReadBuffers {
        mut json,
        mut entries,
    } = buffers;
    let mut last = last.map(Last::of);
    // A block's fixed part (field names, index, digest, identity) is at
    // most about 170 bytes; 160 a block rarely grows the buffer. From the
    // last read, a little over its size: a buffer used again, read after
    // read, grows seldom and never to double.
    let room = match &last {
        Some(last) => last.json.len() + last.json.len() / 32 + 1024,
        None => outline
            .blocks()
            .map(|b| 160 + b.kind.len() + b.text.len())
            .sum::<usize>(),
    };
    json.reserve_exact(32 + room);
    entries.reserve_exact(outline.len());
    let mut copied = 0;
    json.push_str("{\"revision\":");
    json.push_str(itoa::Buffer::new().format(revision));
    json.push_str(",\"outline\":[");
    for (k, block) in outline.blocks().enumerate() {
        if k > 0 {
            json.push(',');
        }
        json.push_str("{\"index\":");
        json.push_str(itoa::Buffer::new().format(block.index));
        let start = json.len();
        match last.as_mut().and_then(|last| last.tail(block)) {
            Some(tail) => {
                json.push_str(tail);
                copied += 1;
            }
            None => push_tail(&mut json, block)?,
        }
        entries.push(Entry {
            identity: block.identity,
            digest: block.digest,
            tail: start..json.len(),
        });
    }
    json.push_str("]}");
    Ok(WrittenRead {
        read: EncodedRead::written(json),
        layout: Arc::new(ReadLayout { entries }),
        copied,
    })
}

/// Writes `block`'s entry after its index.
fn push_tail(json: &mut String, block: &Block) -> Result<(), serde_json::Error> {
    json.push_str(",\"kind\":");
    push_string(json, &block.kind)?;
    json.push_str(",\"text\":");
    push_string(json, &block.text)?;
    json.push_str(",\"digest\":\"");
    block.digest.push_hex(json);
    json.push_str("\",\"identity\":\"");
    block.identity.push_wire(json);
    json.push_str("\"}");
    Ok(())
}

/// Whether JSON needs `text` escaped: serde escapes `"`, `\\` and controls.
fn needs_escaping(text: &str) -> bool {
    // No early exit, so the compiler checks many bytes at a time.
    text.bytes().fold(false, |any, b| {
        any | (b < b' ') | (b == b'"') | (b == b'\\')
    })
}

/// Appends `text` as a JSON string: as it is between quotes when nothing in
/// it needs escaping, else as serde writes it.
fn push_string(json: &mut String, text: &str) -> Result<(), serde_json::Error> {
    if needs_escaping(text) {
        json.push_str(&serde_json::to_string(text)?);
    } else {
        json.push('"');
        json.push_str(text);
        json.push('"');
    }
    Ok(())
}
