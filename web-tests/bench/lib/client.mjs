// Raw y-websocket sync clients over `ws`, identical for every server: only the
// URL and the framing (lib/yproto.mjs) differ.
//
// Receiver: on open sends sync step 1 with an empty state vector, answers the
// server's step 1 with an empty step 2, counts as synced once the server's
// step 2 arrived, then hands every update message's payload to onUpdate.
// Writer: the same, but with a Y.Doc: it applies the server's step 2, answers
// step 1 with what it has, and sends each update its own edits produce.

import WebSocket from 'ws';
import * as Y from 'yjs';
import {
  readVaruint, syncMessage, EMPTY_STATE_VECTOR, EMPTY_UPDATE,
  SYNC_STEP1, SYNC_STEP2, SYNC_UPDATE,
} from './yproto.mjs';

export class RawClient {
  /**
   * endpoint: { url, framing }; opts: { localAddress, doc (writer's Y.Doc),
   * onUpdate(payload, now), onStep2(payload, now) }
   */
  constructor(endpoint, opts = {}) {
    this.endpoint = endpoint;
    this.framing = endpoint.framing;
    this.doc = opts.doc ?? null;
    this.onUpdate = opts.onUpdate ?? null;
    this.onStep2 = opts.onStep2 ?? null;
    this.localAddress = opts.localAddress;
    this.synced = false;
    this.closed = false;
    this.closeCode = null;
    this.messages = 0;
    this.ws = null;
    // When step 1 went out: step 2's arrival less this is the server's
    // answer to it, without the connection's set-up.
    this.step1At = NaN;
  }

  /** Opens the socket and syncs; resolves once the server's step 2 arrived. */
  connect(timeoutMs = 30000) {
    return new Promise((resolve, reject) => {
      const ws = new WebSocket(this.endpoint.url, {
        perMessageDeflate: false,
        localAddress: this.localAddress,
        handshakeTimeout: timeoutMs,
      });
      this.ws = ws;
      ws.binaryType = 'nodebuffer';
      const timer = setTimeout(() => {
        reject(new Error(`sync not complete after ${timeoutMs} ms (${this.endpoint.url})`));
        ws.terminate();
      }, timeoutMs);
      this.resolveSynced = () => { clearTimeout(timer); resolve(this); };
      ws.on('open', () => {
        for (const m of this.framing.hello()) ws.send(m);
        const sv = this.doc ? Y.encodeStateVector(this.doc) : EMPTY_STATE_VECTOR;
        ws.send(syncMessage(SYNC_STEP1, sv, this.framing.prefix));
        this.step1At = performance.now();
      });
      ws.on('message', (data) => this.#onMessage(data));
      ws.on('error', (e) => {
        if (!this.synced) { clearTimeout(timer); reject(e); }
      });
      ws.on('close', (code) => {
        this.closed = true;
        this.closeCode = code;
        if (!this.synced) { clearTimeout(timer); reject(new Error(`closed (${code}) before sync: ${this.endpoint.url}`)); }
      });
    });
  }

  #onMessage(data) {
    this.messages++;
    let off = this.framing.unwrap(data);
    if (off < 0) return;
    let type;
    [type, off] = readVaruint(data, off);
    if (!this.framing.syncTypes.has(type)) return; // awareness, auth, sync status
    let syncType;
    let len;
    [syncType, off] = readVaruint(data, off);
    [len, off] = readVaruint(data, off);
    const payload = data.subarray(off, off + len);
    const t = performance.now();
    if (syncType === SYNC_UPDATE) {
      if (this.onUpdate) this.onUpdate(payload, t);
    } else if (syncType === SYNC_STEP1) {
      const reply = this.doc ? Y.encodeStateAsUpdate(this.doc, payload) : EMPTY_UPDATE;
      this.ws.send(syncMessage(SYNC_STEP2, reply, this.framing.prefix));
    } else if (syncType === SYNC_STEP2) {
      if (this.doc) Y.applyUpdate(this.doc, payload, 'remote');
      if (this.onStep2) this.onStep2(payload, t);
      if (!this.synced) { this.synced = true; this.resolveSynced(); }
    }
  }

  sendUpdate(update) {
    this.ws.send(syncMessage(SYNC_UPDATE, update, this.framing.prefix));
  }

  close() {
    if (this.ws && this.ws.readyState <= WebSocket.OPEN) this.ws.terminate();
  }
}

/**
 * A writing client: one Y.Doc whose fragment 'prosemirror' holds a paragraph
 * (Y.XmlElement) with a Y.XmlText, as the editor shapes it; append(token)
 * adds the token at the end of that text and the update goes to the server.
 */
export class Writer {
  constructor(endpoint, opts = {}) {
    this.doc = new Y.Doc();
    this.client = new RawClient(endpoint, { ...opts, doc: this.doc });
    this.doc.on('update', (update, origin) => {
      if (origin !== 'remote' && this.client.synced) this.client.sendUpdate(update);
    });
    this.text = null;
  }

  async connect(label = 'writer') {
    await this.client.connect();
    const para = new Y.XmlElement('paragraph');
    this.text = new Y.XmlText(`${label}: `);
    para.insert(0, [this.text]);
    this.doc.getXmlFragment('prosemirror').push([para]);
    return this;
  }

  append(token) {
    this.text.insert(this.text.length, token);
  }

  close() {
    this.client.close();
    this.doc.destroy();
  }
}

/** Source addresses for client sockets: 127.0.0.1 .. 127.0.0.N, round robin. */
export function localAddresses(n) {
  return Array.from({ length: n }, (_, i) => `127.0.0.${i + 1}`);
}
