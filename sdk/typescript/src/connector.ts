// How to reach a server and keep a Planner linked to it: the Connector
// opens links (hello with features and manifest, welcome), and `run` serves
// a Handler across drops, linking again with backoff and resuming (SPEC
// L1–L8). `Linked.serve` serves one link only.

import { backoff, pause } from './backoff.js';
import { FileKeeper, MemoryKeeper, type CredentialKeeper } from './credential.js';
import { describeEnded, isFinal, type Ended } from './ended.js';
import { ConnectError } from './errors.js';
import type { Handler } from './handler.js';
import { stderrLogger, type Logger } from './log.js';
import { PROTOCOL_VERSION, RESUMABLE_SESSIONS } from './protocol.js';
import { Serving } from './serving.js';
import { LinkSocket } from './socket.js';
import type { Capabilities, ClientMessage, ServerMessage } from './wire.js';

/** How long opening a link (the upgrade, then `welcome`) may take. */
const CONNECT_TIMEOUT_MS = 10_000;
/**
 * How long a link may be silent before it counts as dropped: the server
 * sends a heartbeat every 15 s, and closes a link after three unanswered.
 */
const SILENCE_MS = 45_000;

export interface ConnectorOptions {
  /** The server, e.g. `http://127.0.0.1:7070` (http(s):// or ws(s)://). */
  server: string;
  /**
   * The machine's credential (`mgm_…`), kept in memory: each fresh one a
   * link sends replaces it for the next connect.
   */
  credential?: string;
  /**
   * A file holding the machine's credential instead (from `margin machine
   * pair --credential-file`): read at each connect, and replaced atomically
   * (mode 0600) by each fresh credential a link sends (SPEC L8).
   */
  credentialFile?: string;
  /**
   * A file that keeps the sessions this machine holds, the questions each
   * waits on, and each reply and run report the server has not yet
   * acknowledged (private, replaced atomically on each change; the format
   * every Margin SDK writes, margin_protocol::kept), so after the machine
   * itself restarts `run`'s first `resume` names them again and the
   * replies and reports go again after `resumed` (SPEC L3, L10, W2). A
   * turn or call running when it stopped is not kept.
   */
  heldFile?: string;
  /** Ask for `resumable-sessions` (default true, SPEC L1); false: a drop ends the link's sessions. */
  resumable?: boolean;
  /** Declare `planning: true` in the manifest (SPEC U1): sessions keep a durable plan. */
  planning?: boolean;
  /** The most run attempts each session keeps live at once (1–64; the server's default is 8). */
  runCapacity?: number;
  /** Called with each link's `welcome` in `run`. */
  onLink?: (welcome: Welcome) => void;
  /** Where warnings go (default: stderr). */
  logger?: Logger;
  /** How long opening a link may take (default 10 s). */
  connectTimeoutMs?: number;
  /** How long a link may be silent before it counts as dropped (default 45 s). */
  silenceTimeoutMs?: number;
}

/** What `welcome` said. */
export interface Welcome {
  /** The machine's name. */
  machine: string;
  /** What the server offers, including the features it granted. */
  capabilities: Capabilities;
}

/** Stops serving: `run` and `serve` detach when `signal` aborts. */
export interface ServeOptions {
  signal?: AbortSignal;
}

export class Connector {
  readonly server: string;
  readonly resumable: boolean;
  readonly #keeper: CredentialKeeper;
  readonly #options: ConnectorOptions;
  readonly #log: Logger;

  constructor(options: ConnectorOptions) {
    this.server = options.server;
    this.resumable = options.resumable ?? true;
    this.#options = options;
    this.#log = options.logger ?? stderrLogger;
    if (options.credentialFile !== undefined) {
      this.#keeper = new FileKeeper(options.credentialFile, this.#log);
    } else if (options.credential !== undefined) {
      this.#keeper = new MemoryKeeper(options.credential);
    } else {
      throw new TypeError('a Connector needs a credential or a credentialFile');
    }
  }

  /** The features this connector asks for in `hello`. */
  features(): string[] {
    return this.resumable ? [RESUMABLE_SESSIONS] : [];
  }

  /** The link's WebSocket address (`…/machine`). */
  url(): string {
    const base = this.server.replace(/\/+$/, '');
    const schemes: [string, string][] = [
      ['http://', 'ws://'],
      ['https://', 'wss://'],
      ['ws://', 'ws://'],
      ['wss://', 'wss://'],
    ];
    for (const [from, to] of schemes) {
      if (base.startsWith(from)) return `${to}${base.slice(from.length)}/machine`;
    }
    throw ConnectError.address(this.server);
  }

  /** Checks that a credential is at hand (the credential file exists and holds one), without connecting. */
  async checkCredential(): Promise<void> {
    await this.#keeper.current();
  }

