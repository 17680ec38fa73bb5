// The empty document's invitation (SPEC B1): a placeholder on its only,
// empty paragraph. Looked for in constant time — only the document's first
// block is read — where a general placeholder walks every block on every
// keystroke, which a long plan feels as it is typed in.

import { Extension } from '@tiptap/core';
import { Plugin, PluginKey } from '@tiptap/pm/state';
import { Decoration, DecorationSet } from '@tiptap/pm/view';

export const EmptyPlaceholder = Extension.create<{ text: string }>({
  name: 'emptyPlaceholder',
  addOptions() {
    return { text: '' };
  },
  addProseMirrorPlugins() {
    const text = this.options.text;
    return [
      new Plugin({
        key: new PluginKey('marginEmptyPlaceholder'),
        props: {
          decorations: ({ doc }) => {
            const first = doc.firstChild;
            if (doc.childCount !== 1 || !first?.isTextblock || first.content.size > 0) return null;
            return DecorationSet.create(doc, [
              Decoration.node(0, first.nodeSize, { class: 'is-editor-empty', 'data-placeholder': text }),
            ]);
          },
        },
      }),
    ];
  },
});
