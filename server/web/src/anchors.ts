// Marks in the text for decisions (SPEC B1a): every top-level block a
// decision stands beside carries `has-decision`, and the block of the card
// that is active (hovered, focused, or where the caret is) also carries
// `decision-active`, so a reader sees which paragraph a card is about. On
// a phone a block also keeps room under it for its cards, which sit there.
//
// Node decorations, not classes set on the DOM: ProseMirror owns the
// editor's DOM and redraws it as people type, while decorations are part of
// the view it draws. Setting them is a transaction with only a meta: the
// document does not change, so nothing is written to the shared Y.Doc.

import { Extension } from '@tiptap/core';
import type { Editor } from '@tiptap/core';
import { Plugin, PluginKey } from '@tiptap/pm/state';
import { Decoration, DecorationSet } from '@tiptap/pm/view';

/** Which blocks (by top-level index) to mark, and which one is active. */
export interface AnchorMarks {
  /** Block index → the states of the decisions beside it. */
  blocks: Map<number, string[]>;
  /** The active card's block, if any. */
  active: number | null;
  /** Block index → room in px to keep under it for its cards (a phone). */
  room: Map<number, number>;
}

const key = new PluginKey<Drawn>('marginDecisionAnchors');
const none: AnchorMarks = { blocks: new Map(), active: null, room: new Map() };

function decorate(doc: Parameters<typeof DecorationSet.create>[0], marks: AnchorMarks): DecorationSet {
  const found: Decoration[] = [];
  let pos = 0;
  doc.forEach((node, _offset, index) => {
    const states = marks.blocks.get(index);
    if (states) {
      const open = states.some((s) => s === 'open' || s === 'reopened');
      const classes = ['has-decision', index === marks.active ? 'decision-active' : ''].filter(Boolean);
      const room = marks.room.get(index);
      found.push(
        Decoration.node(pos, pos + node.nodeSize, {
          class: classes.join(' '),
          'data-decision': open ? 'open' : 'settled',
          ...(room ? { style: `margin-bottom: calc(0.8em + ${room}px)` } : {}),
        }),
      );
    }
    pos += node.nodeSize;
  });
  return DecorationSet.create(doc, found);
}

/** The plugin's state: the marks, and the decorations drawn for them. */
interface Drawn {
  marks: AnchorMarks;
  set: DecorationSet;
}

/** The extension the editor is built with. */
export const DecisionAnchors = Extension.create({
  name: 'decisionAnchors',
  addProseMirrorPlugins() {
    return [
      new Plugin<Drawn>({
        key,
        state: {
          init: () => ({ marks: none, set: DecorationSet.empty }),
          // Drawn again only when the marks change; a keystroke maps the
          // decorations it has, so typing costs nothing per block of the
          // document (the marks follow within a frame, from decisions.ts).
          apply: (tr, drawn) => {
            const marks = tr.getMeta(key) as AnchorMarks | undefined;
            if (marks) return { marks, set: decorate(tr.doc, marks) };
            return tr.docChanged ? { marks: drawn.marks, set: drawn.set.map(tr.mapping, tr.doc) } : drawn;
          },
        },
        props: {
          decorations: (state) => key.getState(state)?.set ?? DecorationSet.empty,
        },
      }),
    ];
  },
});

/** Sets the marks, if they differ from those shown. */
export function setAnchorMarks(editor: Editor, marks: AnchorMarks): void {
  if (editor.isDestroyed) return;
  const shown = key.getState(editor.state)?.marks ?? none;
  if (same(shown, marks)) return;
  editor.view.dispatch(editor.state.tr.setMeta(key, marks).setMeta('addToHistory', false));
}

function same(a: AnchorMarks, b: AnchorMarks): boolean {
  if (a.active !== b.active || a.blocks.size !== b.blocks.size || a.room.size !== b.room.size) return false;
  for (const [index, px] of a.room) if (b.room.get(index) !== px) return false;
  for (const [index, states] of a.blocks) {
    const other = b.blocks.get(index);
    if (!other || other.join() !== states.join()) return false;
  }
  return true;
}
