// The document list (GET /documents): each document's title, when it was
// last edited and by whom, the caller's role and whether it is archived.
// Titles and names are people's words: textContent only.

import { el } from './dom';
import { ago } from './time';
import type { DocumentInfo } from './wire';

/** "Edited 5 min ago by bo", "Edited just now by the Planner", "Created yesterday". */
export function editedLine(d: DocumentInfo, now = Date.now()): string {
  if (typeof d.edited_at === 'number') {
    const who = d.edited_by === 'planner' ? 'the Planner' : d.edited_by;
    return `Edited ${ago(d.edited_at, now)}${who ? ` by ${who}` : ''}`;
  }
  return typeof d.created_at === 'number' ? `Created ${ago(d.created_at, now)}, not edited yet` : '';
}

const ROLES: Record<string, string> = { owner: 'Owner', editor: 'Editor', viewer: 'Viewer' };

/** The list's rows. */
export function documentRows(documents: DocumentInfo[]): HTMLLIElement[] {
  return documents.map((d) => {
    const li = el('li');
    li.dataset.id = d.id;
    const a = el('a');
    a.href = `#/d/${encodeURIComponent(d.id)}`;
    const tags = el('span', 'tags');
    if (d.archived) tags.append(el('span', 'tag archived', 'Archived'));
    tags.append(el('span', 'tag role', ROLES[d.role] ?? d.role));
    a.append(el('span', 'title', d.title || 'Untitled'), tags, el('span', 'edited', editedLine(d)));
    li.append(a);
    return li;
  });
}
