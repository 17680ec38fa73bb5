// Seeded editing of a plan the way y-prosemirror edits one: blocks as
// XmlElements in the 'prosemirror' fragment (paragraphs, headings, lists of
// items holding paragraphs), text as XmlText with marks as formatting
// attributes, node attributes with setAttribute, a block moved as a delete
// and a re-insert, a paragraph split in two, and undo/redo through
// Y.UndoManager. Used to make real Yjs updates: the corpus the server must
// accept (tests/update-corpus.test.mjs), the history the hostile-update
// test mutates, and the fuzz targets' seeds (tools/fuzz-seeds.mjs).

import * as Y from 'yjs';

/** A seeded generator (mulberry32): the same seed, the same edits. */
export function walk(seed) {
  let state = seed >>> 0;
  const next = () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  return {
    next,
    below: (n) => Math.floor(next() * n),
    chance: (p) => next() < p,
    pick: (list) => list[Math.floor(next() * list.length)],
  };
}

const WORDS = ['plan', 'launch', 'beta', 'é', 'naïve', '日本', '😀', '𝄞', 'TBD?', ' ', 'mix😀ed', 'owner', 'date'];
const MARKS = [{ strong: {} }, { em: {} }, { link: { href: 'https://example.com/ü', title: null } }, { code: {} }];

function words(w, count = 1 + w.below(4)) {
  return Array.from({ length: count }, () => w.pick(WORDS)).join(' ');
}

/** Every XmlText under `node`. */
function texts(node, into = []) {
  for (const child of node.toArray()) {
    if (child instanceof Y.XmlText) into.push(child);
    else if (child instanceof Y.XmlElement) texts(child, into);
  }
  return into;
}

/** Every XmlElement under `node`. */
function elements(node, into = []) {
  for (const child of node.toArray()) {
    if (child instanceof Y.XmlElement) {
      into.push(child);
      elements(child, into);
    }
  }
  return into;
}

/** A random offset in `text` that splits no surrogate pair (as editors never do). */
function boundary(w, text) {
  const value = text.toString().length ? plain(text) : '';
  const offsets = [0];
  let at = 0;
  for (const c of value) {
    at += c.length;
    offsets.push(at);
  }
  return offsets[w.below(offsets.length)];
}

function plain(text) {
  return text
    .toDelta()
    .map((op) => (typeof op.insert === 'string' ? op.insert : ''))
    .join('');
}

function paragraph(content) {
  const p = new Y.XmlElement('paragraph');
  p.insert(0, [new Y.XmlText(content)]);
  return p;
}

function block(w) {
  switch (w.below(4)) {
    case 0: {
      const h = new Y.XmlElement('heading');
      h.setAttribute('level', 1 + w.below(3));
      h.insert(0, [new Y.XmlText(words(w))]);
      return h;
    }
    case 1: {
      const list = new Y.XmlElement('bullet_list');
      const items = Array.from({ length: 1 + w.below(3) }, () => {
        const item = new Y.XmlElement('list_item');
        item.insert(0, [paragraph(words(w))]);
        return item;
      });
      list.insert(0, items);
      return list;
    }
    default:
      return paragraph(words(w));
  }
}

/** A copy of a block, for a move (y-prosemirror re-inserts moved nodes). */
function copy(node) {
  if (node instanceof Y.XmlText) {
    const text = new Y.XmlText();
    text.applyDelta(node.toDelta());
    return text;
  }
  const element = new Y.XmlElement(node.nodeName);
  for (const [k, v] of Object.entries(node.getAttributes())) element.setAttribute(k, v);
  element.insert(0, node.toArray().map(copy));
  return element;
}

/**
 * An editor of `doc`: each step() makes one edit, in one transaction, as a
 * person typing in the editor would.
 */
export class Editor {
  constructor(doc, seed) {
    this.doc = doc;
    this.w = walk(seed);
    this.fragment = doc.getXmlFragment('prosemirror');
    this.undo = new Y.UndoManager(this.fragment, { captureTimeout: 0 });
  }

  step() {
    const { w, doc, fragment } = this;
    const all = texts(fragment);
    const choice = w.below(20);
    if (choice < 3 || fragment.length === 0) {
      doc.transact(() => fragment.insert(w.below(fragment.length + 1), [block(w)]));
    } else if (choice < 9 && all.length) {
      // Typing: a word, or a character at a time as keystrokes go.
      const text = w.pick(all);
      doc.transact(() => text.insert(boundary(w, text), w.chance(0.5) ? w.pick(WORDS) : words(w, 1)));
    } else if (choice < 11 && all.length) {
      const text = w.pick(all);
      const [a, b] = [boundary(w, text), boundary(w, text)].sort((x, y) => x - y);
      if (b > a) doc.transact(() => text.delete(a, b - a));
    } else if (choice < 13 && all.length) {
      const text = w.pick(all);
      const [a, b] = [boundary(w, text), boundary(w, text)].sort((x, y) => x - y);
      if (b > a) {
        const mark = w.pick(MARKS);
        const off = w.chance(0.2) ? Object.fromEntries(Object.keys(mark).map((k) => [k, null])) : mark;
        doc.transact(() => text.format(a, b - a, off));
      }
    } else if (choice < 14) {
      const element = w.pick(elements(fragment));
      if (element) doc.transact(() => element.setAttribute(w.pick(['level', 'id', 'checked']), w.pick([1, 2, 'x', true, null])));
    } else if (choice < 15 && fragment.length) {
      doc.transact(() => fragment.delete(w.below(fragment.length), 1));
    } else if (choice < 16 && fragment.length > 1) {
      // A move: the block deleted and a copy inserted elsewhere.
      const from = w.below(fragment.length);
      doc.transact(() => {
        const moved = copy(fragment.get(from));
        fragment.delete(from, 1);
        fragment.insert(w.below(fragment.length + 1), [moved]);
      });
    } else if (choice < 17 && fragment.length) {
      // Enter in a top-level paragraph: its tail becomes the next paragraph.
      const at = w.below(fragment.length);
      const node = fragment.get(at);
      const text = node instanceof Y.XmlElement && node.nodeName === 'paragraph' ? node.get(0) : null;
      if (text instanceof Y.XmlText) {
        const cut = boundary(w, text);
        const tail = plain(text).slice(cut);
        doc.transact(() => {
          if (tail.length) text.delete(cut, tail.length);
          fragment.insert(at + 1, [paragraph(tail)]);
        });
      }
    } else if (choice < 19) {
      if (w.chance(0.6)) this.undo.undo();
      else this.undo.redo();
    } else {
      doc.transact(() => fragment.insert(w.below(fragment.length + 1), [paragraph(words(w, 2 + w.below(8)))]));
    }
  }
}

/** The plan as text and attributes, to compare two replicas. */
export function shape(doc) {
  return doc.getXmlFragment('prosemirror').toJSON();
}
