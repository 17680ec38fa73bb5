// The TypeScript connector SDK as a package, away from this repository: the
// tarball `npm pack` makes installs into a fresh project, where the
// README's "A Planner in 15 lines" (read out of the README, so the two
// cannot drift; only the server's address changed) compiles strictly
// against the installed types and replies in Chat on a real server; and a
// plain copy of the package folder installs and passes `npm run check`
// without docs/protocol/ beside it (it carries its schemas).

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { cp, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { promisify } from 'node:util';
import { documentWith } from '../lib/doc.mjs';
import { pairToFile, startExample } from '../lib/example.mjs';
import { sdkDir } from '../lib/sdk.mjs';
import { serverTest, waitFor } from '../lib/server.mjs';

const PATIENCE = 10000;
const NPM = ['--no-audit', '--no-fund', '--loglevel=error', '--prefer-offline'];

/** Runs `command` in `cwd`; its stdout, or a failure showing what it said. */
async function run(command, args, cwd) {
  try {
    return (await promisify(execFile)(command, args, { cwd, timeout: 300000, maxBuffer: 1 << 24 })).stdout;
  } catch (error) {
    throw new Error(`${command} ${args.join(' ')} failed in ${cwd}:\n${error.stdout}\n${error.stderr}`);
  }
}

/** The README's "A Planner in 15 lines" block. */
async function readmePlanner() {
  const readme = await readFile(path.join(sdkDir, 'README.md'), 'utf8');
  const section = readme.split('\n## A Planner in 15 lines\n')[1];
  assert.ok(section, 'the README has its "A Planner in 15 lines" section');
  const block = section.match(/^```ts\n([\s\S]*?)^```$/m);
  assert.ok(block, 'the section opens with a ```ts block');
  return block[1];
}

serverTest('the packed SDK installs into a fresh project where the README Planner compiles and replies in Chat', { timeout: 300000 }, async ({ server, onCleanup }) => {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'margin-sdk-package-'));
  onCleanup(() => rm(dir, { recursive: true, force: true }));
  const [packed] = JSON.parse(await run('npm', ['pack', '--json', '--pack-destination', dir, ...NPM], sdkDir));
  assert.ok(packed.files.every((f) => f.path.startsWith('dist/src/') || ['package.json', 'README.md'].includes(f.path)), 'only the built SDK is packed');

  const app = path.join(dir, 'app');
  await mkdir(app);
  await writeFile(path.join(app, 'package.json'), JSON.stringify({ name: 'a-planner', private: true, type: 'module' }));
  await run('npm', ['install', path.join(dir, packed.filename), ...NPM], app);
  const example = await readmePlanner();
  const source = example.replace("'http://127.0.0.1:7070'", JSON.stringify(server.baseUrl));
  assert.notEqual(source, example, 'the example names the server to replace');
  await writeFile(path.join(app, 'planner.ts'), source);
  // Strict, against the installed package's own declarations (the SDK's
  // TypeScript and Node types do the compiling).
  const modules = path.join(sdkDir, 'node_modules');
  await run(process.execPath, [
    path.join(modules, 'typescript', 'bin', 'tsc'),
    '--strict', '--target', 'es2022', '--module', 'nodenext', '--moduleResolution', 'nodenext',
    '--types', 'node', '--typeRoots', path.join(modules, '@types'), 'planner.ts',
  ], app);

  await pairToFile(server, 'alice', 'laptop', path.join(app, 'laptop.credential'));
  const { doc } = await documentWith(server, 'Plan', ['Intro.']);
  const planner = startExample(path.join(app, 'planner.js'), [], onCleanup, {}, app);
  await waitFor(
    async () => (await server.api('GET', `/documents/${doc.id}/planner`, { as: 'alice' })).body.state === 'available',
    PATIENCE,
    'the README Planner to link',
  ).catch((error) => assert.fail(`${error.message}; it said: ${planner.output}`));
  const said = await server.api('POST', `/documents/${doc.id}/chat`, { as: 'alice', body: { text: '@planner review it' } });
  assert.equal(said.status, 201, JSON.stringify(said.body));
  const replies = await waitFor(
    async () => {
      const res = await server.api('GET', `/documents/${doc.id}/chat`, { as: 'alice' });
      const texts = res.body.messages.filter((m) => m.kind === 'planner').map((m) => m.text);
      return texts.length > 0 && texts;
    },
    PATIENCE,
    'the reply in Chat',
  );
  assert.deepEqual(replies, ['Reviewed 1 blocks.']);
});

test('a plain copy of the package folder installs and passes npm run check on its own', { timeout: 300000 }, async (t) => {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'margin-sdk-copy-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  const copy = path.join(dir, 'connector');
  await cp(sdkDir, copy, {
    recursive: true,
    filter: (source) => !['node_modules', 'dist'].includes(path.basename(source)),
  });
  await run('npm', ['ci', ...NPM], copy);
  await run('npm', ['run', 'check'], copy);
  await run('npm', ['run', 'build'], copy);
});
