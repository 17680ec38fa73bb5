// Decision cards rendered beside their paragraph (SPEC B1, D).
//
// The server mirrors every card into the shared Y.Doc: `getMap('decisions')`
// maps a card id to a JSON string (DecisionCardView, docs/protocol.md). A
// card's `anchors` are block identities — the Yjs item id `client:clock` of a
// top-level element of the `prosemirror` XmlFragment — whose index in the
// fragment is the ProseMirror top-level node index. Cards are laid out in a
// margin column next to the first anchor block that still exists; cards whose
// blocks are all gone are listed under "Unanchored decisions".
//
// People act through HTTP (answer, discard, reopen, add an option or a
// criterion); the map is the source of truth, so every editor updates live.
//
// Every card string is model- or person-authored and untrusted (SPEC E3): it
// is only ever assigned with textContent, never parsed as HTML.

import type { Editor } from '@tiptap/core';
import * as Y from 'yjs';
import { ApiError, api, describe } from './api';
import { el } from './dom';

export interface ChoiceView {
  id: string;
  label: string;
  added_by?: string;
}

export type AnswerBody = { choices: string[] } | { text: string } | { yes: boolean };

export interface DecisionCardView {
  id: string;
  key: string;
  question: string;
  description?: string;
  response: string;
  choices: ChoiceView[];
  criteria: string[];
  anchors: string[];
  state: string;
  answer?: AnswerBody;
  answered_by?: string;
}

export interface DecisionCardsOptions {
  editor: Editor;
  ydoc: Y.Doc;
  docId: string;
  token: string;
  readOnly: boolean;
  /** The margin column beside the editor. */
  margin: HTMLElement;
  /** The "Unanchored decisions" section and its list. */
  unanchoredSection: HTMLElement;
  unanchoredList: HTMLElement;
  /** Called with an action's failure; returns true if it was handled (401). */
  onAuthFailure: (e: unknown) => boolean;
}

const GAP = 8;
const STATES: Record<string, string> = {
  open: 'Open',
  answered: 'Answered',
  reopened: 'Reopened',
  discarded: 'Discarded',
  cancelled: 'Cancelled',
};
const KINDS: Record<string, string> = {
  single_choice: 'Pick one',
  multiple_choice: 'Pick any',
  free_text: 'Free text',
  yes_no: 'Yes or no',
};

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
  };
}


function button(text: string, className: string, type: 'button' | 'submit' = 'button'): HTMLButtonElement {
  const b = el('button', className, text);
  b.type = type;
  return b;
}

/** Human text for an answer. */
export function answerText(card: DecisionCardView): string | null {
  const a = card.answer;
  if (!a) return null;
  if ('choices' in a) {
    return a.choices.map((id) => card.choices.find((c) => c.id === id)?.label ?? id).join(', ');
  }
  if ('text' in a) return a.text;
  return a.yes ? 'Yes' : 'No';
}

/** What a person is typing or picking on one card; kept across live re-renders. */
interface Draft {
  selected: Set<string>;
  text: string;
  option: string;
  criterion: string;
}

interface CardSlot {
  card: DecisionCardView;
  json: string;
  root: HTMLElement;
  draft: Draft;
  busy: boolean;
  error: string | null;
  /** Whether the "add an option or criterion" fold is open. */
  moreOpen: boolean;
  /** Whether an answered card's answer form is open. */
  editing: boolean;
  /** Block index it stands beside, or null when unanchored. */
  blockIndex: number | null;
}

export class DecisionCards {
  private readonly map: Y.Map<unknown>;
  private readonly fragment: Y.XmlFragment;
  private readonly slots = new Map<string, CardSlot>();
  private frame = 0;
  private destroyed = false;
  private readonly resizeObserver: ResizeObserver;
  private readonly onMapChange = (event: Y.YMapEvent<unknown>) => {
    for (const id of event.keysChanged) this.sync(id);
    this.schedule();
  };
  private readonly onTransaction = ({ transaction }: { transaction: { docChanged: boolean } }) => {
    if (transaction.docChanged) this.schedule();
  };
  private readonly onResize = () => this.schedule();

  constructor(private readonly o: DecisionCardsOptions) {
    this.map = o.ydoc.getMap('decisions');
    this.fragment = o.ydoc.getXmlFragment('prosemirror');
    o.margin.replaceChildren();
    o.unanchoredList.replaceChildren();
    o.unanchoredSection.hidden = true;
    this.map.observe(this.onMapChange);
    o.editor.on('transaction', this.onTransaction);
    window.addEventListener('resize', this.onResize);
    this.resizeObserver = new ResizeObserver(this.onResize);
    this.resizeObserver.observe(o.editor.view.dom);
    for (const id of this.map.keys()) this.sync(id);
    this.schedule();
  }

