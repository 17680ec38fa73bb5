// Decision cards beside their paragraphs (SPEC B1, B1a, D).
//
// The server mirrors every card into the shared Y.Doc: `getMap('decisions')`
// maps a card id to a JSON string (DecisionCardView, docs/protocol.md). A
// card's `anchors` are block identities — the Yjs item id `client:clock` of a
// top-level element of the `prosemirror` XmlFragment — whose index in the
// fragment is the ProseMirror top-level node index.
//
// Layout: each card's top is its paragraph's top. Cards that would overlap
// are stacked, and the card that is pinned — focused, or beside the caret —
// keeps its paragraph's line exactly while the cards above it move up and
// those below move down (as comments do in a word processor); a card above
// it with no room left under the column's top steps aside (tucked) until
// the pinned card changes, and its marker still brings it. The active
// card — focused, else by the caret, else under the pointer — is the one
// highlighted with its paragraph. Positions are
// measured again on every document change, resize and card change, so cards
// follow the text as it reflows or others type. A marker beside each
// paragraph that has a decision focuses its card; the active card's
// paragraph is highlighted (anchors.ts). Cards whose blocks are all gone are
// listed apart, saying so.
//
// People act through HTTP (answer, discard, reopen, add an option or a
// criterion); the map is the source of truth, so every editor updates live.

import type { Editor } from '@tiptap/core';
import * as Y from 'yjs';
import { ApiError, api, describe } from './api';
import { setAnchorMarks } from './anchors';
import { CardAction, CardHost, CardSlot, collapses, renderCard } from './card';
import { el } from './dom';
import type { AnswerBody, ChoiceView, DecisionCardView } from './wire';

export interface DecisionCardsOptions {
  editor: Editor;
  ydoc: Y.Doc;
  docId: string;
  token: string;
  readOnly: boolean;
  /** The column of cards beside the editor. */
  margin: HTMLElement;
  /** The narrow column of markers between the text and the cards. */
  markers: HTMLElement;
  /** The section for cards whose paragraph is gone, and its list. */
  unanchoredSection: HTMLElement;
  unanchoredList: HTMLElement;
  /** A line counting the cards by state. */
  summary: HTMLElement;
  /** Called with an action's failure; returns true if it was handled (401). */
  onAuthFailure: (e: unknown) => boolean;
}

/** Space between stacked cards. */
const GAP = 8;
/** A screen too narrow for cards beside the text (as in app.css). */
const NARROW = '(max-width: 760px)';

const isString = (v: unknown): v is string => typeof v === 'string';

/** Parses one map value; anything malformed is dropped (returns null). */
export function parseCard(id: string, raw: unknown): DecisionCardView | null {
  let v: unknown = raw;
  if (isString(raw)) {
    try {
      v = JSON.parse(raw);
    } catch {
      return null;
    }
  }
  if (!v || typeof v !== 'object') return null;
  const o = v as Record<string, unknown>;
  if (!isString(o.question) || !isString(o.response) || !isString(o.state)) return null;
  const choices: ChoiceView[] = Array.isArray(o.choices)
    ? o.choices.flatMap((c): ChoiceView[] => {
        const cc = c as Record<string, unknown> | null;
        if (!cc || !isString(cc.id) || !isString(cc.label)) return [];
        return [{ id: cc.id, label: cc.label, added_by: isString(cc.added_by) ? cc.added_by : undefined }];
      })
    : [];
  let answer: AnswerBody | undefined;
  const a = o.answer as Record<string, unknown> | null | undefined;
  if (a && typeof a === 'object') {
    if (Array.isArray(a.choices)) answer = { choices: a.choices.filter(isString) };
    else if (isString(a.text)) answer = { text: a.text };
    else if (typeof a.yes === 'boolean') answer = { yes: a.yes };
  }
  return {
    id: isString(o.id) ? o.id : id,
    key: isString(o.key) ? o.key : '',
    question: o.question,
    description: isString(o.description) ? o.description : undefined,
    response: o.response,
    choices,
    criteria: Array.isArray(o.criteria) ? o.criteria.filter(isString) : [],
    anchors: Array.isArray(o.anchors) ? o.anchors.filter(isString) : [],
    state: o.state,
    answer,
    answered_by: isString(o.answered_by) ? o.answered_by : undefined,
    excerpt: isString(o.excerpt) ? o.excerpt : undefined,
  };
}