  /**
   * Opens a link with the current credential (read from the credential
   * file, if there is one): connects, sends `hello`, waits for `welcome`.
   */
  async connect(options: ServeOptions = {}): Promise<Linked> {
    const url = this.url();
    const credential = await this.#keeper.current();
    if (!/^[\x20-\x7e]+$/.test(credential)) throw ConnectError.credential();
    const timeout = this.#options.connectTimeoutMs ?? CONNECT_TIMEOUT_MS;
    const socket = await LinkSocket.open(url, credential, timeout, options.signal);
    const hello: ClientMessage = { type: 'hello', protocol_version: PROTOCOL_VERSION, features: this.features() };
    if (this.#options.runCapacity !== undefined) hello.run_capacity = this.#options.runCapacity;
    if (this.#options.planning) hello.manifest = { planning: true };
    socket.send(hello);
    try {
      const welcome = await this.#welcome(socket, timeout, options.signal);
      return new Linked(socket, welcome, this);
    } catch (error) {
      socket.terminate();
      throw error;
    }
  }

  /**
   * Serves `handler` until `signal` aborts (then it detaches) or the server
   * ends the link for good (revoked, a refused `hello`, taken over with
   * 4409, or a credential it refuses), linking again after every other end
   * with a pause from 250 ms doubling to 30 s, with jitter. With resumable
   * sessions (the default) each link starts with `resume`: the server kept
   * the sessions through the drop, running turns carry on and their calls
   * in flight get their answers after `resumed`, held answers and Stops
   * arrive, and no answer is delivered twice (SPEC L3, L5, W1). Without,
   * each end aborts the running turns.
   */
  async run(handler: Handler, options: ServeOptions = {}): Promise<Ended> {
    const { signal } = options;
    const serving = this.serving(handler);
    let failures = 0;
    try {
      for (;;) {
        if (signal?.aborted) {
          serving.finish(this.resumable);
          return { kind: 'detached' };
        }
        try {
          const linked = await this.connect({ signal });
          failures = 0;
          this.#options.onLink?.(linked.welcome);
          const ended = await serving.drive(linked.socket, this.#keeper, signal, this.resumable);
          if (isFinal(ended)) return ended;
          this.#log.warn('link ended; linking again', { ended: describeEnded(ended) });
        } catch (error) {
          if (!(error instanceof ConnectError)) throw error;
          if (signal?.aborted) continue;
          if (error.final) {
            serving.finish(this.resumable);
            return { kind: 'refused', reason: error.message };
          }
          this.#log.warn('cannot link; trying again', { error: error.message });
        }
        await pause(backoff(failures), signal);
        failures++;
      }
    } finally {
      serving.close('the connector stopped serving');
      await serving.saved();
    }
  }

  /** @internal A Serving for `handler` with this connector's held file and bounds. */
  serving(handler: Handler): Serving {
    return new Serving(handler, {
      heldFile: this.#options.heldFile,
      log: this.#log,
      silenceMs: this.#options.silenceTimeoutMs ?? SILENCE_MS,
    });
  }

  /** @internal Where this connector keeps its credential; links renew it. */
  get keeper(): CredentialKeeper {
    return this.#keeper;
  }

  /** The first message after `hello`: `welcome`, or why not. */
  async #welcome(socket: LinkSocket, timeout: number, signal: AbortSignal | undefined): Promise<Welcome> {
    const read = await socket.read(timeout, signal);
    switch (read.kind) {
      case 'aborted':
        throw ConnectError.network('connecting was given up');
      case 'silent':
        throw ConnectError.noWelcome(`no answer to hello within ${timeout} ms`);
      case 'end': {
        const ended = read.ended;
        throw ConnectError.noWelcome(ended.kind === 'closed' ? `closed ${ended.code} (${ended.reason})` : 'closed');
      }
      case 'text':
        break;
    }
    let answer: ServerMessage;
    try {
      answer = JSON.parse(read.text) as ServerMessage;
    } catch (error) {
      throw ConnectError.noWelcome(`unreadable answer: ${(error as Error).message}`);
    }
    if (answer.type === 'welcome') return { machine: answer.machine, capabilities: answer.capabilities };
    if (answer.type === 'refusal') throw ConnectError.hello(answer.code, answer.message);
    throw ConnectError.noWelcome(`got ${read.text.slice(0, 200)}`);
  }
}

/** An open link, welcomed; `serve` runs it. */
export class Linked {
  constructor(
    /** @internal */ readonly socket: LinkSocket,
    /** What the server's `welcome` said. */
    readonly welcome: Welcome,
    private readonly connector: Connector,
  ) {}

  /**
   * Serves `handler` on this one link until the server closes it or
   * `signal` aborts (then the machine sends `detach`). Turns still running
   * when the link ends are aborted, and their calls fail; `Connector.run`
   * instead links again and resumes. Each fresh credential the server sends
   * is kept before the next message is read, so a link that ends has saved
   * the newest.
   */
  async serve(handler: Handler, options: ServeOptions = {}): Promise<Ended> {
    const serving = this.connector.serving(handler);
    const ended = await serving.drive(this.socket, this.connector.keeper, options.signal, false);
    serving.finish(false);
    serving.close('the link has ended');
    await serving.saved();
    return ended;
  }
}