  destroy(): void {
    this.destroyed = true;
    this.map.unobserve(this.onMapChange);
    this.o.editor.off('transaction', this.onTransaction);
    window.removeEventListener('resize', this.onResize);
    this.resizeObserver.disconnect();
    if (this.frame) cancelAnimationFrame(this.frame);
    this.o.margin.replaceChildren();
    this.o.margin.style.minHeight = '';
    this.o.unanchoredList.replaceChildren();
    this.o.unanchoredSection.hidden = true;
    this.slots.clear();
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
      slot.card = card;
      slot.json = json;
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
      blockIndex: null,
    };
    this.slots.set(id, fresh);
    this.render(fresh);
    // A card that grows or shrinks (answer shown, fold opened) moves the cards below it.
    this.resizeObserver.observe(root);
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
    const children = this.fragment.toArray();
    if (children.length !== this.o.editor.state.doc.childCount) return null;
    const byIdentity = new Map<string, number>();
    children.forEach((child, i) => {
      const item = (child as Y.XmlElement)._item;
      if (item) byIdentity.set(`${item.id.client}:${item.id.clock}`, i);
    });
    return byIdentity;
  }

  /** Places every card beside its block, stacking cards that would overlap. */
  private layout(): void {
    if (this.destroyed) return;
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

    const anchored: { slot: CardSlot; index: number; order: number }[] = [];
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
      slot.blockIndex = index;
      if (index === null) unanchored.push(slot);
      else anchored.push({ slot, index, order: order++ });
    }
    anchored.sort((a, b) => a.index - b.index || a.order - b.order);

    // Keep DOM order = document order (also the reading order for narrow screens).
    for (const { slot, index } of anchored) {
      slot.root.dataset.blockIndex = String(index);
      slot.root.classList.remove('unanchored');
      if (slot.root.parentElement !== margin || margin.lastElementChild !== slot.root) margin.append(slot.root);
    }
    for (const slot of unanchored) {
      delete slot.root.dataset.blockIndex;
      slot.root.classList.add('unanchored');
      slot.root.style.top = '';
      if (slot.root.parentElement !== unanchoredList || unanchoredList.lastElementChild !== slot.root) {
        unanchoredList.append(slot.root);
      }
    }
    unanchoredSection.hidden = unanchored.length === 0;

    const marginTop = margin.getBoundingClientRect().top;
    let bottom = 0;
    for (const { slot, index } of anchored) {
      let top = 0;
      const dom = editor.view.nodeDOM(starts[index]);
      if (dom instanceof HTMLElement) top = dom.getBoundingClientRect().top - marginTop;
      top = Math.max(Math.round(top), bottom);
      slot.root.style.top = `${top}px`;
      bottom = top + slot.root.offsetHeight + GAP;
    }
    margin.style.minHeight = `${bottom}px`;
  }

  // ------------------------------------------------------------ rendering

  private render(slot: CardSlot): void {
    const { card, draft, root } = slot;
    const canAct = !this.o.readOnly;
    const holdsQuestion = card.state === 'open' || card.state === 'reopened' || card.state === 'answered';
    const hasChoices = card.response === 'single_choice' || card.response === 'multiple_choice';
    const answerable = canAct && holdsQuestion;

    // Remember which field had focus (and its caret) to restore it after rebuilding.
    const active = document.activeElement;
    let focusField: string | null = null;
    let caret: [number | null, number | null] = [null, null];
    if (active instanceof HTMLElement && root.contains(active)) {
      focusField = active.dataset.field ?? null;
      if (active instanceof HTMLInputElement || active instanceof HTMLTextAreaElement) {
        try {
          caret = [active.selectionStart, active.selectionEnd];
        } catch {
          caret = [null, null];
        }
      }
    }

    root.dataset.cardId = card.id;
    root.dataset.key = card.key;
    root.dataset.state = card.state;
    root.dataset.response = card.response;
    root.setAttribute('aria-label', 'Decision');
    root.setAttribute('aria-busy', String(slot.busy));

    const head = el('header', 'card-head');
    const stateBadge = el('span', `card-state state-${card.state}`, STATES[card.state] ?? card.state);
    head.append(el('span', 'card-tag', 'Decision'), stateBadge, el('span', 'card-kind', KINDS[card.response] ?? card.response));

    const parts: HTMLElement[] = [head, el('h3', 'card-question', card.question)];
    if (card.description) parts.push(el('p', 'card-description', card.description));

    // Criteria people added: context for deciding.
    if (card.criteria.length > 0) {
      const box = el('div', 'card-criteria');
      box.append(el('span', 'criteria-label', 'Criteria'));
      const list = el('ul', 'criteria-list');
      for (const c of card.criteria) list.append(el('li', 'criterion', c));
      box.append(list);
      parts.push(box);
    }

    // The answer on record (a reopened card keeps its previous one).
    const answered = answerText(card);
    if (answered !== null) {
      const box = el('div', 'card-answer');
      const label = card.state === 'answered' ? 'Answer: ' : 'Previous answer: ';
      box.append(el('span', 'answer-label', label), el('span', 'answer-value', answered));
      if (card.answered_by) box.append(el('span', 'answered-by', ` — answered by ${card.answered_by}`));
      parts.push(box);
    }

    // Discard / reopen, shown in the card's bottom row.
    const stateButtons: HTMLButtonElement[] = [];
    if (canAct && holdsQuestion) {
      const discard = button('Discard', 'discard');
      discard.dataset.field = 'discard';
      discard.addEventListener('click', () => void this.act(slot, 'discard'));
      stateButtons.push(discard);
    }
    if (canAct && (card.state === 'answered' || card.state === 'discarded')) {
      const reopen = button('Reopen', 'reopen');
      reopen.dataset.field = 'reopen';
      reopen.addEventListener('click', () => void this.act(slot, 'reopen'));
      stateButtons.push(reopen);
    }
    const actionRow = (...leading: HTMLElement[]): HTMLElement => {
      const row = el('div', 'card-actions');
      row.append(...leading, el('span', 'spacer'), ...stateButtons);
      return row;
    };
    // An answered card shows its answer compactly until someone asks to change it.
    const showForm = answerable && (card.state !== 'answered' || slot.editing);
    const answerLabel = card.state === 'answered' ? 'Save answer' : 'Answer';
    const formButtons = (): HTMLElement[] => {
      const submit = button(answerLabel, 'answer-submit', 'submit');
      if (card.state !== 'answered') return [submit];
      const cancel = button('Cancel', 'answer-cancel');
      cancel.addEventListener('click', () => {
        slot.editing = false;
        this.render(slot);
      });
      return [submit, cancel];
    };
    let actionsPlaced = false;

    // Choices: inputs when the person can answer, a list otherwise.
    const chosen = new Set(card.answer && 'choices' in card.answer ? card.answer.choices : []);
    if (hasChoices && showForm) {
      const form = el('form', 'answer-form choices');
      form.setAttribute('aria-label', 'Answer');
      const type = card.response === 'single_choice' ? 'radio' : 'checkbox';
      const list = el('div', 'choice-list');
      for (const choice of card.choices) {
        const row = el('label', 'choice');
        row.dataset.choiceId = choice.id;
        if (chosen.has(choice.id)) row.classList.add('chosen');
        const input = el('input');
        input.type = type;
        input.name = `choice-${card.id}`;
        input.value = choice.id;
        input.dataset.field = `choice:${choice.id}`;
        input.checked = draft.selected.has(choice.id);
        input.addEventListener('change', () => {
          if (type === 'radio') draft.selected = new Set([choice.id]);
          else if (input.checked) draft.selected.add(choice.id);
          else draft.selected.delete(choice.id);
        });
        row.append(input, el('span', 'choice-label', choice.label));
        if (choice.added_by) row.append(el('span', 'added-by', `added by ${choice.added_by}`));
        list.append(row);
      }
      form.append(list, actionRow(...formButtons()));
      actionsPlaced = true;
      form.addEventListener('submit', (ev) => {
        ev.preventDefault();
        const picked = card.choices.map((c) => c.id).filter((id) => draft.selected.has(id));
        void this.act(slot, 'answer', { choices: picked }, () => {
          draft.selected = new Set();
          slot.editing = false;
        });
      });
      parts.push(form);
    } else if (hasChoices) {
      const list = el('ul', 'choice-list readonly');
      for (const choice of card.choices) {
        const li = el('li', 'choice');
        li.dataset.choiceId = choice.id;
        if (chosen.has(choice.id)) li.classList.add('chosen');
        li.append(el('span', 'choice-label', choice.label));
        if (choice.added_by) li.append(el('span', 'added-by', `added by ${choice.added_by}`));
        list.append(li);
      }
      parts.push(list);
    } else if (showForm && card.response === 'free_text') {
      const form = el('form', 'answer-form free-text');
      form.setAttribute('aria-label', 'Answer');
      const area = el('textarea', 'answer-text');
      area.rows = 2;
      area.placeholder = 'Your answer';
      area.setAttribute('aria-label', 'Your answer');
      area.dataset.field = 'text';
      area.value = draft.text;
      area.addEventListener('input', () => (draft.text = area.value));
      form.append(area, actionRow(...formButtons()));
      actionsPlaced = true;
      form.addEventListener('submit', (ev) => {
        ev.preventDefault();
        draft.text = area.value;
        void this.act(slot, 'answer', { text: area.value }, () => {
          draft.text = '';
          slot.editing = false;
        });
      });
      parts.push(form);
    } else if (showForm && card.response === 'yes_no') {
      const yes = button('Yes', 'answer-yes');
      const no = button('No', 'answer-no');
      yes.dataset.field = 'yes';
      no.dataset.field = 'no';
      const done = () => (slot.editing = false);
      yes.addEventListener('click', () => void this.act(slot, 'answer', { yes: true }, done));
      no.addEventListener('click', () => void this.act(slot, 'answer', { yes: false }, done));
      const row = actionRow(yes, no, ...(card.state === 'answered' ? formButtons().slice(1) : []));
      row.classList.add('answer-form', 'yes-no');
      parts.push(row);
      actionsPlaced = true;
    }
    if (!actionsPlaced && answerable) {
      const change = button('Change answer', 'answer-change');
      change.dataset.field = 'change';
      change.addEventListener('click', () => {
        // Start from the answer on record.
        draft.selected = new Set(chosen);
        if (card.answer && 'text' in card.answer) draft.text = card.answer.text;
        slot.editing = true;
        this.render(slot);
      });
      parts.push(actionRow(change));
    } else if (!actionsPlaced && stateButtons.length > 0) {
      parts.push(actionRow());
    }

    // Adding an option or a criterion, folded away until wanted.
    if (canAct && holdsQuestion) {
      const more = el('details', 'card-more');
      more.open = slot.moreOpen;
      more.addEventListener('toggle', () => (slot.moreOpen = more.open));
      const summary = el('summary', 'card-more-toggle', hasChoices ? 'Add an option or criterion' : 'Add a criterion');
      summary.dataset.field = 'more';
      more.append(summary);
      if (hasChoices) {
        more.append(
          this.inlineForm(slot, 'add-option', 'option', 'New option', 'Add option', (label) =>
            this.act(slot, 'options', { label }, () => (draft.option = '')),
          ),
        );
      }
      more.append(
        this.inlineForm(slot, 'add-criterion', 'criterion', 'New criterion', 'Add criterion', (text) =>
          this.act(slot, 'criteria', { text }, () => (draft.criterion = '')),
        ),
      );
      parts.push(more);
    }

    const error = el('p', 'card-error', slot.error ?? '');
    error.setAttribute('role', 'alert');
    error.hidden = slot.error === null;
    parts.push(error);

    // While an action is in flight its buttons are disabled; text fields stay
    // usable (and keep focus across live re-renders).
    if (slot.busy) {
      for (const p of parts) {
        p.querySelectorAll<HTMLButtonElement | HTMLInputElement>('button, input[type=radio], input[type=checkbox]').forEach(
          (c) => (c.disabled = true),
        );
      }
    }
    root.replaceChildren(...parts);

    if (focusField) {
      const again = [...root.querySelectorAll<HTMLElement>('[data-field]')].find((e) => e.dataset.field === focusField);
      if (again && !(again as HTMLButtonElement).disabled) {
        again.focus();
        if ((again instanceof HTMLInputElement || again instanceof HTMLTextAreaElement) && caret[0] !== null) {
          try {
            again.setSelectionRange(caret[0], caret[1] ?? caret[0]);
          } catch {
            // Not a text field.
          }
        }
      }
    }
    this.schedule();
  }

  private inlineForm(
    slot: CardSlot,
    className: string,
    field: 'option' | 'criterion',
    placeholder: string,
    submitText: string,
    submit: (value: string) => Promise<void>,
  ): HTMLFormElement {
    const form = el('form', `card-inline ${className}`);
    form.autocomplete = 'off';
    const input = el('input');
    input.type = 'text';
    input.placeholder = placeholder;
    input.setAttribute('aria-label', placeholder);
    input.dataset.field = field;
    input.value = slot.draft[field];
    input.addEventListener('input', () => (slot.draft[field] = input.value));
    form.append(input, button(submitText, `${className}-submit`, 'submit'));
    form.addEventListener('submit', (ev) => {
      ev.preventDefault();
      // What the person sees in the field is what is sent.
      slot.draft[field] = input.value;
      void submit(input.value.trim());
    });
    return form;
  }

  /** Runs one of a person's actions; the card re-renders from the map, errors show on the card. */
  private async act(
    slot: CardSlot,
    action: 'answer' | 'discard' | 'reopen' | 'options' | 'criteria',
    body?: unknown,
    onSuccess?: () => void,
  ): Promise<void> {
    if (slot.busy) return;
    const before = slot.json;
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
      if (!this.destroyed && this.slots.get(slot.card.id) === slot) this.render(slot);
    }
  }
}