interface Placed {
  slot: CardSlot;
  index: number;
  order: number;
}

export class DecisionCards implements CardHost {
  readOnly: boolean;
  private readonly map: Y.Map<unknown>;
  private readonly fragment: Y.XmlFragment;
  private readonly slots = new Map<string, CardSlot>();
  /** The marker beside each paragraph that has decisions, by its first card. */
  private readonly markerButtons = new Map<string, HTMLButtonElement>();
  private frame = 0;
  private destroyed = false;
  /** The card under the pointer, the one holding focus, the one by the caret. */
  private hovered: string | null = null;
  private focused: string | null = null;
  private selected: string | null = null;
  private readonly resizeObserver: ResizeObserver;
  /** Each top-level block's index by identity, until blocks come or go. */
  private indexes: Map<string, number> | null = null;
  /** Blocks came or went (typing inside a block changes no index). */
  private readonly onBlocks = () => {
    this.indexes = null;
  };
  private readonly onMapChange = (event: Y.YMapEvent<unknown>) => {
    for (const id of event.keysChanged) this.sync(id);
    this.schedule();
  };
  private readonly onTransaction = ({ transaction }: { transaction: { docChanged: boolean } }) => {
    if (transaction.docChanged) this.schedule();
  };
  private readonly onSelection = () => {
    const { selection, doc } = this.o.editor.state;
    const index = doc.childCount ? selection.$head.index(0) : -1;
    const beside = [...this.slots.values()].find((s) => s.blockIndex === index);
    const id = this.o.editor.isFocused && beside ? beside.card.id : null;
    if (id !== this.selected) {
      this.selected = id;
      this.schedule();
    }
  };
  private readonly onResize = () => this.schedule();

  constructor(private readonly o: DecisionCardsOptions) {
    this.readOnly = o.readOnly;
    this.map = o.ydoc.getMap('decisions');
    this.fragment = o.ydoc.getXmlFragment('prosemirror');
    o.margin.replaceChildren();
    o.markers.replaceChildren();
    o.unanchoredList.replaceChildren();
    o.unanchoredSection.hidden = true;
    o.summary.hidden = true;
    this.map.observe(this.onMapChange);
    this.fragment.observe(this.onBlocks);
    o.editor.on('transaction', this.onTransaction);
    o.editor.on('selectionUpdate', this.onSelection);
    o.editor.on('focus', this.onSelection);
    o.editor.on('blur', this.onSelection);
    window.addEventListener('resize', this.onResize);
    this.resizeObserver = new ResizeObserver(this.onResize);
    this.resizeObserver.observe(o.editor.view.dom);
    for (const id of this.map.keys()) this.sync(id);
    this.schedule();
  }

  destroy(): void {
    this.destroyed = true;
    this.map.unobserve(this.onMapChange);
    this.fragment.unobserve(this.onBlocks);
    this.o.editor.off('transaction', this.onTransaction);
    this.o.editor.off('selectionUpdate', this.onSelection);
    this.o.editor.off('focus', this.onSelection);
    this.o.editor.off('blur', this.onSelection);
    window.removeEventListener('resize', this.onResize);
    this.resizeObserver.disconnect();
    if (this.frame) cancelAnimationFrame(this.frame);
    this.o.margin.replaceChildren();
    this.o.margin.style.minHeight = '';
    this.o.markers.replaceChildren();
    this.markerButtons.clear();
    this.o.unanchoredList.replaceChildren();
    this.o.unanchoredSection.hidden = true;
    this.o.summary.hidden = true;
    this.slots.clear();
  }

  /** Viewers and archived documents see cards without controls. */
  setReadOnly(readOnly: boolean): void {
    if (readOnly === this.readOnly) return;
    this.readOnly = readOnly;
    for (const slot of this.slots.values()) this.render(slot);
  }

