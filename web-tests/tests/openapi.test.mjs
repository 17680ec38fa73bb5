// SPEC O1: the committed OpenAPI description (docs/openapi.json, generated
// from the server's route table and the protocol crate's schemas) is a
// valid OpenAPI 3.1 document by an independent validator, every $ref in it
// resolves, and the running server serves the same document.

import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { Validator } from '@seriousme/openapi-schema-validator';
import { repoRoot, serverTest } from '../lib/server.mjs';

const committed = path.join(repoRoot, 'docs', 'openapi.json');

serverTest('the OpenAPI description is valid OpenAPI 3.1 and is what the server serves', { accounts: ['alice'] }, async ({ server }) => {
  const text = await readFile(committed, 'utf8');
  const document = JSON.parse(text);
  assert.equal(document.openapi, '3.1.0');
  const validator = new Validator();
  const result = await validator.validate(document);
  assert.equal(result.valid, true, `invalid OpenAPI: ${JSON.stringify(result.errors, null, 2)}`);
  assert.equal(validator.version, '3.1');

  // Every reference names a component that exists.
  const names = new Set(Object.keys(document.components.schemas));
  const missing = [...text.matchAll(/"\$ref": "#\/components\/schemas\/([^"]+)"/g)]
    .map((m) => m[1])
    .filter((name) => !names.has(name));
  assert.deepEqual([...new Set(missing)], [], 'every $ref resolves');
  // A few routes an application needs, with their shapes.
  assert.equal(document.paths['/documents/{id}/events'].get.responses['200'].content['text/event-stream'].schema.$ref, '#/components/schemas/DocumentEvent');
  assert.equal(document.paths['/documents/{id}'].patch.requestBody.content['application/json'].schema.$ref, '#/components/schemas/RenameDocument');

  const served = await fetch(`${server.baseUrl}/openapi.json`);
  assert.equal(served.status, 200);
  assert.equal(await served.text(), text, 'the server serves the committed file');
});
