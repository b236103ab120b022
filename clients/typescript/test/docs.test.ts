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

/** The first ```ts block of the section headed `heading` of a Markdown file (docs/INTEGRATIONS.md). */
function snippet(heading: string, path = join(root, "..", "..", "docs", "INTEGRATIONS.md")): string {
  const doc = readFileSync(path, "utf8");
  const section = doc.split(/^## /m).find((s) => s.startsWith(`${heading}\n`));
  assert.ok(section, `${path} has no section "## ${heading}"`);
  const block = /^```ts\n([\s\S]*?)^```$/m.exec(section);
  assert.ok(block, `the section "${heading}" has no ts snippet`);
  return block[1];
}

/** Run `code` as a module of this package; what it printed. */
async function run(name: string, code: string): Promise<string[]> {
  const folder = join(root, "dist", "snippets");
  mkdirSync(folder, { recursive: true });
  const file = join(folder, `${name}.mjs`);
  writeFileSync(file, code);
  const printed: string[] = [];
  const log = console.log;
  console.log = (...args: unknown[]) => printed.push(args.join(" "));
  try {
    await import(pathToFileURL(file).href);
  } finally {
    console.log = log;
  }
  return printed;
}

test("the TypeScript snippet of docs/INTEGRATIONS.md runs", live, async () => {
  assert.deepEqual(await run("integrations-typescript", snippet("TypeScript")), ["Dana's favourite tea is genmaicha."]);
});

test("the quickstart of the package's README runs", live, async () => {
  const printed = await run("readme-quickstart", snippet("Quickstart", join(root, "README.md")));
  assert.ok(printed.some((line) => line.endsWith(" Dana's favourite tea is genmaicha.")), printed.join("\n"));
});