  render(slot: CardSlot): void {
    renderCard(slot, this);
    this.schedule();
  }

  /** Brings one card's slot in line with the map (added, changed or removed). */
  private sync(id: string): void {
    const card = this.map.has(id) ? parseCard(id, this.map.get(id)) : null;
    const slot = this.slots.get(id);
    if (!card) {
      if (slot) {
        this.resizeObserver.unobserve(slot.root);
        slot.root.remove();
        this.slots.delete(id);
      }
      return;
    }
    const json = JSON.stringify(card);
    if (slot) {
      if (slot.json === json) return;
      const wasState = slot.card.state;
      slot.card = card;
      slot.json = json;
      // Someone else settled it: it folds like one this page answered.
      if (wasState !== card.state && collapses(slot) && slot.root !== document.activeElement?.closest('.decision-card')) {
        slot.expanded = false;
      }
      this.render(slot);
      return;
    }
    const root = el('article', 'decision-card');
    const fresh: CardSlot = {
      card,
      json,
      root,
      draft: { selected: new Set(), text: '', option: '', criterion: '' },
      busy: false,
      error: null,
      moreOpen: false,
      editing: false,
      expanded: false,
      blockIndex: null,
      lastSeen: null,
    };
    this.watchActivity(fresh);
    this.slots.set(id, fresh);
    this.render(fresh);
    // A card that grows or shrinks (folded, answered) moves the cards below it.
    this.resizeObserver.observe(root);
  }

  /** Hover and focus make a card active. */
  private watchActivity(slot: CardSlot): void {
    const id = slot.card.id;
    slot.root.addEventListener('mouseenter', () => this.setHovered(id));
    slot.root.addEventListener('mouseleave', () => this.hovered === id && this.setHovered(null));
    slot.root.addEventListener('focusin', () => {
      if (this.focused !== id) {
        this.focused = id;
        this.schedule();
      }
    });
    slot.root.addEventListener('focusout', (ev) => {
      const next = ev.relatedTarget;
      if (next instanceof Node && slot.root.contains(next)) return;
      if (this.focused === id) {
        this.focused = null;
        this.schedule();
      }
    });
  }

  private setHovered(id: string | null): void {
    if (this.hovered === id) return;
    this.hovered = id;
    this.schedule();
  }

  /**
   * The active card, which both the highlight and the layout follow: the
   * one holding focus, else the one beside the caret, else the one under
   * the pointer. Focus first, so a card sliding under a still pointer as
   * the focused one moves never takes its place.
   */
  private active(): string | null {
    return this.focused ?? this.selected ?? this.hovered;
  }

  private schedule(): void {
    if (this.frame || this.destroyed) return;
    this.frame = requestAnimationFrame(() => {
      this.frame = 0;
      this.layout();
    });
  }

  /** Index of each live top-level block by identity, or null while the editor lags the Y.Doc. */
  private blockIndexes(): Map<string, number> | null {
    if (this.fragment.length !== this.o.editor.state.doc.childCount) return null;
    if (this.indexes) return this.indexes;
    const byIdentity = new Map<string, number>();
    this.fragment.toArray().forEach((child, i) => {
      const item = (child as Y.XmlElement)._item;
      if (item) byIdentity.set(`${item.id.client}:${item.id.clock}`, i);
    });
    this.indexes = byIdentity;
    return byIdentity;
  }

