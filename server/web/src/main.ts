// Margin's browser editor: sign in with a token, list documents, and edit one
// document with Tiptap bound to the server's Yjs document over y-websocket,
// with its decision cards beside their paragraphs (decisions.ts, card.ts,
// anchors.ts), its Planner's status and plan (planner.ts, plan.ts) and its
// Chat (chat.ts) fed live by the document's feed (feed.ts), and the
// controls to share, rename, archive and delete it (manage.ts).
//
// Every string that comes from the server or another user is rendered with
// textContent (never innerHTML).

import { Editor } from '@tiptap/core';
import StarterKit from '@tiptap/starter-kit';
import Collaboration from '@tiptap/extension-collaboration';
import CollaborationCursor from '@tiptap/extension-collaboration-cursor';
import * as Y from 'yjs';
import { WebsocketProvider } from 'y-websocket';
import { ApiError, api, describe } from './api';
import { DecisionAnchors } from './anchors';
import { EmptyPlaceholder } from './placeholder';
import { DecisionCards } from './decisions';
import { ChatPanel } from './chat';
import { PlannerPanel } from './planner';
import { PlanPanel } from './plan';
import { DocumentFeed } from './feed';
import { DocumentControls } from './manage';
import { documentRows } from './home';
import { byId as $ } from './dom';
import type { DocumentInfo, DocumentList, Me } from './wire';
import { Close } from './protocol';

const TOKEN_KEY = 'margin.token';


function show(id: string, visible: boolean): void {
  $(id).hidden = !visible;
}

function getToken(): string | null {
  try {
    return localStorage.getItem(TOKEN_KEY);
  } catch {
    return null;
  }
}

function setToken(token: string | null): void {
  if (token === null) localStorage.removeItem(TOKEN_KEY);
  else localStorage.setItem(TOKEN_KEY, token);
}

/** A stable, readable colour for an account name. */
function colourFor(name: string): string {
  let h = 2166136261;
  for (let i = 0; i < name.length; i++) {
    h ^= name.charCodeAt(i);
    h = Math.imul(h, 16777619);
  }
  const hue = (h >>> 0) % 360;
  return hslToHex(hue, 0.65, 0.42);
}

function hslToHex(h: number, s: number, l: number): string {
  const k = (n: number) => (n + h / 30) % 12;
  const a = s * Math.min(l, 1 - l);
  const f = (n: number) => l - a * Math.max(-1, Math.min(k(n) - 3, Math.min(9 - k(n), 1)));
  const hex = (x: number) =>
    Math.round(x * 255)
      .toString(16)
      .padStart(2, '0');
  return `#${hex(f(0))}${hex(f(8))}${hex(f(4))}`;
}

// ---------------------------------------------------------------- state

let account: string | null = null;
interface OpenDocument {
  doc: DocumentInfo;
  editor: Editor;
  provider: WebsocketProvider;
  ydoc: Y.Doc;
  cards: DecisionCards;
  chat: ChatPanel;
  planner: PlannerPanel;
  plan: PlanPanel;
  feed: DocumentFeed;
  controls: DocumentControls;
}
let session: OpenDocument | null = null;
let renderSeq = 0;
/** A notice for the next view (the document just deleted). */
let pendingNotice: string | null = null;

function setStatus(status: 'connecting' | 'connected' | 'disconnected' | null, detail?: string): void {
  const el = $('status');
  if (status === null) {
    el.hidden = true;
    el.dataset.status = 'idle';
    el.textContent = '';
    return;
  }
  el.hidden = false;
  el.dataset.status = status;
  el.textContent = detail ? `${status} — ${detail}` : status;
}

function showError(message: string | null): void {
  const el = $('error');
  el.textContent = message ?? '';
  el.hidden = message === null;
}

function showNotice(message: string | null): void {
  const el = $('notice');
  el.textContent = message ?? '';
  el.hidden = message === null;
}

function closeSession(): void {
  if (!session) return;
  const { editor, provider, ydoc, cards, chat, planner, plan, feed, controls } = session;
  session = null;
  $('outage').hidden = true;
  feed.destroy();
  controls.destroy();
  chat.destroy();
  planner.destroy();
  plan.destroy();
  cards.destroy();
  provider.destroy();
  editor.destroy();
  ydoc.destroy();
  $('editor').replaceChildren();
  setStatus(null);
}

/** The open document can no longer be read by this account. */
function lostAccess(message: string): void {
  closeSession();
  showOnly(null);
  showError(message);
}

function showOnly(section: 'signin' | 'home' | 'document' | null): void {
  show('signin', section === 'signin');
  show('home', section === 'home');
  show('document', section === 'document');
  document.body.dataset.view = section ?? 'none';
}

function showSignedIn(name: string | null): void {
  const acc = $('account');
  acc.textContent = name ?? '';
  acc.hidden = name === null;
  show('sign-out', name !== null);
}

