//! Why an update is refused: each invariant a real Yjs encoder keeps, by
//! name, with what the sender is told.
//!
//! A refusal names the one rule broken and where (`client:clock`), so a
//! refused editor's close frame says what was wrong, and each class of
//! past yrs crash is refused by a rule of its own, not by a blanket check.

use std::fmt;

/// A struct's identity: the client that wrote it and its clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Id {
    /// The Yjs client id (at most 53 bits).
    pub client: u64,
    /// The clock within that client's structs.
    pub clock: u32,
}

impl Id {
    /// The id `client:clock`.
    pub const fn new(client: u64, clock: u32) -> Self {
        Id { client, clock }
    }
}

impl fmt::Display for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.client, self.clock)
    }
}

/// Which of an item's references a refusal is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reference {
    /// The item to its left when it was written.
    Origin,
    /// The item to its right when it was written.
    RightOrigin,
    /// The type it was written into.
    Parent,
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Reference::Origin => "origin",
            Reference::RightOrigin => "right origin",
            Reference::Parent => "parent",
        })
    }
}

/// A lib0 value that is not what lib0 writes; the offset is where it starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Malformed {
    /// The input ends inside a value.
    #[error("it ends inside a value (byte {0})")]
    Truncated(usize),
    /// A varint longer than the number needs.
    #[error("the number at byte {0} is not in its shortest form")]
    Overlong(usize),
    /// A number past what the field holds (53 bits, or 32 for clocks).
    #[error("the number at byte {0} is too large")]
    TooLarge(usize),
    /// A count of more entries than the rest of the input can hold.
    #[error("the count at byte {0} is more than the rest can hold")]
    CountTooLarge(usize),
    /// A string that is not UTF-8.
    #[error("the string at byte {0} is not UTF-8")]
    NotUtf8(usize),
}

/// Why an update was refused. Every variant is an invariant that the Yjs
/// and yrs encoders keep; nothing of a refused update is applied, stored or
/// relayed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// A value that lib0 would not have written.
    #[error("{0}")]
    Malformed(#[from] Malformed),
    /// Bytes after the delete set.
    #[error("bytes follow its delete set")]
    TrailingBytes,
    /// One client's structs in two runs: a v1 update writes each client once.
    #[error("client {0} has two runs of structs")]
    RepeatedClient(u64),
    /// A client listed with no structs.
    #[error("client {0} has a run of no structs")]
    EmptyRun(u64),
    /// A struct that covers no clock (an empty string, a zero length).
    #[error("the struct at {0} has no length")]
    EmptyStruct(Id),
    /// A client's clocks pass 2^32, where yrs' wrap.
    #[error("client {0}'s clocks pass 2^32")]
    ClockOverflow(u64),
    /// A Skip struct: a hole, after which everything waits for changes
    /// that were never sent. Only merged updates carry them; an editor's
    /// never does.
    #[error("the update skips clocks at {0}")]
    Skip(Id),
    /// A content tag Yjs does not define, or GC or Skip with item flags.
    #[error("the struct at {at} has content tag {tag}, which Yjs does not write")]
    UnknownContent {
        /// The struct.
        at: Id,
        /// Its info byte.
        tag: u8,
    },
    /// Content JSON (tag 2): written by Yjs before 13.0 only, and read by
    /// yrs 0.28 with one string more than it holds.
    #[error("the struct at {0} holds legacy JSON content, which yrs misreads")]
    LegacyJson(Id),
    /// A subdocument (tag 9): Margin documents hold none.
    #[error("the struct at {0} holds a subdocument, which Margin documents do not")]
    Subdocument(Id),
    /// A type tag Yjs does not define.
    #[error("the struct at {at} is a type of tag {tag}, which Yjs does not write")]
    UnknownType {
        /// The struct.
        at: Id,
        /// Its type tag.
        tag: u8,
    },
    /// An XML hook: yrs 0.28 does not read the hook's name that Yjs writes.
    #[error("the struct at {0} is an XML hook, which yrs misreads")]
    XmlHook(Id),
    /// A parent-info flag other than 0 (an id) or 1 (a root's name).
    #[error("the struct at {0} has a parent flag that is neither 0 nor 1")]
    ParentInfo(Id),
    /// Embedded JSON (an embed or a format's value) that `JSON.parse`
    /// would throw on, which breaks every client relayed it.
    #[error("the struct at {0} embeds text that is not JSON")]
    NotJson(Id),
    /// A lib0 `Any` value nested deeper than [`crate::update::MAX_DEPTH`].
    #[error("the struct at {0} nests values too deeply")]
    TooDeep(Id),
    /// A lib0 `Any` tag that lib0 does not define.
    #[error("the struct at {at} holds a value of tag {tag}, which lib0 does not write")]
    UnknownAny {
        /// The struct.
        at: Id,
        /// The value's tag.
        tag: u8,
    },
    /// One client's deletions in two entries of the delete set.
    #[error("client {0} is listed twice in the delete set")]
    RepeatedDeleteClient(u64),
    /// A delete-set entry with no ranges.
    #[error("client {0} is listed in the delete set with no ranges")]
    EmptyDeleteRun(u64),
    /// A delete range of length 0.
    #[error("the delete range at {0} is empty")]
    EmptyDeleteRange(Id),
    /// Delete ranges out of order or overlapping.
    #[error("the delete range at {0} is out of order or overlaps the one before")]
    UnorderedDeletes(Id),
    /// A delete range that passes 2^32.
    #[error("client {0}'s delete ranges pass 2^32")]
    DeleteOverflow(u64),
    /// A client's structs start after what the document holds of it: the
    /// changes in between were never sent.
    #[error("client {client}'s structs start at clock {clock}, but the document holds {known}")]
    StartsPastKnown {
        /// The client.
        client: u64,
        /// Where the update's structs start.
        clock: u32,
        /// The clock the document holds up to.
        known: u32,
    },
    /// A reference to a struct neither the document nor the update holds.
    #[error("the {what} of {of} is {id}, which neither the document nor the update holds")]
    Missing {
        /// The item.
        of: Id,
        /// Which reference.
        what: Reference,
        /// What it names.
        id: Id,
    },
    /// A reference into the item's own run, or after it: the item would
    /// have been written before what it refers to.
    #[error("the {what} of {of} lies inside or after its own run")]
    OwnRun {
        /// The item.
        of: Id,
        /// Which reference.
        what: Reference,
    },
    /// Items that each wait for another, round in a circle.
    #[error("the item at {0} depends on itself through other structs of the update")]
    Cycle(Id),
    /// A parent that is not a type (text, a value, a format mark).
    #[error("the parent of {of} is {parent}, which is not a type")]
    ParentNotType {
        /// The item.
        of: Id,
        /// Its parent.
        parent: Id,
    },
    /// An item whose origin and right origin lie in different parents or
    /// map keys: it was never between them.
    #[error("the origin and right origin of {0} lie in different places")]
    OriginsDisagree(Id),
    /// An item partly held already whose new part would continue an item
    /// in another place than the one it names.
    #[error("the part of {0} the document lacks would continue an item elsewhere")]
    SplitDisagrees(Id),
    /// A delete range past what the document and the update hold.
    #[error("client {client}'s deletions reach clock {end}, but only {known} are known")]
    DeletePastKnown {
        /// The client.
        client: u64,
        /// The end of the range.
        end: u32,
        /// The clock held by the document and the update together.
        known: u32,
    },
    /// An update whose items would land in other places in a replica
    /// that loads the document afterwards than in the live one: applied
    /// now, it would split the editors' view of the text.
    #[error("its items would be placed differently by a client loading the document later")]
    PlacedByArrival,
}
