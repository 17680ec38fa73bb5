//! A deterministic harness for the decision engine: a real `yrs` document
//! whose revision advances with every edit, the reads the Planner made, and
//! an in-memory card store standing in for the server's.

use std::collections::BTreeMap;
use std::sync::Arc;

use margin_decisions::DocumentState;
use margin_decisions::{
    open_decisions, Access, BatchError, Capture, CardSpec, DecisionCard, Digest, Key, Outcome,
    Outline, Passage, ReadCache, ResponseKind, Strictness, FRAGMENT_NAME,
};
use yrs::types::xml::{XmlElementPrelim, XmlTextPrelim};
use yrs::{Doc, Text, Transact, XmlFragment, XmlOut};

pub struct Fixture {
    pub doc: Doc,
    pub revision: i64,
    pub reads: ReadCache,
    pub cards: BTreeMap<Key, DecisionCard>,
    next_id: usize,
}

impl Fixture {
    /// A document with one paragraph per text.
    pub fn with(texts: &[&str]) -> Self {
        let mut fixture = Fixture {
            doc: Doc::new(),
            revision: 0,
            reads: ReadCache::default(),
            cards: BTreeMap::new(),
            next_id: 1,
        };
        for (i, text) in texts.iter().enumerate() {
            fixture.insert(i, text);
        }
        fixture
    }

    pub fn outline(&self) -> Outline {
        Outline::of_doc(&self.doc)
    }

    /// `read_document`: remembers and returns the revision read.
    pub fn read(&mut self) -> i64 {
        self.reads.remember(self.revision, Arc::new(self.outline()));
        self.revision
    }

    /// A server restart: every remembered read is gone; cards stay.
    pub fn restart(&mut self) {
        self.reads.clear();
    }

    pub fn insert(&mut self, index: usize, text: &str) {
        let fragment = self.doc.get_or_insert_xml_fragment(FRAGMENT_NAME);
        {
            let mut txn = self.doc.transact_mut();
            let p = fragment.insert(&mut txn, index as u32, XmlElementPrelim::empty("paragraph"));
            p.insert(&mut txn, 0, XmlTextPrelim::new(text));
        }
        self.revision += 1;
    }

    /// Replaces the text of the block at `index`, keeping the block.
    pub fn rewrite(&mut self, index: usize, text: &str) {
        let fragment = self.doc.get_or_insert_xml_fragment(FRAGMENT_NAME);
        {
            let mut txn = self.doc.transact_mut();
            let Some(XmlOut::Element(block)) = fragment.get(&txn, index as u32) else {
                panic!("no block at {index}");
            };
            let Some(XmlOut::Text(body)) = block.get(&txn, 0) else {
                panic!("block {index} has no text");
            };
            let len = body.len(&txn);
            body.remove_range(&mut txn, 0, len);
            body.insert(&mut txn, 0, text);
        }
        self.revision += 1;
    }

    pub fn delete(&mut self, index: usize) {
        let fragment = self.doc.get_or_insert_xml_fragment(FRAGMENT_NAME);
        fragment.remove_range(&mut self.doc.transact_mut(), index as u32, 1);
        self.revision += 1;
    }

    /// Deletes the block at `from` and inserts the same text at `to`.
    pub fn move_block(&mut self, from: usize, to: usize) {
        let text = self.outline().get(from).unwrap().text.clone();
        self.delete(from);
        self.insert(to, &text);
    }

    /// The address of the block at `index` as it stands now.
    pub fn passage(&self, index: usize) -> Passage {
        Passage {
            index,
            digest: self.outline().get(index).unwrap().digest,
        }
    }

    /// Runs `open_decisions` and, like the server, stores what it created.
    pub fn open(&mut self, revision: i64, cards: &[CardSpec]) -> Result<Vec<Capture>, BatchError> {
        self.run(revision, cards, Strictness::StaleAllowed)
    }

