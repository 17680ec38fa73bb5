// Where the SDK says what it could not do but carried on from: a refused
// message, a credential it could not save, a link that ended. A Planner
// passes its own Logger, or gets one that writes warnings to stderr.

/** Receives the SDK's warnings (and, if it wants them, details). */
export interface Logger {
  warn(message: string, fields?: Record<string, unknown>): void;
  debug?(message: string, fields?: Record<string, unknown>): void;
}

/** Warnings to stderr, one line each; no details. */
export const stderrLogger: Logger = {
  warn(message, fields) {
    const detail = fields && Object.keys(fields).length > 0 ? ` ${JSON.stringify(fields)}` : '';
    process.stderr.write(`margin connector: ${message}${detail}\n`);
  },
};

/** Says nothing. */
export const silentLogger: Logger = { warn() {} };
