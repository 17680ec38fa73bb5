//! Margin's own decoder of Yjs update v1, written from the format, which
//! refuses every byte a real Yjs or yrs encoder would not have written.
//!
//! An update is a run of structs per client — each a GC range or an item
//! with its origins, parent and content — and then a delete set. The
//! decoder reads every field yrs reads, the way Yjs writes it, and keeps
//! what the document-level check (`known`) needs: ids, lengths, parents and
//! the kind of content. It allocates nothing for a count the input cannot
//! hold, recurses no deeper than [`MAX_DEPTH`], and copies no content.

use std::collections::HashSet;

use crate::json::is_json;
use crate::lib0::{utf16_len, Reader};
use crate::refusal::{Id, Refusal};

/// Deepest nesting of lib0 `Any` values (arrays and maps) in an item.
pub const MAX_DEPTH: usize = 64;

/// A decoded update: nothing in it is owned but the lists.
#[derive(Debug, PartialEq, Eq)]
pub struct Update<'a> {
    /// Each client's structs, in the order written.
    pub runs: Vec<Run<'a>>,
    /// The delete set.
    pub deletes: Vec<Deletes>,
}

/// One client's structs, consecutive from `clock`.
#[derive(Debug, PartialEq, Eq)]
pub struct Run<'a> {
    /// The client.
    pub client: u64,
    /// The clock of the first struct.
    pub clock: u32,
    /// The structs, each starting where the one before ends.
    pub structs: Vec<Struct<'a>>,
}

impl Run<'_> {
    /// The clock after the last struct.
    pub fn end(&self) -> u32 {
        self.structs.last().map_or(self.clock, Struct::end)
    }
}

/// A struct: `len` clocks from `clock`.
#[derive(Debug, PartialEq, Eq)]
pub struct Struct<'a> {
    /// Its first clock.
    pub clock: u32,
    /// How many clocks it covers (UTF-16 units of a string).
    pub len: u32,
    /// A GC range or an item.
    pub body: Body<'a>,
}

impl Struct<'_> {
    /// The clock after it.
    pub fn end(&self) -> u32 {
        self.clock + self.len
    }
}

/// What a struct is.
#[derive(Debug, PartialEq, Eq)]
pub enum Body<'a> {
    /// Collected: the range is known, its content gone.
    Gc,
    /// An item.
    Item(Item<'a>),
}

/// An item's references and the kind of its content.
#[derive(Debug, PartialEq, Eq)]
pub struct Item<'a> {
    /// The last clock of the item to its left when written.
    pub origin: Option<Id>,
    /// The first clock of the item to its right when written.
    pub right_origin: Option<Id>,
    /// The type it was written into, when neither origin is given.
    pub parent: Option<DeclaredParent<'a>>,
    /// The map key it was written under, when neither origin is given.
    pub parent_sub: Option<&'a str>,
    /// What it holds.
    pub content: Content,
    /// The info byte: the content's tag and which references follow.
    pub info: u8,
    /// The content as written, from its first byte to its last.
    pub content_bytes: &'a [u8],
}

/// A parent as an update names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeclaredParent<'a> {
    /// A root type, by name (`prosemirror`).
    Root(&'a str),
    /// A type item, by id.
    Type(Id),
}

/// The kind of an item's content, as far as the document's shape goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Content {
    /// Content already collected (`ContentDeleted`).
    Deleted,
    /// A type (a paragraph, a text, a map): other items may be written
    /// into it.
    Type,
    /// Text, values, a binary, an embed or a format mark.
    Value,
}

/// One client's deleted ranges, `[start, end)`, in order.
#[derive(Debug, PartialEq, Eq)]
pub struct Deletes {
    /// The client.
    pub client: u64,
    /// The ranges.
    pub ranges: Vec<(u32, u32)>,
}

// Info byte: the content tag in the low five bits, then three flags.
const TAG: u8 = 0x1f;
const HAS_PARENT_SUB: u8 = 0x20;
const HAS_RIGHT_ORIGIN: u8 = 0x40;
const HAS_ORIGIN: u8 = 0x80;