    /// [`Fixture::open`] for a batch that must be refused: the refusal
    /// code, once it is checked that no card was created or changed.
    pub fn refused(&mut self, revision: i64, cards: &[CardSpec]) -> &'static str {
        let before = self.cards.clone();
        let result = self.open(revision, cards);
        assert!(result.is_err(), "accepted: {result:?}");
        assert_eq!(self.cards, before, "a refused batch changed the cards");
        code(&result)
    }

    /// `open_decision` / `ask`: strict revision.
    pub fn open_strict(
        &mut self,
        revision: i64,
        card: CardSpec,
    ) -> Result<Vec<Capture>, BatchError> {
        self.run(revision, &[card], Strictness::CurrentOnly)
    }

    fn run(
        &mut self,
        revision: i64,
        cards: &[CardSpec],
        strictness: Strictness,
    ) -> Result<Vec<Capture>, BatchError> {
        let outline = self.outline();
        let document = DocumentState {
            revision: self.revision,
            outline: &outline,
            reads: &self.reads,
        };
        let stored = &self.cards;
        let captures = open_decisions(
            document,
            Access::Granted,
            |key| stored.get(key),
            revision,
            cards,
            strictness,
        )?;
        for capture in &captures {
            if let Outcome::Created(new) = &capture.outcome {
                let id = format!("card-{}", self.next_id);
                self.next_id += 1;
                self.cards
                    .insert(new.spec.key.clone(), new.clone().into_card(id));
            }
        }
        Ok(captures)
    }

    pub fn card(&self, key: &str) -> &DecisionCard {
        &self.cards[&Key::parse(key).unwrap()]
    }

    pub fn card_mut(&mut self, key: &str) -> &mut DecisionCard {
        self.cards.get_mut(&Key::parse(key).unwrap()).unwrap()
    }

    /// The index where card `key`'s first anchor now stands.
    pub fn anchored_at(&self, key: &str) -> Option<usize> {
        let identity = self.card(key).anchors[0].identity;
        self.outline().by_identity(identity).map(|b| b.index)
    }
}

/// A single-choice card on `passages`.
pub fn card(key: &str, question: &str, passages: Vec<Passage>) -> CardSpec {
    CardSpec {
        key: Key::parse(key).unwrap(),
        question: question.to_owned(),
        description: None,
        response: ResponseKind::SingleChoice,
        choices: vec!["Yes".into(), "No".into()],
        passages,
    }
}

/// The refusal code of a failed batch, or "ok".
pub fn code(result: &Result<Vec<Capture>, BatchError>) -> &'static str {
    match result {
        Ok(_) => "ok",
        Err(e) => e.code().as_str(),
    }
}

pub fn digest_of(text: &str) -> Digest {
    Digest::of("paragraph", text)
}

/// A fixed pseudo-random sequence (xorshift), so a random test fails the
/// same way every run.
pub struct Walk(u64);

impl Walk {
    pub fn new(seed: u64) -> Walk {
        Walk(seed)
    }

    /// The next number in `0..n`.
    pub fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

impl Fixture {
    /// One to four edits picked by `walk`: inserts, deletes, rewrites and
    /// moves of paragraphs with text from `words`, and twins of a block.
    pub fn random_edits(&mut self, walk: &mut Walk, words: &[&str]) {
        for _ in 0..1 + walk.below(4) {
            let len = self.outline().len();
            let word = words[walk.below(words.len())];
            match (walk.below(5), len) {
                (0, _) | (_, 0) => self.insert(walk.below(len + 1), word),
                (1, _) => self.delete(walk.below(len)),
                (2, _) => self.rewrite(walk.below(len), word),
                (3, _) => self.move_block(walk.below(len), walk.below(len)),
                _ => {
                    let twin = self.outline().get(walk.below(len)).unwrap().text.clone();
                    self.insert(walk.below(len + 1), &twin);
                }
            }
        }
    }
}
