// One decision card, drawn from its DecisionCardView (SPEC D, B1a): an open
// card asks its question with the controls to answer it; an answered one
// collapses to a line — question and answer — and opens to show its answer
// with one action, "Change answer"; a discarded card or a withdrawn
// (cancelled) one collapses too, and a discarded one can be reopened.
// A card whose paragraph is gone says so and, when this page saw it, what
// the paragraph said.
//
// What a person types or picks lives in the slot's draft, so a live
// re-render (someone else acts, the Planner adds a choice) never loses it.
// Every card string is model- or person-authored and untrusted (SPEC E3):
// textContent only.

import { el } from './dom';
import type { AnswerBody, DecisionCardView } from './wire';

/** What a person is typing or picking on one card. */
export interface Draft {
  selected: Set<string>;
  text: string;
  option: string;
  criterion: string;
}

/** A card as the page holds it. */
export interface CardSlot {
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
  /** Whether a collapsed (answered, discarded, withdrawn) card is opened. */
  expanded: boolean;
  /** Block index it stands beside, or null when unanchored. */
  blockIndex: number | null;
  /** Where this page last saw its paragraph, for when it is gone. */
  lastSeen: { index: number; text: string } | null;
}

export type CardAction = 'answer' | 'discard' | 'reopen' | 'options' | 'criteria';

/** What a card asks of the page around it. */
export interface CardHost {
  readOnly: boolean;
  act(slot: CardSlot, action: CardAction, body?: unknown, onSuccess?: () => void): void;
  render(slot: CardSlot): void;
}

const STATES: Record<string, string> = {
  open: 'Open',
  answered: 'Answered',
  reopened: 'Reopened',
  discarded: 'Discarded',
  cancelled: 'Withdrawn',
};
const KINDS: Record<string, string> = {
  single_choice: 'Pick one',
  multiple_choice: 'Pick any',
  free_text: 'Free text',
  yes_no: 'Yes or no',
};

function button(text: string, className: string, type: 'button' | 'submit' = 'button'): HTMLButtonElement {
  const b = el('button', className, text);
  b.type = type;
  return b;
}

/** Human text for an answer. */
export function answerText(card: DecisionCardView): string | null {
  const a: AnswerBody | null | undefined = card.answer;
  if (!a) return null;
  if ('choices' in a) {
    return a.choices.map((id) => card.choices.find((c) => c.id === id)?.label ?? id).join(', ');
  }
  if ('text' in a) return a.text;
  return a.yes ? 'Yes' : 'No';
}

/** Whether the card holds its question still (SPEC D4). */
const holds = (state: string) => state === 'open' || state === 'reopened' || state === 'answered';

/** Whether the card shows as one line unless opened. */
export function collapses(slot: CardSlot): boolean {
  const s = slot.card.state;
  return (s === 'answered' && !slot.editing) || s === 'discarded' || s === 'cancelled';
}

/** Draws `slot` into its root, keeping the focused field and its caret. */
export function renderCard(slot: CardSlot, host: CardHost): void {
  const { root } = slot;
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

  const card = slot.card;
  root.dataset.cardId = card.id;
  root.dataset.key = card.key;
  root.dataset.state = card.state;
  root.dataset.response = card.response;
  root.setAttribute('aria-busy', String(slot.busy));
  root.tabIndex = -1;
  const questionId = `card-q-${card.id}`;
  root.setAttribute('aria-labelledby', questionId);

  const folded = collapses(slot) && !slot.expanded;
  root.classList.toggle('collapsed', folded);
  const parts = folded ? summaryParts(slot, host, questionId) : fullParts(slot, host, questionId);

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
}

/** The one line a settled card shows: mark, question, answer. */
function summaryParts(slot: CardSlot, host: CardHost, questionId: string): HTMLElement[] {
  const card = slot.card;
  const summary = button('', 'card-summary');
  summary.dataset.field = 'summary';
  summary.setAttribute('aria-expanded', 'false');
  const answered = answerText(card);
  const mark = card.state === 'answered' ? '\u2713' : '\u2013';
  const question = el('span', 'summary-question', card.question);
  question.id = questionId;
  summary.append(el('span', 'summary-mark', mark), question);
  if (card.state === 'answered' && answered !== null) summary.append(el('span', 'summary-answer answer-value', answered));
  else summary.append(el('span', 'summary-answer', STATES[card.state] ?? card.state));
  summary.title =
    card.state === 'answered'
      ? `Answered${card.answered_by ? ` by ${card.answered_by}` : ''}: ${answered ?? ''}. Open to change the answer.`
      : `${STATES[card.state] ?? card.state}. Open to see the decision.`;
  summary.setAttribute(
    'aria-label',
    `${card.question} — ${card.state === 'answered' ? `answered: ${answered ?? ''}` : STATES[card.state] ?? card.state}. Show the decision.`,
  );
  summary.addEventListener('click', () => {
    slot.expanded = true;
    host.render(slot);
    slot.root.querySelector<HTMLElement>('[data-field="collapse"]')?.focus();
  });
  const parts: HTMLElement[] = [summary];
  if (slot.blockIndex === null) parts.push(where(slot));
  return parts;
}

