/**
 * The TypeScript snippet of docs/INTEGRATIONS.md runs as written (it is plain JavaScript too):
 * written into this package, where `import "engram-client"` resolves to the package itself, and
 * imported against the live server. Skipped without ENGRAM_URL.
 */

import assert from "node:assert/strict";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { pathToFileURL } from "node:url";

const root = new URL("../../", import.meta.url).pathname; // dist/test/ → the package
const live = { skip: process.env.ENGRAM_URL ? false : "ENGRAM_URL is not set: no server to test against" };

/** The first ```ts block of the docs/INTEGRATIONS.md section headed `heading`. */
function snippet(heading: string): string {
  const doc = readFileSync(join(root, "..", "..", "docs", "INTEGRATIONS.md"), "utf8");
  const section = doc.split(/^## /m).find((s) => s.startsWith(`${heading}\n`));
  assert.ok(section, `docs/INTEGRATIONS.md has no section "## ${heading}"`);
  const block = /^```ts\n([\s\S]*?)^```$/m.exec(section);
  assert.ok(block, `the section "${heading}" has no ts snippet`);
  return block[1];
}

test("the TypeScript snippet of docs/INTEGRATIONS.md runs", live, async () => {
  const folder = join(root, "dist", "snippets");
  mkdirSync(folder, { recursive: true });
  const file = join(folder, "integrations-typescript.mjs");
  writeFileSync(file, snippet("TypeScript"));
  const printed: unknown[] = [];
  const log = console.log;
  console.log = (...args: unknown[]) => printed.push(args.join(" "));
  try {
    await import(pathToFileURL(file).href);
  } finally {
    console.log = log;
  }
  assert.deepEqual(printed, ["Dana's favourite tea is genmaicha."]);
});
