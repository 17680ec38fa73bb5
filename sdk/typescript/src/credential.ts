// Where a connector keeps its machine's credential (SPEC L8): in memory, or
// in a private file that each renewal replaces atomically, so a Planner
// backend that restarts re-attaches with a credential still valid.

import { open, readFile, rename, stat, unlink } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { ConnectError } from './errors.js';
import type { Logger } from './log.js';

/** The machine's current credential, for the next connect. */
export interface CredentialKeeper {
  /** The credential to connect with now. */
  current(): Promise<string>;
  /** Keeps `credential` as the newest. Never throws: a failure is logged. */
  replace(credential: string): Promise<void>;
}

/** The newest credential, in memory. */
export class MemoryKeeper implements CredentialKeeper {
  #credential: string;

  constructor(credential: string) {
    this.#credential = credential;
  }

  async current(): Promise<string> {
    return this.#credential;
  }

  async replace(credential: string): Promise<void> {
    this.#credential = credential;
  }

  /** Never shows the secret. */
  toJSON(): string {
    return 'MemoryKeeper(…)';
  }
}

/** A file holding the newest credential, read at each connect. */
export class FileKeeper implements CredentialKeeper {
  constructor(
    readonly path: string,
    private readonly log: Logger,
  ) {}

  current(): Promise<string> {
    return readCredentialFile(this.path, this.log);
  }

  /**
   * Replaces the file atomically and privately. When it cannot be written
   * the file keeps the previous credential, still valid until its own
   * expiry, and the failure is logged.
   */
  async replace(credential: string): Promise<void> {
    try {
      await writeCredentialFile(this.path, credential);
      this.log.debug?.('renewed credential saved', { path: this.path });
    } catch (error) {
      this.log.warn('cannot save the renewed credential; the file keeps the previous one until it expires', {
        path: this.path,
        error: String(error),
      });
    }
  }
}

/** Reads a credential file: its content, trimmed. */
export async function readCredentialFile(path: string, log: Logger): Promise<string> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (error) {
    throw ConnectError.credentialFile(path, (error as Error).message);
  }
  const credential = text.trim();
  if (credential === '') throw ConnectError.emptyCredentialFile(path);
  if (process.platform !== 'win32') {
    const mode = (await stat(path).catch(() => null))?.mode ?? 0;
    if ((mode & 0o077) !== 0) {
      log.warn('the credential file is readable by others; it becomes private (0600) at the first renewal', { path });
    }
  }
  return credential;
}

/**
 * Writes `credential` to `path` atomically and privately: a temporary file
 * in the same folder, created with mode 0600, is written, flushed to disk
 * and renamed over `path`, so `path` always holds a whole credential and is
 * never readable by others. The folder is synced too, so the rename
 * survives a crash.
 */
export function writeCredentialFile(path: string, credential: string): Promise<void> {
  return writePrivateFile(path, `${credential}\n`);
}

let nextTemp = 0;

/** Writes `contents` to `path` as writeCredentialFile does: whole, private and durable. */
export async function writePrivateFile(path: string, contents: string): Promise<void> {
  const dir = dirname(path);
  const temp = join(dir, `.${basename(path)}.${process.pid}-${nextTemp++}.tmp`);
  try {
    // 'wx': the temporary file must not exist; the mode is masked by the
    // umask, so it is set again once open.
    const file = await open(temp, 'wx', 0o600);
    try {
      await file.chmod(0o600);
      await file.writeFile(contents, 'utf8');
      await file.sync();
    } finally {
      await file.close();
    }
    await rename(temp, path);
  } catch (error) {
    await unlink(temp).catch(() => {});
    throw error;
  }
  await syncDir(dir);
}

/** Makes a rename in `dir` durable, where the platform can. */
async function syncDir(dir: string): Promise<void> {
  if (process.platform === 'win32') return;
  try {
    const handle = await open(dir, 'r');
    try {
      await handle.sync();
    } finally {
      await handle.close();
    }
  } catch {
    // Some filesystems cannot sync a folder; the rename is as durable as they make it.
  }
}

/**
 * Whether a `credential` message's credential could be one of ours: one that
 * could never open a link must not replace one that does.
 */
export function plausibleCredential(credential: unknown): credential is string {
  return (
    typeof credential === 'string' &&
    credential.startsWith('mgm_') &&
    credential.length <= 128 &&
    /^[\x21-\x7e]+$/.test(credential)
  );
}