function signInView(message: string | null): void {
  closeSession();
  account = null;
  showSignedIn(null);
  showError(null);
  showNotice(null);
  showOnly('signin');
  document.title = 'Sign in · Margin';
  const err = $('token-error');
  err.textContent = message ?? '';
  err.hidden = message === null;
  ($('token-input') as HTMLInputElement).focus();
}

/** Handles an API failure common to all views; returns true when handled. */
function handleAuthFailure(e: unknown): boolean {
  if (e instanceof ApiError && e.status === 401) {
    setToken(null);
    signInView('The server did not accept that token (401 Unauthorized). Sign in with a valid token.');
    return true;
  }
  return false;
}

// ---------------------------------------------------------------- views

async function ensureAccount(token: string): Promise<string> {
  if (account !== null) return account;
  const me = await api<Me>('GET', '/me', token);
  account = me.account;
  showSignedIn(account);
  return account;
}

async function renderHome(token: string, seq: number): Promise<void> {
  closeSession();
  showError(null);
  showNotice(pendingNotice);
  pendingNotice = null;
  try {
    await ensureAccount(token);
    const { documents } = await api<DocumentList>('GET', '/documents', token);
    if (seq !== renderSeq) return;
    $('doc-list').replaceChildren(...documentRows(documents));
    show('doc-list-empty', documents.length === 0);
    showOnly('home');
    document.title = 'Documents · Margin';
  } catch (e) {
    if (seq !== renderSeq || handleAuthFailure(e)) return;
    showOnly(null);
    showError(`Could not load your documents: ${describe(e)}`);
  }
}

/** What the page shows of the document itself: title, role, last edit, archive banner. */
function showDocument(open: OpenDocument, doc: DocumentInfo): void {
  open.doc = doc;
  const readOnly = doc.role === 'viewer' || doc.archived;
  document.title = `${doc.title || 'Untitled'} · Margin`;
  $('doc-role').textContent = doc.role === 'viewer' ? 'Viewer · read-only' : doc.role === 'owner' ? 'Owner' : 'Editor';
  show('doc-banner', doc.archived);
  $('doc-banner-text').textContent = doc.archived
    ? 'Archived by its owner: everyone can read it, nobody can change it, and the Planner is off.'
    : '';
  open.controls.show(doc);
  open.editor.setEditable(!readOnly);
  open.cards.setReadOnly(readOnly);
  open.chat.setReadOnly(readOnly);
  open.planner.setReadOnly(readOnly);
}

async function renderDocument(token: string, id: string, seq: number): Promise<void> {
  if (session && session.doc.id === id) return;
  closeSession();
  showError(null);
  let name: string;
  let doc: DocumentInfo;
  try {
    name = await ensureAccount(token);
    doc = await api<DocumentInfo>('GET', `/documents/${encodeURIComponent(id)}`, token);
  } catch (e) {
    if (seq !== renderSeq || handleAuthFailure(e)) return;
    showOnly(null);
    if (e instanceof ApiError && (e.status === 404 || e.status === 403)) {
      showError(`Document not found: there is no document "${id}" that you can open.`);
    } else {
      showError(`Could not open the document: ${describe(e)}`);
    }
    return;
  }
  if (seq !== renderSeq) return;
  showNotice(null);
  showOnly('document');
  const readOnly = doc.role === 'viewer' || doc.archived;

  const ydoc = new Y.Doc();
  const scheme = location.protocol === 'https:' ? 'wss' : 'ws';
  const provider = new WebsocketProvider(`${scheme}://${location.host}/documents`, `${doc.id}/sync`, ydoc, {
    params: { token },
    // Tabs must not sync with each other behind the server's back.
    disableBc: true,
  });
  setStatus('connecting');
  // Once connected, losing the server is an outage, said plainly until it
  // is back; a final refusal (44xx, no reconnect) is said by the status.
  let everConnected = false;
  let refused = false;
  const outage = (on: boolean) => {
    $('outage').hidden = !on;
    planner.setReachable(!on);
  };
  provider.on('status', ({ status }) => {
    if (session?.provider !== provider) return;
    setStatus(status);
    if (status === 'connected') everConnected = true;
    outage(everConnected && !refused && status !== 'connected');
  });
  provider.on('connection-close', (event) => {
    if (session?.provider !== provider || !event) return;
    refused = event.code >= 4400 && event.code < 4500;
    // 44xx are final refusals (the client does not reconnect).
    if (event.code === Close.READ_ONLY) {
      setStatus('disconnected', 'edit refused: read-only access');
    } else if (event.code === Close.BAD_UPDATE) {
      setStatus('disconnected', 'an edit could not be applied; reload the page');
    } else if (event.code === Close.DELETED) {
      setStatus('disconnected', 'the document was deleted');
    } else if (event.code === Close.REMOVED) {
      lostAccess('You are no longer a member of this document: its owner removed you.');
    } else if (event.code === Close.ACCESS_CHANGED) {
      // The client reconnects with the new role; the feed says which.
      setStatus('connecting', 'your role changed');
    }
  });

  const editor = new Editor({
    element: $('editor'),
    editable: !readOnly,
    extensions: [
      StarterKit.configure({ history: false }),
      Collaboration.configure({ document: ydoc, field: 'prosemirror' }),
      CollaborationCursor.configure({
        provider,
        user: { name, color: colourFor(name) },
      }),
      EmptyPlaceholder.configure({
        text: readOnly
          ? 'This document is empty.'
          : 'Write the plan here. End a paragraph with “?” and mention @planner in Chat to have the Planner turn it into a decision.',
      }),
      DecisionAnchors,
    ],
    editorProps: { attributes: { 'aria-label': 'Document text', role: 'textbox', 'aria-multiline': 'true' } },
  });
  const cards = new DecisionCards({
    editor,
    ydoc,
    docId: doc.id,
    token,
    readOnly,
    margin: $('decision-margin'),
    markers: $('decision-markers'),
    unanchoredSection: $('unanchored'),
    unanchoredList: $('unanchored-list'),
    summary: $('decision-summary'),
    onAuthFailure: handleAuthFailure,
  });
  const plan = new PlanPanel({ token, onAuthFailure: handleAuthFailure });
  const planner = new PlannerPanel({
    docId: doc.id,
    token,
    readOnly,
    onAuthFailure: handleAuthFailure,
    onSession: (sid) => plan.follow(sid),
  });
  const chat = new ChatPanel({ docId: doc.id, token, readOnly, onAuthFailure: handleAuthFailure });
  const feed = new DocumentFeed(doc.id, token, {
    chat: (line) => chat.add(line),
    planner: (view) => planner.show(view),
    document: (changed) => {
      if (session?.feed === feed) showDocument(session, changed);
    },
    gone: () => {
      if (session?.feed === feed) lostAccess('This document is gone: it was deleted, or you no longer have access to it.');
    },
  });
  const controls = new DocumentControls(doc, {
    token,
    account: name,
    onAuthFailure: handleAuthFailure,
    onChanged: (changed) => {
      if (session && session.doc.id === changed.id) showDocument(session, changed);
    },
    onDeleted: (title) => {
      pendingNotice = `Deleted “${title || 'Untitled'}”.`;
      location.hash = '#/';
    },
  });
  session = { doc, editor, provider, ydoc, cards, chat, planner, plan, feed, controls };
  showDocument(session, doc);
}