const GC: u8 = 0;
const DELETED: u8 = 1;
const JSON: u8 = 2;
const BINARY: u8 = 3;
const STRING: u8 = 4;
const EMBED: u8 = 5;
const FORMAT: u8 = 6;
const TYPE: u8 = 7;
const ANY: u8 = 8;
const DOC: u8 = 9;
const SKIP: u8 = 10;

// Type tags (Yjs `typeRefs`).
const ARRAY: u8 = 0;
const MAP: u8 = 1;
const TEXT: u8 = 2;
const XML_ELEMENT: u8 = 3;
const XML_FRAGMENT: u8 = 4;
const XML_HOOK: u8 = 5;
const XML_TEXT: u8 = 6;

/// Decodes `bytes` as a Yjs v1 update, refusing anything Yjs would not
/// have written.
pub fn decode(bytes: &[u8]) -> Result<Update<'_>, Refusal> {
    let mut reader = Reader::new(bytes);
    // Each client: a struct count, the client and a clock, a byte each
    // at least.
    let clients = reader.count(3)?;
    let mut runs = Vec::with_capacity(clients);
    let mut seen = HashSet::with_capacity(clients);
    let mut empty = None;
    for _ in 0..clients {
        // A struct takes two bytes at least (a GC's info and length).
        let count = reader.count(2)?;
        let client = reader.var_u53()?;
        let clock = reader.var_u32()?;
        if !seen.insert(client) {
            return Err(Refusal::RepeatedClient(client));
        }
        // Harmless to read past, so told only if nothing worse is wrong.
        if count == 0 {
            empty.get_or_insert(Refusal::EmptyRun(client));
        }
        let mut structs = Vec::with_capacity(count);
        let mut at = clock;
        for _ in 0..count {
            let id = Id::new(client, at);
            let (len, body) = read_struct(&mut reader, id)?;
            if len == 0 {
                return Err(Refusal::EmptyStruct(id));
            }
            let end = at.checked_add(len).ok_or(Refusal::ClockOverflow(client))?;
            structs.push(Struct {
                clock: at,
                len,
                body,
            });
            at = end;
        }
        runs.push(Run {
            client,
            clock,
            structs,
        });
    }
    let deletes = read_deletes(&mut reader, &mut empty)?;
    if !reader.is_done() {
        return Err(Refusal::TrailingBytes);
    }
    if let Some(empty) = empty {
        return Err(empty);
    }
    Ok(Update { runs, deletes })
}

fn read_id(reader: &mut Reader<'_>) -> Result<Id, Refusal> {
    let client = reader.var_u53()?;
    let clock = reader.var_u32()?;
    Ok(Id::new(client, clock))
}

/// Reads one struct; returns its length and body.
fn read_struct<'a>(reader: &mut Reader<'a>, at: Id) -> Result<(u32, Body<'a>), Refusal> {
    let info = reader.u8()?;
    match info {
        GC => return Ok((reader.var_u32()?, Body::Gc)),
        SKIP => return Err(Refusal::Skip(at)),
        _ => {}
    }
    // yrs reads the tag from four bits, Yjs from five; GC and Skip carry
    // no flags. Any of these would be read two ways.
    let tag = info & TAG;
    if matches!(tag, GC | SKIP) || tag > SKIP {
        return Err(Refusal::UnknownContent { at, tag: info });
    }
    match tag {
        JSON => return Err(Refusal::LegacyJson(at)),
        DOC => return Err(Refusal::Subdocument(at)),
        _ => {}
    }
    let origin = (info & HAS_ORIGIN != 0)
        .then(|| read_id(reader))
        .transpose()?;
    let right_origin = (info & HAS_RIGHT_ORIGIN != 0)
        .then(|| read_id(reader))
        .transpose()?;
    let (mut parent, mut parent_sub) = (None, None);
    if origin.is_none() && right_origin.is_none() {
        parent = Some(match reader.var_u32()? {
            1 => DeclaredParent::Root(reader.string()?),
            0 => DeclaredParent::Type(read_id(reader)?),
            _ => return Err(Refusal::ParentInfo(at)),
        });
        if info & HAS_PARENT_SUB != 0 {
            parent_sub = Some(reader.string()?);
        }
    }
    let start = reader.at();
    let (len, content) = read_content(reader, tag, at)?;
    let content_bytes = reader.since(start);
    Ok((
        len,
        Body::Item(Item {
            origin,
            right_origin,
            parent,
            parent_sub,
            content,
            info,
            content_bytes,
        }),
    ))
}