  /** Places every card beside its block, its marker beside the text, and marks the text. */
  private layout(): void {
    if (this.destroyed) return;
    if (this.slots.size === 0) {
      // Nothing to place: typing in a plan without decisions costs nothing here.
      this.clear();
      return;
    }
    const indexes = this.blockIndexes();
    if (!indexes) {
      // y-prosemirror has not applied the latest change yet; try next frame.
      this.schedule();
      return;
    }
    const { margin, unanchoredList, unanchoredSection, editor } = this.o;
    const doc = editor.state.doc;
    const starts: number[] = [];
    let pos = 0;
    for (let i = 0; i < doc.childCount; i++) {
      starts.push(pos);
      pos += doc.child(i).nodeSize;
    }

    const anchored: Placed[] = [];
    const unanchored: CardSlot[] = [];
    let order = 0;
    for (const slot of this.slots.values()) {
      let index: number | null = null;
      for (const anchor of slot.card.anchors) {
        const i = indexes.get(anchor);
        if (i !== undefined) {
          index = i;
          break;
        }
      }
      const moved = (slot.blockIndex === null) !== (index === null);
      slot.blockIndex = index;
      if (index === null) {
        unanchored.push(slot);
      } else {
        slot.lastSeen = { index, text: doc.child(index).textContent.slice(0, 160) };
        anchored.push({ slot, index, order: order++ });
      }
      // Anchored now, or gone now: the card says where it stands.
      if (moved) renderCard(slot, this);
    }
    anchored.sort((a, b) => a.index - b.index || a.order - b.order);

    // DOM order = document order (the reading and tabbing order). Moving
    // an element blurs whatever it holds, so only a list out of order is
    // rebuilt.
    for (const { slot, index } of anchored) {
      slot.root.dataset.blockIndex = String(index);
      slot.root.classList.remove('unanchored');
    }
    for (const slot of unanchored) {
      delete slot.root.dataset.blockIndex;
      slot.root.classList.add('unanchored');
      slot.root.style.top = '';
    }
    inOrder(margin, anchored.map(({ slot }) => slot.root));
    inOrder(unanchoredList, unanchored.map((slot) => slot.root));
    unanchoredSection.hidden = unanchored.length === 0;

    const highlighted = this.active();
    // Only focus and the caret move cards: a card moving under the pointer
    // would be hard to reach.
    const pinned = this.focused ?? this.selected;
    const marginTop = margin.getBoundingClientRect().top;
    // A phone has no margin beside the text: each card goes under its own
    // paragraph, which keeps room for its cards, so no card covers text
    // and none is more than a paragraph from what it asks about. Beside
    // the text, a card's place is its paragraph's first line.
    const narrow = window.matchMedia(NARROW).matches;
    const targets = anchored.map(({ index }) => {
      const dom = editor.view.nodeDOM(starts[index]);
      if (!(dom instanceof HTMLElement)) return 0;
      const box = dom.getBoundingClientRect();
      return narrow ? Math.round(box.bottom - marginTop) + GAP : Math.round(box.top - marginTop);
    });
    const heights = anchored.map(({ slot }) => slot.root.offsetHeight);
    const room = new Map<number, number>();
    if (narrow) {
      anchored.forEach(({ index }, i) => room.set(index, (room.get(index) ?? GAP) + heights[i] + GAP));
    }
    const { tops, tucked } = stack(
      targets,
      heights,
      narrow ? -1 : anchored.findIndex(({ slot }) => slot.card.id === pinned),
    );
    anchored.forEach(({ slot }, i) => {
      slot.root.style.top = `${tops[i]}px`;
      slot.root.classList.toggle('active', slot.card.id === highlighted);
      // A card with no room above the active one steps aside; its marker
      // beside the text still brings it.
      slot.root.classList.toggle('tucked', tucked[i]);
    });
    const last = anchored.length - 1;
    margin.style.minHeight = last >= 0 ? `${Math.max(0, tops[last] + heights[last] + GAP)}px` : '';

    this.placeMarkers(anchored, targets, highlighted);
    const blocks = new Map<number, string[]>();
    for (const { slot, index } of anchored) blocks.set(index, [...(blocks.get(index) ?? []), slot.card.state]);
    const activeSlot = highlighted ? this.slots.get(highlighted) : undefined;
    setAnchorMarks(editor, { blocks, active: activeSlot?.blockIndex ?? null, room });
    this.summarise();
  }

  /** No cards: no markers, no marks, no room kept. */
  private clear(): void {
    const { margin, markers, unanchoredSection, editor } = this.o;
    margin.style.minHeight = '';
    if (markers.childElementCount) markers.replaceChildren();
    this.markerButtons.clear();
    unanchoredSection.hidden = true;
    setAnchorMarks(editor, { blocks: new Map(), active: null, room: new Map() });
    this.summarise();
  }

