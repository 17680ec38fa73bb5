// Margin's browser editor: sign in with a token, list documents, and edit one
// document with Tiptap bound to the server's Yjs document over y-websocket,
// with its decision cards beside their paragraphs (decisions.ts), and its Chat
// and Planner status (chat.ts) with the Planner's plan (plan.ts) below.
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
import { DecisionCards } from './decisions';
import { ChatPanel } from './chat';
import { PlanPanel } from './plan';
import { byId as $ } from './dom';

const TOKEN_KEY = 'margin.token';

interface DocumentSummary {
  id: string;
  title: string;
  revision: number;
  role: string;
  /** Archived: read-only for everyone until its owner unarchives it. */
  archived?: boolean;
}

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
let session: {
  editor: Editor;
  provider: WebsocketProvider;
  ydoc: Y.Doc;
  cards: DecisionCards;
  chat: ChatPanel;
  plan: PlanPanel;
} | null = null;
let renderSeq = 0;

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

function closeSession(): void {
  if (!session) return;
  const { editor, provider, ydoc, cards, chat, plan } = session;
  session = null;
  chat.destroy();
  plan.destroy();
  cards.destroy();
  provider.destroy();
  editor.destroy();
  ydoc.destroy();
  $('editor').replaceChildren();
  setStatus(null);
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
  showOnly('signin');
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
  const me = await api<{ account: string }>('GET', '/me', token);
  account = me.account;
  showSignedIn(account);
  return account;
}

async function renderHome(token: string, seq: number): Promise<void> {
  closeSession();
  showError(null);
  try {
    await ensureAccount(token);
    const { documents } = await api<{ documents: DocumentSummary[] }>('GET', '/documents', token);
    if (seq !== renderSeq) return;
    const list = $('doc-list');
    list.replaceChildren(
      ...documents.map((d) => {
        const li = document.createElement('li');
        li.dataset.id = d.id;
        const a = document.createElement('a');
        a.href = `#/d/${encodeURIComponent(d.id)}`;
        const title = document.createElement('span');
        title.className = 'title';
        title.textContent = d.title || 'Untitled';
        const meta = document.createElement('span');
        meta.className = 'meta';
        meta.textContent = `${d.role} · revision ${d.revision}`;
        a.append(title, meta);
        li.append(a);
        return li;
      }),
    );
    show('doc-list-empty', documents.length === 0);
    showOnly('home');
  } catch (e) {
    if (seq !== renderSeq || handleAuthFailure(e)) return;
    showOnly(null);
    showError(`Could not load your documents: ${describe(e)}`);
  }
}

async function renderDocument(token: string, id: string, seq: number): Promise<void> {
  if (session && session.provider.roomname === `${id}/sync`) return;
  closeSession();
  showError(null);
  let name: string;
  let doc: DocumentSummary;
  try {
    name = await ensureAccount(token);
    doc = await api<DocumentSummary>('GET', `/documents/${encodeURIComponent(id)}`, token);
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

  $('doc-title').textContent = doc.title || 'Untitled';
  const readOnly = doc.role === 'viewer' || Boolean(doc.archived);
  $('doc-role').textContent = doc.archived
    ? 'archived · read-only'
    : readOnly
      ? 'viewer · read-only'
      : doc.role;
  showOnly('document');

  const ydoc = new Y.Doc();
  const scheme = location.protocol === 'https:' ? 'wss' : 'ws';
  const provider = new WebsocketProvider(`${scheme}://${location.host}/documents`, `${doc.id}/sync`, ydoc, {
    params: { token },
    // Tabs must not sync with each other behind the server's back.
    disableBc: true,
  });
  setStatus('connecting');
  provider.on('status', ({ status }) => {
    if (session?.provider === provider) setStatus(status);
  });
  provider.on('connection-close', (event) => {
    if (session?.provider !== provider || !event) return;
    // Codes from margin_protocol::sync::close; 44xx are final refusals.
    if (event.code === 4403) {
      setStatus('disconnected', 'edit refused: read-only access');
    } else if (event.code === 4400) {
      setStatus('disconnected', 'an edit could not be applied; reload the page');
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
    ],
  });
  const cards = new DecisionCards({
    editor,
    ydoc,
    docId: doc.id,
    token,
    readOnly,
    margin: $('decision-margin'),
    unanchoredSection: $('unanchored'),
    unanchoredList: $('unanchored-list'),
    onAuthFailure: handleAuthFailure,
  });
  const plan = new PlanPanel({ token, onAuthFailure: handleAuthFailure });
  const chat = new ChatPanel({
    docId: doc.id,
    token,
    readOnly,
    onAuthFailure: handleAuthFailure,
    onSession: (sid) => plan.follow(sid),
  });
  session = { editor, provider, ydoc, cards, chat, plan };
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
      const me = await api<{ account: string }>('GET', '/me', token);
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
      const doc = await api<DocumentSummary>('POST', '/documents', token, { title });
      input.value = '';
      location.hash = `#/d/${encodeURIComponent(doc.id)}`;
    } catch (e) {
      if (!handleAuthFailure(e)) showError(`Could not create the document: ${describe(e)}`);
    } finally {
      button.disabled = false;
    }
  });

  window.addEventListener('hashchange', () => void route());
}

wire();
void route();
