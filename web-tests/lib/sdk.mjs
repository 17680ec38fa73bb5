// The TypeScript connector SDK (sdk/typescript) as the tests use it: its
// built JavaScript, which `npm test` builds first (the `pretest` script).

import { existsSync } from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { repoRoot } from './server.mjs';

export const sdkDir = path.join(repoRoot, 'sdk', 'typescript');
const entry = path.join(sdkDir, 'dist', 'src', 'index.js');
if (!existsSync(entry)) {
  throw new Error(
    `the TypeScript SDK is not built (${entry} is missing): run \`npm ci && npm run build\` in sdk/typescript, or \`npm test\` here, which does`,
  );
}

export const {
  Connector,
  ConnectError,
  ToolError,
  isRefusal,
  isFinal,
  writeCredentialFile,
  backoff,
  silentLogger,
  RESUMABLE_SESSIONS,
  TOOLS,
} = await import(pathToFileURL(entry).href);

/** The built demo Planner example, run with `node`. */
export const demoPlannerScript = path.join(sdkDir, 'dist', 'examples', 'demo-planner.js');

/** The built LLM Planner example, run with `node`. */
export const llmPlannerScript = path.join(sdkDir, 'dist', 'examples', 'llm-planner.js');