  /** One marker per paragraph with decisions, at its first line. */
  private placeMarkers(anchored: Placed[], targets: number[], highlighted: string | null): void {
    const byBlock = new Map<number, { slots: CardSlot[]; top: number }>();
    anchored.forEach(({ slot, index }, i) => {
      const entry = byBlock.get(index) ?? { slots: [], top: targets[i] };
      entry.slots.push(slot);
      byBlock.set(index, entry);
    });
    const shifted = this.o.markers.getBoundingClientRect().top - this.o.margin.getBoundingClientRect().top;
    // Markers are kept by their paragraph's first card, so one holding
    // focus keeps it as the text above it changes.
    const wanted = new Set([...byBlock.values()].map(({ slots }) => slots[0].card.id));
    for (const [id, marker] of this.markerButtons) {
      if (!wanted.has(id)) {
        marker.remove();
        this.markerButtons.delete(id);
      }
    }
    for (const [index, { slots, top }] of byBlock) {
      const first = slots[0].card.id;
      let marker = this.markerButtons.get(first);
      if (!marker) {
        marker = this.marker(first);
        this.markerButtons.set(first, marker);
        this.o.markers.append(marker);
      }
      marker.dataset.blockIndex = String(index);
      const open = slots.filter((s) => s.card.state === 'open' || s.card.state === 'reopened');
      const state = open.length
        ? 'open'
        : slots.some((s) => s.card.state === 'answered')
          ? 'answered'
          : slots[0].card.state;
      marker.textContent = slots.length > 1 ? String(slots.length) : state === 'answered' ? '\u2713' : '?';
      marker.dataset.state = state;
      marker.style.top = `${top - shifted + 2}px`;
      marker.classList.toggle('active', slots.some((s) => s.card.id === highlighted));
      const what = slots.length > 1 ? `${slots.length} decisions` : `Decision “${slots[0].card.question}”`;
      marker.setAttribute('aria-label', `${what} (${open.length ? `${open.length} open` : state}): show the card`);
      marker.title = slots.map((s) => s.card.question).join('\n');
    }
  }

  /** A marker button for the paragraph whose first card is `card`. */
  private marker(card: string): HTMLButtonElement {
    const marker = el('button', 'decision-marker');
    marker.type = 'button';
    marker.dataset.card = card;
    const slot = () => this.slots.get(card);
    marker.addEventListener('click', () => {
      const s = slot();
      if (s) this.focusCard(s);
    });
    marker.addEventListener('mouseenter', () => this.setHovered(slot()?.card.id ?? null));
    marker.addEventListener('mouseleave', () => this.setHovered(null));
    return marker;
  }

  /** Focuses a card (from its marker): it comes to its paragraph's line. */
  private focusCard(slot: CardSlot): void {
    this.focused = slot.card.id;
    // A tucked card cannot take focus; once focused it is the one pinned,
    // and the layout shows it.
    slot.root.classList.remove('tucked');
    slot.root.focus({ preventScroll: true });
    slot.root.scrollIntoView({ block: 'nearest' });
    this.schedule();
  }

  /** The line counting cards by state, which follows the cards live. */
  private summarise(): void {
    const counts = { open: 0, answered: 0, discarded: 0, cancelled: 0 };
    for (const { card } of this.slots.values()) {
      if (card.state === 'open' || card.state === 'reopened') counts.open++;
      else if (card.state in counts) counts[card.state as keyof typeof counts]++;
    }
    const { summary } = this.o;
    const total = this.slots.size;
    summary.hidden = total === 0;
    for (const [k, v] of Object.entries(counts)) summary.dataset[k] = String(v);
    const parts = [
      counts.answered ? `${counts.answered} answered` : '',
      counts.open ? `${counts.open} open` : '',
      counts.discarded ? `${counts.discarded} discarded` : '',
      counts.cancelled ? `${counts.cancelled} withdrawn` : '',
    ].filter(Boolean);
    summary.replaceChildren(el('strong', '', `${total} decision${total === 1 ? '' : 's'}: `), parts.join(' · '));
  }