/**
 * Where an unanchored card stood: as this page last saw its paragraph, else
 * as the paragraph read when the card was opened (the server keeps that).
 */
function where(slot: CardSlot): HTMLElement {
  const p = el('p', 'card-where');
  const quoted = (text: string) => el('span', 'where-text', text ? `“${text}”` : '(an empty paragraph)');
  if (slot.lastSeen) {
    p.append(`Its paragraph was deleted. It stood beside paragraph ${slot.lastSeen.index + 1}: `, quoted(slot.lastSeen.text));
  } else if (slot.card.excerpt) {
    p.append('Its paragraph is no longer in the document. It was opened beside: ', quoted(slot.card.excerpt));
  } else {
    p.textContent = 'Its paragraph is no longer in the document: it was deleted or rewritten before this page opened.';
  }
  return p;
}

/** The whole card: question, context, answer, controls. */
function fullParts(slot: CardSlot, host: CardHost, questionId: string): HTMLElement[] {
  const { card, draft } = slot;
  const canAct = !host.readOnly;
  const hasChoices = card.response === 'single_choice' || card.response === 'multiple_choice';
  const answerable = canAct && holds(card.state);

  const head = el('header', 'card-head');
  head.append(
    el('span', `card-state state-${card.state}`, STATES[card.state] ?? card.state),
    el('span', 'card-kind', KINDS[card.response] ?? card.response),
  );
  if (canAct && (card.state === 'open' || card.state === 'reopened')) {
    const discard = button('Discard', 'discard');
    discard.dataset.field = 'discard';
    discard.setAttribute('aria-label', `Discard the decision “${card.question}” without answering`);
    discard.addEventListener('click', () => host.act(slot, 'discard'));
    head.append(discard);
  }
  if (collapses(slot)) {
    const hide = button('Hide', 'card-collapse');
    hide.dataset.field = 'collapse';
    hide.setAttribute('aria-label', 'Hide the decision again');
    hide.addEventListener('click', () => {
      slot.expanded = false;
      host.render(slot);
      slot.root.querySelector<HTMLElement>('[data-field="summary"]')?.focus();
    });
    head.append(hide);
  }
  const question = el('h3', 'card-question', card.question);
  question.id = questionId;
  const parts: HTMLElement[] = [head, question];
  if (slot.blockIndex === null) parts.push(where(slot));
  if (card.description) parts.push(el('p', 'card-description', card.description));

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

  // Reopen a discarded card (an open one is discarded from its head).
  const stateButtons: HTMLButtonElement[] = [];
  if (canAct && card.state === 'discarded') {
    const reopen = button('Reopen', 'reopen');
    reopen.dataset.field = 'reopen';
    reopen.addEventListener('click', () => host.act(slot, 'reopen'));
    stateButtons.push(reopen);
  }
  const actionRow = (...leading: HTMLElement[]): HTMLElement => {
    const row = el('div', 'card-actions');
    row.append(...leading, el('span', 'spacer'), ...stateButtons);
    return row;
  };
  const showForm = answerable && (card.state !== 'answered' || slot.editing);
  const answerLabel = card.state === 'answered' ? 'Save answer' : 'Answer';
  const formButtons = (): HTMLElement[] => {
    const submit = button(answerLabel, 'answer-submit', 'submit');
    submit.dataset.field = 'submit';
    if (card.state !== 'answered') return [submit];
    const cancel = button('Cancel', 'answer-cancel');
    cancel.addEventListener('click', () => {
      slot.editing = false;
      host.render(slot);
    });
    return [submit, cancel];
  };
  let actionsPlaced = false;

  const chosen = new Set(card.answer && 'choices' in card.answer ? card.answer.choices : []);
  if (hasChoices && showForm) {
    const form = el('form', 'answer-form choices');
    form.setAttribute('aria-label', `Answer: ${card.question}`);
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
      host.act(slot, 'answer', { choices: picked }, () => {
        draft.selected = new Set();
        slot.editing = false;
        slot.expanded = false;
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
    form.setAttribute('aria-label', `Answer: ${card.question}`);
    const area = el('textarea', 'answer-text');
    // One line until there is more to say: a card stays short beside its
    // paragraph, and grows with what is typed.
    area.rows = 1;
    area.placeholder = 'Your answer';
    area.setAttribute('aria-label', `Your answer to “${card.question}”`);
    area.dataset.field = 'text';
    area.value = draft.text;
    const fit = () => {
      area.style.height = 'auto';
      area.style.height = `${area.scrollHeight + 2}px`;
    };
    area.addEventListener('input', () => {
      draft.text = area.value;
      fit();
    });
    // Enter answers, as in any one-line field; Shift+Enter starts a new
    // line of a longer answer.
    area.addEventListener('keydown', (ev) => {
      if (ev.key === 'Enter' && !ev.shiftKey && !ev.isComposing) {
        ev.preventDefault();
        form.requestSubmit();
      }
    });
    if (draft.text) requestAnimationFrame(fit);
    form.append(area, actionRow(...formButtons()));
    actionsPlaced = true;
    form.addEventListener('submit', (ev) => {
      ev.preventDefault();
      draft.text = area.value;
      host.act(slot, 'answer', { text: area.value }, () => {
        draft.text = '';
        slot.editing = false;
        slot.expanded = false;
      });
    });
    parts.push(form);
  } else if (showForm && card.response === 'yes_no') {
    const yes = button('Yes', 'answer-yes');
    const no = button('No', 'answer-no');
    yes.dataset.field = 'yes';
    no.dataset.field = 'no';
    yes.setAttribute('aria-label', `Answer yes: ${card.question}`);
    no.setAttribute('aria-label', `Answer no: ${card.question}`);
    const done = () => {
      slot.editing = false;
      slot.expanded = false;
    };
    yes.addEventListener('click', () => host.act(slot, 'answer', { yes: true }, done));
    no.addEventListener('click', () => host.act(slot, 'answer', { yes: false }, done));
    const row = actionRow(yes, no, ...(card.state === 'answered' ? formButtons().slice(1) : []));
    row.classList.add('answer-form', 'yes-no');
    parts.push(row);
    actionsPlaced = true;
  }
  if (!actionsPlaced && answerable) {
    // An answered card: one action, which opens the form at the answer on record.
    const change = button('Change answer', 'answer-change');
    change.dataset.field = 'change';
    change.addEventListener('click', () => {
      draft.selected = new Set(chosen);
      if (card.answer && 'text' in card.answer) draft.text = card.answer.text;
      slot.editing = true;
      host.render(slot);
      slot.root.querySelector<HTMLElement>('input, textarea, .answer-yes')?.focus();
    });
    parts.push(actionRow(change));
  } else if (!actionsPlaced && stateButtons.length > 0) {
    parts.push(actionRow());
  }

  // Adding an option or a criterion, folded away until wanted.
  if (canAct && holds(card.state) && (card.state !== 'answered' || slot.editing)) {
    const more = el('details', 'card-more');
    more.open = slot.moreOpen;
    more.addEventListener('toggle', () => (slot.moreOpen = more.open));
    const summary = el('summary', 'card-more-toggle', hasChoices ? 'Add an option or criterion' : 'Add a criterion');
    summary.dataset.field = 'more';
    more.append(summary);
    if (hasChoices) {
      more.append(
        inlineForm(slot, 'add-option', 'option', 'New option', 'Add option', (label) =>
          host.act(slot, 'options', { label }, () => (draft.option = '')),
        ),
      );
    }
    more.append(
      inlineForm(slot, 'add-criterion', 'criterion', 'New criterion', 'Add criterion', (text) =>
        host.act(slot, 'criteria', { text }, () => (draft.criterion = '')),
      ),
    );
    parts.push(more);
  }

  const error = el('p', 'card-error', slot.error ?? '');
  error.setAttribute('role', 'alert');
  error.hidden = slot.error === null;
  parts.push(error);
  return parts;
}

function inlineForm(
  slot: CardSlot,
  className: string,
  field: 'option' | 'criterion',
  placeholder: string,
  submitText: string,
  submit: (value: string) => void,
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
    submit(input.value.trim());
  });
  return form;
}
