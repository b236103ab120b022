/**
 * The committed types (src/schema.ts) are what openapi-typescript makes of the committed schema
 * (openapi.json): a hand edit, or a schema regenerated without its types, fails here.
 * (tests/clients/test_typescript_schema.py holds openapi.json to the server's current schema.)
 */

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";

const root = new URL("../../", import.meta.url).pathname; // dist/test/ → the package

test("src/schema.ts is what openapi-typescript generates from openapi.json", () => {
  const scratch = mkdtempSync(join(tmpdir(), "engram-ts-schema-"));
  try {
    const generated = join(scratch, "schema.ts");
    execFileSync(join(root, "node_modules", ".bin", "openapi-typescript"), ["openapi.json", "-o", generated], {
      cwd: root,
      stdio: "pipe",
    });
    const committed = readFileSync(join(root, "src", "schema.ts"), "utf8");
    assert.ok(
      readFileSync(generated, "utf8") === committed,
      "src/schema.ts is stale: run `npm run generate` in clients/typescript (README.md)",
    );
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
});