  /** Runs one of a person's actions; the card re-renders from the map, errors show on the card. */
  act(slot: CardSlot, action: CardAction, body?: unknown, onSuccess?: () => void): void {
    void this.run(slot, action, body, onSuccess);
  }

  private async run(slot: CardSlot, action: CardAction, body?: unknown, onSuccess?: () => void): Promise<void> {
    if (slot.busy) return;
    const before = slot.json;
    // Focus inside the card survives its re-rendering (an answered card
    // folds): a keyboard user stays where they were.
    const held = slot.root.contains(document.activeElement);
    slot.busy = true;
    slot.error = null;
    this.render(slot);
    const path = `/documents/${encodeURIComponent(this.o.docId)}/decisions/${encodeURIComponent(slot.card.id)}/${action}`;
    try {
      const updated = await api<unknown>('POST', path, this.o.token, body);
      onSuccess?.();
      // The map will carry the same card; applying the response at once keeps
      // this page current even if the live mirror is slow.
      const card = parseCard(slot.card.id, updated);
      if (card && slot.json === before) {
        slot.card = card;
        slot.json = JSON.stringify(card);
      }
    } catch (e) {
      if (this.destroyed) return;
      if (this.o.onAuthFailure(e)) return;
      const verb = {
        answer: 'answer',
        discard: 'discard',
        reopen: 'reopen',
        options: 'add the option',
        criteria: 'add the criterion',
      }[action];
      slot.error =
        e instanceof ApiError && e.status === 403
          ? `Could not ${verb}: ${e.message} (403 — you can only read this document)`
          : `Could not ${verb}: ${describe(e)}`;
    } finally {
      slot.busy = false;
      if (!this.destroyed && this.slots.get(slot.card.id) === slot) {
        this.render(slot);
        const lost = !document.activeElement || document.activeElement === document.body;
        if (held && lost) this.refocus(slot);
      }
    }
  }

  /** Focus back in a re-rendered card: its summary when folded, else its first control. */
  private refocus(slot: CardSlot): void {
    const target =
      slot.root.querySelector<HTMLElement>('[data-field="summary"]') ??
      slot.root.querySelector<HTMLElement>('button, input, textarea, summary');
    (target ?? slot.root).focus({ preventScroll: true });
  }
}

/** Makes `elements` the children of `parent`, in order, moving only what must move. */
function inOrder(parent: HTMLElement, elements: HTMLElement[]): void {
  const children = parent.children;
  const same = children.length === elements.length && elements.every((e, i) => children[i] === e);
  if (same) return;
  elements.forEach((e, i) => {
    if (parent.children[i] !== e) parent.insertBefore(e, parent.children[i] ?? null);
  });
  while (parent.children.length > elements.length) parent.lastElementChild?.remove();
}

/**
 * Tops for cards whose paragraphs are at `targets` (ascending) and whose
 * heights are `heights`, so that none overlap, within the column (top 0):
 * the `pinned` card (−1 for none) sits exactly at its target, those below
 * are pushed down and those above pushed up; one that would then start
 * above the column's top is `tucked` (out of sight, taking no room), so the
 * pinned card stays level with its paragraph however dense the cards.
 * With none pinned, cards are pushed down only, from the column's top.
 */
export function stack(
  targets: number[],
  heights: number[],
  pinned: number,
): { tops: number[]; tucked: boolean[] } {
  const n = targets.length;
  const tops = targets.map((t) => Math.max(0, t));
  const tucked = targets.map(() => false);
  for (let i = Math.max(pinned + 1, 1); i < n; i++) tops[i] = Math.max(tops[i], tops[i - 1] + heights[i - 1] + GAP);
  if (pinned < 0) return { tops, tucked };
  // Upwards from the pinned card: each card ends a gap above the lowest
  // card shown below it; one with no room left is tucked.
  let ceiling = tops[pinned];
  for (let i = pinned - 1; i >= 0; i--) {
    const top = Math.min(tops[i], ceiling - heights[i] - GAP);
    if (top < 0) {
      tucked[i] = true;
      tops[i] = 0;
    } else {
      tops[i] = top;
      ceiling = top;
    }
  }
  return { tops, tucked };
}
