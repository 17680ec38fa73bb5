// TypeScript types from Margin's JSON Schemas (docs/protocol/, generated
// from the margin-protocol crate), shared by every TypeScript package that
// speaks Margin's wire: the connector SDK (types.mjs here, from its copies
// in schemas/) and the editor (server/web/types.mjs, from docs/protocol/).
// The wire shapes are defined once, in Rust; this module only turns their
// schemas into types, the same way for both. It lives in the SDK's package
// so that the package, copied on its own, still generates and checks its
// types.
//
// It imports nothing outside Node: each caller passes the `compile` of its
// own json-schema-to-typescript (a dev dependency of that package), and the
// folder its schemas are in.
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';

/**
 * The TypeScript source declaring each schema of `names` (e.g.
 * `['ErrorBody', 'ServerMessage']`, read from `NAME.schema.json` in the
 * folder `schemas`) and every definition they refer to, each once. `banner`
 * opens the file. A definition two schemas spell differently is an error:
 * one name must mean one shape.
 */
export async function wireTypes({ compile, schemas, names, banner }) {
  // One root schema whose definitions are every named schema and everything
  // they refer to: shared definitions (Role, RunView, …) come out once.
  const defs = {};
  const from = {};
  const define = (key, value, where) => {
    if (key in defs && shape(defs[key]) !== shape(value)) {
      throw new Error(`${key} is defined differently in ${from[key]} and ${where}`);
    }
    defs[key] = value;
    from[key] = where;
  };
  for (const name of names) {
    const file = `${name}.schema.json`;
    const schema = bareRefs(JSON.parse(await readFile(join(schemas, file), 'utf8')));
    const { $defs = {}, $schema: _, ...own } = schema;
    for (const [key, value] of Object.entries($defs)) define(key, value, file);
    define(name, { ...own, title: name }, file);
  }
  const root = {
    $schema: 'https://json-schema.org/draft/2020-12/schema',
    title: 'Wire',
    type: 'object',
    properties: Object.fromEntries(names.map((name) => [name, { $ref: `#/$defs/${name}` }])),
    additionalProperties: false,
    $defs: defs,
  };
  const ts = await compile(root, 'Wire', {
    bannerComment: banner,
    unreachableDefinitions: true,
    additionalProperties: false,
    format: true,
    style: { singleQuote: true, printWidth: 120 },
  });
  // One name, one type: a shape declared again under a numbered name
  // (`RefusalCode1`) is one the generator failed to recognise.
  const declared = new Set([...ts.matchAll(/^export (?:type|interface) (\w+)/gm)].map((m) => m[1]));
  const twice = [...declared].filter((name) => /\d$/.test(name) && declared.has(name.replace(/\d+$/, '')));
  if (twice.length) throw new Error(`declared twice under numbered names: ${twice.join(', ')}`);
  // The root only gathers the others.
  return ts.replace(/export interface Wire \{[^}]*\}\n\n?/s, '');
}

/**
 * `schema` with every `$ref` alone in its object: a reference with a
 * description beside it (a field's own words) would be declared as a new
 * type each time (`RefusalCode1`, `RefusalCode2`, …), where the wire has
 * one.
 */
function bareRefs(schema) {
  if (Array.isArray(schema)) return schema.map(bareRefs);
  if (schema === null || typeof schema !== 'object') return schema;
  if (typeof schema.$ref === 'string') return { $ref: schema.$ref };
  return Object.fromEntries(Object.entries(schema).map(([key, value]) => [key, bareRefs(value)]));
}

/** A definition's shape: what it says, less the title a root schema adds. */
function shape({ title: _, ...rest }) {
  return JSON.stringify(rest);
}

/**
 * Writes `text` to `out` (shown as `label`), or with `check` fails (exit 1)
 * when `out` holds anything else, printing `fix`: what brings it up to date.
 */
export async function writeOrCheck({ out, label, text, check, fix }) {
  if (check) {
    const current = await readFile(out, 'utf8').catch(() => '');
    if (current !== text) {
      console.error(`${label} is stale: ${fix}`);
      process.exit(1);
    }
    return;
  }
  await writeFile(out, text);
  console.log(`wrote ${label}`);
}

/**
 * The TypeScript source of the constants of `module` (`link` or `sync`) in
 * `constants.json` in the folder `schemas` (generated from
 * `margin_protocol::constants`): each
 * scalar as an `export const` of its Rust name, each nested module
 * (`close`, `refused`) as a frozen object named in PascalCase (`Close`).
 * `banner` opens the file.
 */
export async function constantsModule({ schemas, module, banner }) {
  const all = JSON.parse(await readFile(join(schemas, 'constants.json'), 'utf8'));
  const table = all[module];
  if (!table) throw new Error(`constants.json has no module ${module}`);
  // A string as the packages quote theirs.
  const literal = (v) => (typeof v === 'string' && !/['\\]/.test(v) ? `'${v}'` : JSON.stringify(v));
  const out = [banner];
  for (const [name, value] of Object.entries(table)) {
    if (value !== null && typeof value === 'object') {
      const typeName = name[0].toUpperCase() + name.slice(1);
      const entries = Object.entries(value).map(([key, v]) => `  ${key}: ${literal(v)},`);
      out.push(`/** \`margin_protocol::${module}::${name}\`. */\nexport const ${typeName} = {\n${entries.join('\n')}\n} as const;\n`);
    } else {
      out.push(`/** \`margin_protocol::${module}::${name}\`. */\nexport const ${name} = ${literal(value)};\n`);
    }
  }
  return out.join('\n');
}
