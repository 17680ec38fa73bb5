//! An outline's blocks and digest counts, kept in shared pieces so that a
//! copy of an outline costs a reference count per piece, and a change then
//! copies only the piece it lands in.
//!
//! A live outline is copied whenever it changes while a remembered read
//! still holds it (SPEC S5), which is every refresh between two reads of a
//! Planner: whole, that copy grows with the document, not with the change.

use std::ops::Range;
use std::sync::Arc;

use super::Index;
use crate::block::{Block, Digest};

/// Blocks per run: a one-block change copies this many blocks; a copy of the
/// whole outline clones one reference per run.
const RUN: usize = 64;

/// Blocks in document order, in runs of [`RUN`] (the last may be shorter).
/// Runs always split at the same places for the same blocks, so two lists
/// of the same blocks compare equal however they were reached.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct BlockRuns {
    runs: Vec<Arc<Vec<Block>>>,
}

impl BlockRuns {
    /// `blocks` in runs.
    pub(super) fn from_vec(blocks: Vec<Block>) -> Self {
        BlockRuns {
            runs: runs_of(blocks),
        }
    }

    /// Every run but the last is full.
    pub(super) fn len(&self) -> usize {
        self.runs
            .last()
            .map_or(0, |last| (self.runs.len() - 1) * RUN + last.len())
    }

    pub(super) fn get(&self, index: usize) -> Option<&Block> {
        self.runs.get(index / RUN)?.get(index % RUN)
    }

    pub(super) fn iter(&self) -> Blocks<'_> {
        Blocks {
            runs: self.runs.iter(),
            run: [].iter(),
            left: self.len(),
        }
    }

    /// Puts `block` at `index`, copying its run if another outline shares
    /// it. Does nothing past the end.
    pub(super) fn set(&mut self, index: usize, block: Block) {
        if let Some(run) = self.runs.get_mut(index / RUN) {
            if let Some(slot) = Arc::make_mut(run).get_mut(index % RUN) {
                *slot = block;
            }
        }
    }

    /// Replaces the blocks in `range` by `middle` and numbers every block
    /// from `range.start` on by its new place. Runs wholly before the range
    /// are kept; so are runs wholly after it when the count of blocks does
    /// not change (their blocks keep their places).
    pub(super) fn splice(&mut self, range: Range<usize>, middle: Vec<Block>) {
        let len = self.len();
        let range = range.start.min(len)..range.end.clamp(range.start, len);
        let first_run = range.start / RUN;
        let from = first_run * RUN;
        let kept_runs = if middle.len() == range.len() {
            range.end.div_ceil(RUN).min(self.runs.len())
        } else {
            self.runs.len()
        };
        let tail = self.runs.split_off(kept_runs);
        let mut rebuilt = RunBuilder::starting_at(from);
        let mut middle = Some(middle);
        let mut at = from;
        for run in self.runs.drain(first_run..) {
            // Blocks of runs no other outline shares are moved, not cloned.
            for block in Arc::try_unwrap(run).unwrap_or_else(|shared| (*shared).clone()) {
                if at == range.start {
                    rebuilt.extend(middle.take().into_iter().flatten());
                }
                if !range.contains(&at) {
                    rebuilt.push(block);
                }
                at += 1;
            }
        }
        // An empty range at the end (an append) has not met its place yet.
        rebuilt.extend(middle.into_iter().flatten());
        self.runs.extend(rebuilt.finish());
        self.runs.extend(tail);
    }
}

fn runs_of(blocks: Vec<Block>) -> Vec<Arc<Vec<Block>>> {
    let mut runs = RunBuilder::starting_at(0);
    runs.extend(blocks);
    runs.finish()
}

/// Runs filled block by block, each block numbered by its place.
struct RunBuilder {
    runs: Vec<Arc<Vec<Block>>>,
    run: Vec<Block>,
    next: usize,
}

impl RunBuilder {
    fn starting_at(index: usize) -> Self {
        RunBuilder {
            runs: Vec::new(),
            run: Vec::with_capacity(RUN),
            next: index,
        }
    }

    fn push(&mut self, mut block: Block) {
        if self.run.len() == RUN {
            let full = std::mem::replace(&mut self.run, Vec::with_capacity(RUN));
            self.runs.push(Arc::new(full));
        }
        block.index = self.next;
        self.next += 1;
        self.run.push(block);
    }

    fn extend(&mut self, blocks: impl IntoIterator<Item = Block>) {
        for block in blocks {
            self.push(block);
        }
    }

    fn finish(mut self) -> Vec<Arc<Vec<Block>>> {
        if !self.run.is_empty() {
            self.runs.push(Arc::new(self.run));
        }
        self.runs
    }
}

/// The blocks of an outline in document order.
#[derive(Clone, Debug)]
pub struct Blocks<'a> {
    runs: std::slice::Iter<'a, Arc<Vec<Block>>>,
    run: std::slice::Iter<'a, Block>,
    left: usize,
}

impl<'a> Iterator for Blocks<'a> {
    type Item = &'a Block;

