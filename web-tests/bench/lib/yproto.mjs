// The y-websocket sync protocol by hand (lib0 varuint / varUint8Array
// encoding), and the per-server framing around it. Kept tiny on purpose: the
// peer benchmark's clients are raw sockets so the harness costs the same for
// every server, and only the URL and the framing differ.
//
// y-websocket message:   varuint messageType (0 sync, 1 awareness, ...)
//   sync:                varuint syncType (0 step1, 1 step2, 2 update)
//                        varUint8Array payload (state vector / update)
// Hocuspocus prefixes every message with varString(documentName), and uses
// messageType 2 for auth, 4 for "sync reply" (a sync message that must not
// trigger another step 1) and 8 for sync-status acknowledgements.

export const MSG_SYNC = 0;
export const MSG_AWARENESS = 1;
export const SYNC_STEP1 = 0;
export const SYNC_STEP2 = 1;
export const SYNC_UPDATE = 2;

export function varuintLen(n) {
  let len = 1;
  while (n > 0x7f) { n = Math.floor(n / 128); len++; }
  return len;
}

export function writeVaruint(buf, off, n) {
  while (n > 0x7f) {
    buf[off++] = 0x80 | (n & 0x7f);
    n = Math.floor(n / 128);
  }
  buf[off++] = n;
  return off;
}

/** Reads a varuint at `off`; returns [value, nextOffset]. */
export function readVaruint(buf, off) {
  let n = 0;
  let mult = 1;
  for (;;) {
    if (off >= buf.length) throw new Error('truncated varuint');
    const b = buf[off++];
    n += (b & 0x7f) * mult;
    if (b < 0x80) return [n, off];
    mult *= 128;
    if (mult > 2 ** 53) throw new Error('varuint too long');
  }
}

/** messageSync + syncType + varUint8Array(payload), as one Buffer. */
export function syncMessage(syncType, payload, prefix = null) {
  const pre = prefix ? prefix.length : 0;
  const len = pre + 2 + varuintLen(payload.length) + payload.length;
  const buf = Buffer.allocUnsafe(len);
  let off = 0;
  if (prefix) { prefix.copy(buf, 0); off = pre; }
  buf[off++] = MSG_SYNC;
  buf[off++] = syncType;
  off = writeVaruint(buf, off, payload.length);
  buf.set(payload, off);
  return buf;
}

/** varString: varuint byte length + UTF-8 bytes. */
export function varString(s) {
  const bytes = Buffer.from(s, 'utf8');
  const buf = Buffer.allocUnsafe(varuintLen(bytes.length) + bytes.length);
  const off = writeVaruint(buf, 0, bytes.length);
  bytes.copy(buf, off);
  return buf;
}

export const EMPTY_STATE_VECTOR = Uint8Array.of(0); // no clients
export const EMPTY_UPDATE = Uint8Array.of(0, 0); // no structs, empty delete set

/**
 * Framing: how a sync payload travels to and from one server.
 *   prefix          bytes put before every message (Hocuspocus: doc name)
 *   hello()         messages to send first on open (Hocuspocus: auth)
 *   unwrap(buf)     -> offset where the y-websocket message starts, or -1
 *                   when the message is not for this document
 *   syncTypes       message types that carry a sync message
 */
export function plainFraming() {
  return { prefix: null, hello: () => [], unwrap: () => 0, syncTypes: new Set([MSG_SYNC]) };
}

export function hocuspocusFraming(docName, token = 'bench') {
  const prefix = varString(docName);
  return {
    prefix,
    hello: () => {
      // [docName][Auth=2][Token=0][varString token]
      const t = varString(token);
      return [Buffer.concat([prefix, Buffer.of(2, 0), t])];
    },
    unwrap: (buf) => {
      const [len, off] = readVaruint(buf, 0);
      // One document per socket in this harness: no need to compare names.
      return off + len;
    },
    // 4 = SyncReply, a sync message the server sends in answer to ours.
    syncTypes: new Set([MSG_SYNC, 4]),
  };
}
