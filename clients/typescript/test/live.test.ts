/**
 * The client against a live Engram: ENGRAM_URL and ENGRAM_TOKEN (a token with read and write
 * scopes), ENGRAM_READ_ONLY_TOKEN (the same tenant, read only) and ENGRAM_OTHER_TENANT_TOKEN
 * (another tenant). tests/clients/test_typescript_client.py starts a server on the test
 * database, issues these tokens and runs `npm test`; without ENGRAM_URL these tests are skipped.
 */

import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { before, describe, test } from "node:test";

import {
  AuthenticationError,
  Conflict,
  Engram,
  EngramError,
  NotFound,
  PermissionDenied,
  ValidationError,
  type Bucket,
} from "../src/index.js";

const env = process.env;
const live = { skip: env.ENGRAM_URL ? false : "ENGRAM_URL is not set: no server to test against" };

async function collect<T>(items: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const item of items) out.push(item);
  return out;
}

async function refusal(promise: Promise<unknown>): Promise<EngramError> {
  try {
    await promise;
  } catch (error) {
    assert.ok(error instanceof EngramError, `not an EngramError: ${error}`);
    return error;
  }
  assert.fail("the call was not refused");
}

describe("against a live server", live, () => {
  let engram: Engram;
  let main: Bucket;
  let notes: Bucket;

  before(async () => {
    engram = new Engram(); // ENGRAM_URL, ENGRAM_TOKEN
    const suffix = randomUUID().slice(0, 8);
    main = await engram.createBucket(`ts-main-${suffix}`, { description: "TypeScript client tests" });
    notes = await engram.createBucket(`ts-notes-${suffix}`);
  });

  test("a memory round-trips: write, read, search, change, history, delete, restore", async () => {
    const written = await engram.addMemory(main.id, "Dana's favourite tea is genmaicha.", {
      attributed_to: "user",
      hint_tags: ["tea"],
      metadata: { via: "ts" },
      created_at: new Date("2025-03-01T10:00:00Z"),
    });
    assert.equal(written.deduplicated, false);
    const again = await engram.addMemory(main.id, "Dana's favourite tea is genmaicha.");
    assert.deepEqual([again.id, again.deduplicated], [written.id, true]);

    const memory = await engram.getMemory(written.id);
    assert.equal(memory.content, "Dana's favourite tea is genmaicha.");
    assert.deepEqual([memory.attributed_to, memory.hint_tags, memory.metadata], ["user", ["tea"], { via: "ts" }]);
    assert.equal(memory.created_at, "2025-03-01T10:00:00Z");

    const found = await engram.search(main.id, "Which tea does Dana like?", { limit: 5, excerpt: "whole" });
    assert.equal(found.results[0].id, written.id);
    assert.equal(found.results[0].excerpt, null); // a short memory comes whole

    const changed = await engram.updateMemory(written.id, { content: "Dana's favourite tea is sencha.", hint_tags: null });
    assert.deepEqual([changed.content, changed.hint_tags], ["Dana's favourite tea is sencha.", null]);
    const history = await engram.getMemoryHistory(written.id);
    assert.ok(JSON.stringify(history).includes("genmaicha"), "the old text is in the history");

    const rated = await engram.rate(found.results[0], "useful", { query: "Which tea does Dana like?", run_id: "r1" });
    assert.deepEqual([rated.memory_id, rated.signal, rated.run_id], [written.id, "useful", "r1"]);

    await engram.deleteMemory(written.id);
    const gone = await refusal(engram.getMemory(written.id));
    assert.ok(gone instanceof NotFound);
    assert.deepEqual([gone.status, gone.code], [404, "not_found"]);
    assert.equal((await engram.restoreMemory(written.id)).id, written.id);
  });

  test("a batch comes back in order and a listing follows its pages", async () => {
    const facts = ["Oskar plays the cello.", "Oskar lives in Tartu.", "Oskar's cat is called Muri."];
    const results = await engram.addMemories(notes.id, [...facts, { content: "Oskar rows on Sundays.", run_id: "r1" }], {
      sequence: false,
    });
    assert.equal(results.length, 4);
    const listed = await collect(engram.listMemories(notes.id, { page_size: 1 }));
    assert.deepEqual(new Set(listed.map((m) => m.id)), new Set(results.map((r) => r.id)));
    const ofRun = await collect(engram.listMemories(notes.id, { run_id: "r1" }));
    assert.deepEqual(ofRun.map((m) => m.content), ["Oskar rows on Sundays."]);
    const buckets = await collect(engram.listBuckets({ pageSize: 1 }));
    assert.ok(buckets.some((b) => b.id === main.id) && buckets.some((b) => b.id === notes.id));
  });

  test("a listing and a search filter by metadata", async () => {
    const bucket = await engram.createBucket(`ts-meta-${randomUUID().slice(0, 8)}`);
    await engram.addMemories(bucket.id, [
      { content: "Project Apollo ships in May.", metadata: { project: "apollo", sprint: 3 } },
      { content: "Project Zeus ships in June.", metadata: { project: "zeus" } },
    ]);
    const listed = await collect(engram.listMemories(bucket.id, { metadata: { project: "apollo" } }));
    assert.deepEqual(listed.map((m) => m.content), ["Project Apollo ships in May."]);
    const found = await engram.search(bucket.id, "when does the project ship", { filters: { metadata: { project: "zeus" } } });
    assert.deepEqual(found.results.map((h) => h.content), ["Project Zeus ships in June."]);
  });

  test("a search spans the buckets it is given, in one ranking", async () => {
    const inMain = await engram.addMemory(main.id, "The lighthouse keeper is called Ines.");
    const inNotes = await engram.addMemory(notes.id, "The lighthouse was painted red in 2019.");
    const found = await engram.searchBuckets("lighthouse", { buckets: [main.id, notes.id] });
    assert.deepEqual(
      new Set(found.results.map((h) => `${h.id} ${h.bucket_id}`)),
      new Set([`${inMain.id} ${main.id}`, `${inNotes.id} ${notes.id}`]),
    );
    assert.deepEqual(found.buckets.map((b) => b.id), [main.id, notes.id]);
  });

  test("an export imports into another bucket", async () => {
    const source = await engram.createBucket(`ts-export-${randomUUID().slice(0, 8)}`);
    await engram.addMemories(source.id, ["Export line one.", "Export line two."]);
    const lines = await collect(engram.exportBucket(source.id));
    assert.deepEqual(lines.map((l) => l.content).sort(), ["Export line one.", "Export line two."]);
    const target = await engram.createBucket(`ts-import-${randomUUID().slice(0, 8)}`);
    const report = await engram.importBucket(target.id, [...lines, JSON.stringify({ content: "Imported as text." })]);
    assert.equal(report.imported, 3);
    const imported = await collect(engram.listMemories(target.id));
    assert.equal(imported.length, 3);
  });

  test("ratings travel with an export, once, and a bucket's learned ranking is read and reset", async () => {
    const source = await engram.createBucket(`ts-rated-${randomUUID().slice(0, 8)}`);
    const [memory] = await engram.addMemories(source.id, ["Dana drinks oolong."]);
    await engram.rate(memory.id, "useful", { query: "What does Dana drink?" });
    const lines = await collect(engram.exportBucket(source.id, { feedback: true }));
    assert.equal(lines.filter((l) => "feedback" in l).length, 1);
    const target = await engram.createBucket(`ts-rated-copy-${randomUUID().slice(0, 8)}`);
    assert.equal((await engram.importBucket(target.id, lines)).feedback_imported, 1);
    assert.equal((await engram.importBucket(target.id, lines)).feedback_unchanged, 1);

    const learned = await engram.getLearnedRanking(target.id);
    assert.deepEqual([learned.status, learned.ratings_now], ["none", 1]);
    assert.equal((await engram.resetLearnedRanking(target.id)).status, "none"); // nothing learned: left as it is
  });

  test("the bucket, source, graph and admin operations answer as typed, or refuse without the scope", async () => {
    const bucket = await engram.createBucket(`ts-ops-${randomUUID().slice(0, 8)}`);
    const renamed = await engram.updateBucket(bucket.id, { description: "renamed by the TS client" });
    assert.equal(renamed.description, "renamed by the TS client");
    const gone = await engram.addMemory(bucket.id, "A memory to delete.");
    await engram.addMemory(bucket.id, "A memory to keep.");
    await engram.deleteMemory(gone.id);
    assert.equal((await engram.getBucket(bucket.id)).memory_count, 1);
    assert.deepEqual((await collect(engram.listDeletedMemories(bucket.id))).map((m) => m.id), [gone.id]);

    const submitted = await engram.submitDocument(bucket.id, "Trip notes", "We land in Lisbon on 3 May. The hotel is in Alfama.");
    assert.equal((await engram.getSource(submitted.id)).title, "Trip notes");
    assert.deepEqual((await collect(engram.listSources(bucket.id, { kind: "document" }))).map((s) => s.id), [submitted.id]);
    assert.equal((await engram.deleteSource(submitted.id)).id, submitted.id);

    assert.deepEqual(await collect(engram.listEntities(bucket.id)), []); // the graph is the worker's: none runs here
    assert.deepEqual(await collect(engram.listEdges(bucket.id)), []);
    // Scope admin: a read-write token is refused and nothing is erased or merged.
    assert.ok((await refusal(engram.erase({ agent_id: "nobody", dry_run: true }))) instanceof PermissionDenied);
    assert.ok((await refusal(engram.mergeBucket(bucket.id, main.id, { dry_run: true }))) instanceof PermissionDenied);
    assert.ok((await refusal(engram.deleteBucket(bucket.id))) instanceof PermissionDenied);
  });

  test("errors carry the API's status, code, message and body", async () => {
    const invalid = await refusal(engram.addMemories(main.id, ["fine", " "]));
    assert.ok(invalid instanceof ValidationError);
    assert.equal(invalid.code, "invalid");
    assert.ok(JSON.stringify(invalid.errors).includes("blank"), JSON.stringify(invalid.body));

    const one = await engram.addMemory(main.id, "Bob drives a red Toyota.");
    const other = await engram.addMemory(main.id, "Bob drives a blue Fiat.");
    const clash = await refusal(engram.updateMemory(other.id, { content: "Bob drives a red Toyota." }));
    assert.ok(clash instanceof Conflict);
    assert.deepEqual([clash.code, clash.existingId], ["duplicate_content", one.id]);
    assert.match(clash.message, /\(duplicate_content, HTTP 409\)$/);

    const missing = await refusal(engram.getMemory(randomUUID()));
    assert.ok(missing instanceof NotFound);
    assert.throws(() => engram.getProfile(main.id, {}), TypeError);

    const bad = new Engram({ token: "egm_not_a_token" });
    const unauthenticated = await refusal(collect(bad.listBuckets()));
    assert.ok(unauthenticated instanceof AuthenticationError);
    assert.equal(unauthenticated.status, 401);
  });

  test("a read-only token searches but cannot write", { skip: env.ENGRAM_READ_ONLY_TOKEN ? false : "no ENGRAM_READ_ONLY_TOKEN" }, async () => {
    const written = await engram.addMemory(main.id, "Fiona keeps bees.");
    const reader = new Engram({ token: env.ENGRAM_READ_ONLY_TOKEN });
    const refused = await refusal(reader.addMemory(main.id, "A reader may not write."));
    assert.ok(refused instanceof PermissionDenied);
    assert.equal(refused.status, 403);
    assert.ok(await refusal(reader.deleteMemory(written.id)) instanceof PermissionDenied);
    const found = await reader.search(main.id, "Who keeps bees?");
    assert.deepEqual(found.results.map((h) => h.id), [written.id]);
    const texts = (await collect(engram.listMemories(main.id))).map((m) => m.content);
    assert.ok(!texts.includes("A reader may not write."));
  });

  test("another tenant's token sees nothing of this tenant and changes nothing", { skip: env.ENGRAM_OTHER_TENANT_TOKEN ? false : "no ENGRAM_OTHER_TENANT_TOKEN" }, async () => {
    const mine = await engram.addMemory(main.id, "Only my tenant reads this.");
    const outsider = new Engram({ token: env.ENGRAM_OTHER_TENANT_TOKEN });
    for (const call of [
      () => outsider.getMemory(mine.id),
      () => outsider.updateMemory(mine.id, { content: "Overwritten by an outsider." }),
      () => outsider.deleteMemory(mine.id),
      () => outsider.addMemory(main.id, "Into another tenant's bucket."),
      () => outsider.search(main.id, "tenant"),
      () => outsider.searchBuckets("tenant", { buckets: [main.id] }),
      () => outsider.getBucket(main.id),
    ]) {
      assert.ok((await refusal(call())) instanceof NotFound, String(call));
    }
    const theirs = await collect(outsider.listBuckets());
    assert.ok(!theirs.some((b) => b.id === main.id || b.id === notes.id));
    const everywhere = await outsider.searchBuckets("Only my tenant reads this");
    assert.ok(!everywhere.results.some((h) => h.id === mine.id));
    assert.equal((await engram.getMemory(mine.id)).content, "Only my tenant reads this.");
  });
});