async function route(): Promise<void> {
  const seq = ++renderSeq;
  const token = getToken();
  if (!token) {
    signInView(null);
    return;
  }
  const m = /^#\/d\/(.+)$/.exec(location.hash);
  if (m) await renderDocument(token, decodeURIComponent(m[1]), seq);
  else await renderHome(token, seq);
}

// ---------------------------------------------------------------- wiring

function wire(): void {
  $('token-form').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const input = $('token-input') as HTMLInputElement;
    const button = $('token-form').querySelector('button') as HTMLButtonElement;
    const token = input.value.trim();
    if (!token) return;
    button.disabled = true;
    try {
      const me = await api<Me>('GET', '/me', token);
      setToken(token);
      account = me.account;
      showSignedIn(account);
      input.value = '';
      $('token-error').hidden = true;
      await route();
    } catch (e) {
      const err = $('token-error');
      err.textContent =
        e instanceof ApiError && e.status === 401
          ? 'That token was not accepted (401 Unauthorized). Check it and try again.'
          : `Could not sign in: ${describe(e)}`;
      err.hidden = false;
    } finally {
      button.disabled = false;
    }
  });

  $('sign-out').addEventListener('click', (ev) => {
    ev.preventDefault();
    setToken(null);
    if (location.hash && location.hash !== '#/') history.replaceState(null, '', '#/');
    signInView(null);
  });

  $('new-doc-form').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const token = getToken();
    if (!token) return signInView(null);
    const input = $('new-doc-title') as HTMLInputElement;
    const title = input.value.trim() || 'Untitled';
    const button = $('new-doc') as HTMLButtonElement;
    button.disabled = true;
    try {
      const doc = await api<DocumentInfo>('POST', '/documents', token, { title });
      input.value = '';
      location.hash = `#/d/${encodeURIComponent(doc.id)}`;
    } catch (e) {
      if (!handleAuthFailure(e)) showError(`Could not create the document: ${describe(e)}`);
    } finally {
      button.disabled = false;
    }
  });

  window.addEventListener('hashchange', () => void route());
  // Back on the list after a while elsewhere: documents may have been
  // shared with us, renamed or edited meanwhile.
  document.addEventListener('visibilitychange', () => {
    const visible = document.visibilityState === 'visible';
    if (visible && document.body.dataset.view === 'home') void route();
    // A hidden tab holds no event stream (six connections per server is
    // all a browser keeps); it catches up when shown again.
    if (session && visible) {
      session.feed.resume();
      session.plan.resume();
    } else if (session) {
      session.feed.pause();
      session.plan.pause();
    }
  });
  window.addEventListener('focus', () => {
    if (document.body.dataset.view === 'home') void route();
  });
}

wire();
void route();