fn read_content(reader: &mut Reader<'_>, tag: u8, at: Id) -> Result<(u32, Content), Refusal> {
    Ok(match tag {
        DELETED => (reader.var_u32()?, Content::Deleted),
        BINARY => {
            reader.buf()?;
            (1, Content::Value)
        }
        STRING => {
            let text = reader.string()?;
            let len =
                u32::try_from(utf16_len(text)).map_err(|_| Refusal::ClockOverflow(at.client))?;
            (len, Content::Value)
        }
        EMBED => {
            json(reader, at)?;
            (1, Content::Value)
        }
        FORMAT => {
            reader.string()?;
            json(reader, at)?;
            (1, Content::Value)
        }
        TYPE => {
            match reader.u8()? {
                ARRAY | MAP | TEXT | XML_FRAGMENT | XML_TEXT => {}
                XML_ELEMENT => {
                    reader.string()?;
                }
                XML_HOOK => return Err(Refusal::XmlHook(at)),
                other => return Err(Refusal::UnknownType { at, tag: other }),
            }
            (1, Content::Type)
        }
        ANY => {
            let count = reader.count(1)?;
            for _ in 0..count {
                read_any(reader, at, 0)?;
            }
            (count as u32, Content::Value)
        }
        // `read_struct` refused every other tag.
        other => return Err(Refusal::UnknownContent { at, tag: other }),
    })
}

fn json(reader: &mut Reader<'_>, at: Id) -> Result<(), Refusal> {
    if is_json(reader.string()?) {
        Ok(())
    } else {
        Err(Refusal::NotJson(at))
    }
}

/// Reads one lib0 `Any` value (lib0 `readAny`).
fn read_any(reader: &mut Reader<'_>, at: Id, depth: usize) -> Result<(), Refusal> {
    if depth > MAX_DEPTH {
        return Err(Refusal::TooDeep(at));
    }
    match reader.u8()? {
        // undefined, null, false, true
        127 | 126 | 121 | 120 => {}
        125 => {
            reader.var_i53()?;
        }
        124 => {
            reader.exact(4)?;
        }
        123 | 122 => {
            reader.exact(8)?;
        }
        119 => {
            reader.string()?;
        }
        118 => {
            // A key and a value, a byte each at least.
            let entries = reader.count(2)?;
            for _ in 0..entries {
                reader.string()?;
                read_any(reader, at, depth + 1)?;
            }
        }
        117 => {
            let items = reader.count(1)?;
            for _ in 0..items {
                read_any(reader, at, depth + 1)?;
            }
        }
        116 => {
            reader.buf()?;
        }
        tag => return Err(Refusal::UnknownAny { at, tag }),
    }
    Ok(())
}

fn read_deletes(
    reader: &mut Reader<'_>,
    empty: &mut Option<Refusal>,
) -> Result<Vec<Deletes>, Refusal> {
    // Each client: the client and a range count.
    let clients = reader.count(2)?;
    let mut deletes = Vec::with_capacity(clients);
    let mut seen = HashSet::with_capacity(clients);
    for _ in 0..clients {
        let client = reader.var_u53()?;
        if !seen.insert(client) {
            return Err(Refusal::RepeatedDeleteClient(client));
        }
        // A range: a clock and a length.
        let count = reader.count(2)?;
        if count == 0 {
            empty.get_or_insert(Refusal::EmptyDeleteRun(client));
        }
        let mut ranges = Vec::with_capacity(count);
        let mut last_end = 0;
        for _ in 0..count {
            let start = reader.var_u32()?;
            let len = reader.var_u32()?;
            let at = Id::new(client, start);
            if len == 0 {
                return Err(Refusal::EmptyDeleteRange(at));
            }
            if start < last_end {
                return Err(Refusal::UnorderedDeletes(at));
            }
            let end = start
                .checked_add(len)
                .ok_or(Refusal::DeleteOverflow(client))?;
            ranges.push((start, end));
            last_end = end;
        }
        deletes.push(Deletes { client, ranges });
    }
    Ok(deletes)
}
