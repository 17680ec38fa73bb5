// The SDK's errors: why a link could not be opened (ConnectError) and why a
// tool call gave no output (ToolError). Each says what failed and why, in
// the words the Rust SDK uses, and carries what a caller acts on.

import type { Code, RefusalCode, ToolRefusal } from './wire.js';

/** What kind of failure a ConnectError is. */
export type ConnectErrorKind =
  /** The server address is not http(s):// or ws(s)://. */
  | 'address'
  /** The credential cannot go in a header. */
  | 'credential'
  /** The server refused the upgrade (`status`, and for a 401 `code`). */
  | 'refused'
  /** The credential file could not be read. */
  | 'credential-file'
  /** The credential file holds no credential. */
  | 'empty-credential-file'
  /** The connection failed. */
  | 'network'
  /** The server answered `hello` with a refusal (`code`). */
  | 'hello'
  /** The server closed or said something else instead of `welcome`. */
  | 'no-welcome';

/** Why a link could not be opened. */
export class ConnectError extends Error {
  override readonly name = 'ConnectError';

  private constructor(
    readonly kind: ConnectErrorKind,
    message: string,
    /** The HTTP status of a refused upgrade. */
    readonly status?: number,
    /**
     * A refused upgrade's error code (`unauthenticated`, `machine_revoked`,
     * `credential_expired`; none when the body was unreadable), or a refused
     * `hello`'s refusal code.
     */
    readonly code?: Code,
    /** The credential file, for the credential-file kinds. */
    readonly path?: string,
  ) {
    super(message);
  }

  static address(server: string): ConnectError {
    return new ConnectError(
      'address',
      `server address ${JSON.stringify(server)} must start with http://, https://, ws:// or wss://`,
    );
  }

  static credential(): ConnectError {
    return new ConnectError('credential', 'the credential is not a valid header value');
  }

  static refused(status: number, code: Code | undefined, message: string): ConnectError {
    return new ConnectError(
      'refused',
      `the server refused the link with HTTP ${status} (${code ?? 'no code'}): ${message}`,
      status,
      code,
    );
  }

  static credentialFile(path: string, why: string): ConnectError {
    return new ConnectError('credential-file', `cannot read the credential file ${path}: ${why}`, undefined, undefined, path);
  }

  static emptyCredentialFile(path: string): ConnectError {
    return new ConnectError(
      'empty-credential-file',
      `the credential file ${path} is empty; write the machine's credential (mgm_…) into it`,
      undefined,
      undefined,
      path,
    );
  }

  static network(why: string): ConnectError {
    return new ConnectError('network', `cannot reach the server: ${why}`);
  }

  static hello(code: RefusalCode, message: string): ConnectError {
    return new ConnectError('hello', `the server refused hello (${code}): ${message}`, undefined, code);
  }

  static noWelcome(why: string): ConnectError {
    return new ConnectError('no-welcome', `the server did not welcome the machine: ${why}`);
  }

  /**
   * Whether trying again cannot help: the address, credential or `hello` is
   * wrong, not the network. A missing credential file may yet be written.
   */
  get final(): boolean {
    switch (this.kind) {
      case 'address':
      case 'credential':
      case 'hello':
        return true;
      case 'refused':
        return this.status === 401 || this.status === 403 || this.status === 404;
      case 'credential-file':
      case 'empty-credential-file':
      case 'network':
      case 'no-welcome':
        return false;
    }
  }
}

/** What kind of failure a ToolError is. */
export type ToolErrorKind =
  /** The server refused the call (`refusal`); nothing changed. */
  | 'refused'
  /** The link closed before the result came, and will not bring it. */
  | 'link-closed'
  /** The result did not have the tool's output shape. */
  | 'output'
  /** The turn was stopped or superseded: the SDK sends nothing more for it. */
  | 'aborted';

/** Why a tool call (or a run report) gave no output. */
export class ToolError extends Error {
  override readonly name = 'ToolError';

  private constructor(
    readonly kind: ToolErrorKind,
    message: string,
    /** The server's refusal, for kind `refused`. */
    readonly refusal?: ToolRefusal,
  ) {
    super(message);
  }

  static refused(refusal: ToolRefusal): ToolError {
    return new ToolError('refused', `refused (${refusal.code}): ${refusal.message}`, refusal);
  }

  static linkClosed(why = 'the link closed before the result came'): ToolError {
    return new ToolError('link-closed', why);
  }

  static output(why: string): ToolError {
    return new ToolError('output', `unreadable tool output: ${why}`);
  }

  static aborted(why: string): ToolError {
    return new ToolError('aborted', why);
  }

  /** The refusal's code (`stale_revision`, `interrupted`, …), if refused. */
  get code(): string | undefined {
    return this.refusal?.code;
  }
}

/** Whether `error` is the server refusing a call, with `code` if given. */
export function isRefusal(error: unknown, code?: string): error is ToolError & { refusal: ToolRefusal } {
  return error instanceof ToolError && error.kind === 'refused' && (code === undefined || error.code === code);
}
