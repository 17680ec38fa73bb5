// The real npm yjs + y-websocket client, run in Node against a margin server.

import * as Y from 'yjs';
import { WebsocketProvider } from 'y-websocket';
import WebSocket from 'ws';
import { waitFor } from './server.mjs';

export { Y };

/**
 * Connects a y-websocket client to document `docId` as `token`.
 * Returns { doc, provider, closes, errors, waitSynced(), destroy() }.
 * `closes` collects every close event's {code, reason} from the server.
 * `doc` is the Y.Doc to sync (a new one by default); `params` are added to
 * the URL's query (the server ignores what it does not know).
 */
export function connectClient(server, docId, token, { connect = true, doc = new Y.Doc(), params = {} } = {}) {
  const provider = new WebsocketProvider(`${server.wsBase}/documents`, `${docId}/sync`, doc, {
    params: { ...params, token },
    WebSocketPolyfill: WebSocket,
    // Node 20 has a global BroadcastChannel: without this, two clients in the
    // test process would sync with each other without the server.
    disableBc: true,
    connect,
    maxBackoffTime: 500,
  });
  const closes = [];
  const errors = [];
  provider.on('connection-close', (event) => {
    if (event) closes.push({ code: event.code, reason: String(event.reason ?? '') });
  });
  provider.on('connection-error', (event) => {
    errors.push(event?.message ?? String(event));
  });
  const client = {
    doc,
    provider,
    closes,
    errors,
    fragment: doc.getXmlFragment('prosemirror'),
    async waitSynced(timeoutMs = 5000) {
      await waitFor(() => provider.synced, timeoutMs, `client of ${docId} to sync`);
      return client;
    },
    texts() {
      return blockTexts(doc);
    },
    destroy() {
      provider.destroy();
      doc.destroy();
    },
  };
  return client;
}

/** Appends a top-level block (`kind` element holding `text`) to the 'prosemirror' fragment. */
export function appendBlock(doc, text, kind = 'paragraph', attrs = {}) {
  const fragment = doc.getXmlFragment('prosemirror');
  doc.transact(() => {
    const el = new Y.XmlElement(kind);
    for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
    fragment.push([el]);
    el.insert(0, [new Y.XmlText(text)]);
  });
}

/** The plain text of each top-level block of the 'prosemirror' fragment. */
export function blockTexts(doc) {
  return doc
    .getXmlFragment('prosemirror')
    .toArray()
    .map((node) => nodeText(node));
}

function nodeText(node) {
  if (node instanceof Y.XmlText) {
    return node
      .toDelta()
      .map((op) => (typeof op.insert === 'string' ? op.insert : ''))
      .join('');
  }
  if (node instanceof Y.XmlElement) return node.toArray().map(nodeText).join('');
  return '';
}

/**
 * Opens a raw WebSocket (no y-websocket) and reports how it ended: resolves
 * {opened, status, code} where status is the HTTP status of a refused upgrade.
 */
export function probeWebSocket(url, timeoutMs = 5000) {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url);
    const result = { opened: false, status: null, code: null, error: null };
    const timer = setTimeout(() => {
      ws.terminate();
      reject(new Error(`websocket probe of ${url} did not finish within ${timeoutMs} ms`));
    }, timeoutMs);
    const done = () => {
      clearTimeout(timer);
      resolve(result);
    };
    ws.on('unexpected-response', (_req, res) => {
      result.status = res.statusCode;
      res.resume();
      ws.terminate();
    });
    ws.on('open', () => {
      result.opened = true;
    });
    ws.on('error', (e) => {
      result.error = e.message;
    });
    ws.on('close', (code) => {
      result.code = code;
      done();
    });
  });
}