    fn next(&mut self) -> Option<&'a Block> {
        loop {
            if let Some(block) = self.run.next() {
                self.left -= 1;
                return Some(block);
            }
            self.run = self.runs.next()?.iter();
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl ExactSizeIterator for Blocks<'_> {}

impl std::iter::FusedIterator for Blocks<'_> {}

/// How many blocks carry each digest, in shards chosen by the digest's
/// first byte (a `blake3` output, so spread evenly): a block's new words
/// copy two shards, not every digest in the document.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct DigestCounts {
    shards: Vec<Arc<Index<Digest, usize>>>,
}

/// Shards of [`DigestCounts`].
const SHARDS: usize = 64;

impl Default for DigestCounts {
    fn default() -> Self {
        DigestCounts {
            shards: (0..SHARDS).map(|_| Arc::default()).collect(),
        }
    }
}

impl DigestCounts {
    /// The counts of `digests`, built one shard at a time: counting into
    /// all shards at once misses the cache on nearly every digest.
    pub(super) fn of<'a>(digests: impl ExactSizeIterator<Item = &'a Digest>) -> Self {
        let mut sorted: Vec<Vec<Digest>> = (0..SHARDS)
            .map(|_| Vec::with_capacity(digests.len().div_ceil(SHARDS) * 5 / 4))
            .collect();
        for digest in digests {
            if let Some(shard) = sorted.get_mut(Self::shard(digest)) {
                shard.push(*digest);
            }
        }
        let shards = sorted
            .into_iter()
            .map(|digests| {
                let mut shard = Index::with_capacity_and_hasher(digests.len(), Default::default());
                for digest in digests {
                    *shard.entry(digest).or_default() += 1;
                }
                Arc::new(shard)
            })
            .collect();
        DigestCounts { shards }
    }

    fn shard(digest: &Digest) -> usize {
        usize::from(digest.as_bytes()[0]) % SHARDS
    }

    pub(super) fn count(&self, digest: &Digest) -> usize {
        self.shards
            .get(Self::shard(digest))
            .and_then(|shard| shard.get(digest))
            .copied()
            .unwrap_or(0)
    }

    /// One more block carries `digest`.
    pub(super) fn add(&mut self, digest: Digest) {
        if let Some(shard) = self.shards.get_mut(Self::shard(&digest)) {
            *Arc::make_mut(shard).entry(digest).or_default() += 1;
        }
    }

    /// One block fewer carries `digest`; a digest nobody carries is dropped,
    /// so counts of the same blocks compare equal however they were reached.
    pub(super) fn forget(&mut self, digest: &Digest) {
        if let Some(shard) = self.shards.get_mut(Self::shard(digest)) {
            let shard = Arc::make_mut(shard);
            if let Some(count) = shard.get_mut(digest) {
                *count -= 1;
                if *count == 0 {
                    shard.remove(digest);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block::BlockIdentity;

    fn block(n: usize) -> Block {
        let text = format!("block {n}");
        Block {
            index: n,
            digest: Digest::of("paragraph", &text),
            kind: Arc::from("paragraph"),
            text: Arc::from(text),
            identity: BlockIdentity {
                client: 1,
                clock: n as u32,
            },
        }
    }

    fn numbered(texts: impl IntoIterator<Item = usize>) -> Vec<Block> {
        texts
            .into_iter()
            .enumerate()
            .map(|(index, n)| Block { index, ..block(n) })
            .collect()
    }

    /// Every splice of a list a few runs long gives the list a `Vec` splice
    /// gives, numbered, in the runs a fresh list of those blocks has.
    #[test]
    fn a_splice_anywhere_gives_what_a_fresh_list_of_the_same_blocks_is() {
        let len = 3 * RUN + 5;
        let starts = [0, 1, RUN - 1, RUN, RUN + 1, 2 * RUN, len - 1, len];
        for &start in &starts {
            for removed in [0, 1, 2, RUN, RUN + 3] {
                for inserted in [0, 1, 2, RUN + 1] {
                    let end = (start + removed).min(len);
                    let mut runs = BlockRuns::from_vec(numbered(0..len));
                    let before = runs.clone();
                    let middle: Vec<Block> = (0..inserted).map(|n| block(1000 + n)).collect();
                    runs.splice(start..end, middle);
                    let mut expected: Vec<usize> = (0..len).collect();
                    expected.splice(start..end, (0..inserted).map(|n| 1000 + n));
                    let fresh = BlockRuns::from_vec(numbered(expected));
                    assert!(runs == fresh, "{start}..{end} replaced by {inserted}");
                    assert_eq!(runs.iter().len(), runs.len());
                    assert!(before == BlockRuns::from_vec(numbered(0..len)));
                }
            }
        }
    }

    #[test]
    fn a_changed_block_copies_only_its_run() {
        let mut runs = BlockRuns::from_vec(numbered(0..3 * RUN));
        let held = runs.clone();
        runs.set(
            RUN + 2,
            Block {
                index: RUN + 2,
                ..block(7)
            },
        );
        let shared = runs
            .runs
            .iter()
            .zip(&held.runs)
            .filter(|(a, b)| Arc::ptr_eq(a, b))
            .count();
        assert_eq!(shared, 2);
        assert_eq!(held.get(RUN + 2), Some(&block(RUN + 2)));
    }

    #[test]
    fn counts_of_the_same_digests_compare_equal_however_reached() {
        let (a, b) = (block(1).digest, block(2).digest);
        let mut counts = DigestCounts::default();
        counts.add(a);
        counts.add(b);
        counts.add(a);
        counts.forget(&b);
        counts.forget(&a);
        let mut fresh = DigestCounts::default();
        fresh.add(a);
        assert_eq!(counts, fresh);
        assert_eq!((counts.count(&a), counts.count(&b)), (1, 0));
    }
}
