/**
 * Retries and errors without a server: a fake fetch answers as the server (or the network)
 * would, and records what was sent. The rules are the Python client's (docs/CLIENT.md, Retries).
 */

import assert from "node:assert/strict";
import { test } from "node:test";

import { APIConnectionError, APITimeoutError, Engram, RateLimited, ServiceUnavailable } from "../src/index.js";

type Step = Response | Error | "hang";

function scripted(steps: Step[]) {
  const sent: Request[] = [];
  const fetch = async (input: RequestInfo | URL, init?: RequestInit): Promise<Response> => {
    const request = input as Request;
    sent.push(request);
    const step = steps.shift();
    if (step === undefined) throw new Error("no more answers scripted");
    if (step === "hang") {
      // A server that never answers; the timer holds the event loop open as a socket would
      // (AbortSignal.timeout's own timer does not).
      return new Promise((_, reject) => {
        const open = setTimeout(() => reject(new Error("not aborted")), 10_000);
        init?.signal?.addEventListener("abort", () => {
          clearTimeout(open);
          reject(init.signal?.reason);
        });
      });
    }
    if (step instanceof Error) throw step;
    return step;
  };
  return { sent, fetch: fetch as typeof globalThis.fetch };
}

const json = (status: number, body: unknown, headers: Record<string, string> = {}) =>
  new Response(JSON.stringify(body), { status, headers: { "Content-Type": "application/json", ...headers } });
const refused = () => Object.assign(new TypeError("fetch failed"), { cause: { code: "ECONNREFUSED" } });
const reset = () => Object.assign(new TypeError("fetch failed"), { cause: { code: "ECONNRESET" } });
const memory = { id: "m1", content: "x" };
const options = { baseUrl: "http://engram.test/api/v1/", token: "egm_t", backoffMs: 1 };

test("a read is retried after a 503 and a broken connection", async () => {
  const { sent, fetch } = scripted([json(503, { detail: "busy", code: "unavailable" }), reset(), json(200, memory)]);
  const engram = new Engram({ ...options, fetch });
  assert.deepEqual(await engram.getMemory("m1"), memory);
  assert.equal(sent.length, 3);
  assert.equal(sent[0].url, "http://engram.test/api/v1/memories/m1");
  assert.equal(sent[0].headers.get("authorization"), "Bearer egm_t");
});

test("a write is not repeated after a 503 or a broken connection: it may have landed", async () => {
  for (const step of [json(503, { detail: "busy", code: "unavailable" }), reset()]) {
    const { sent, fetch } = scripted([step]);
    const engram = new Engram({ ...options, fetch });
    await assert.rejects(engram.addMemory("b1", "x"), step instanceof Error ? APIConnectionError : ServiceUnavailable);
    assert.equal(sent.length, 1);
  }
});

test("a search is a read: retried after a 502", async () => {
  const answer = { results: [], warnings: [], mode_used: "hybrid", total_tokens: 0 };
  const { sent, fetch } = scripted([json(502, "bad gateway"), json(200, answer)]);
  const found = await new Engram({ ...options, fetch }).search("b1", "tea", { limit: 3 });
  assert.deepEqual(found, answer);
  assert.equal(sent.length, 2);
  assert.deepEqual(await sent[1].json(), { limit: 3, query: "tea" });
});

test("any call is retried when it was certainly not carried out: refused, throttled, rolled back", async () => {
  const written = { results: [{ id: "m1", deduplicated: false, status: "stored" }] };
  const { sent, fetch } = scripted([
    refused(),
    json(429, { detail: "slow down", code: "throttled" }, { "Retry-After": "0" }),
    json(200, written),
  ]);
  const engram = new Engram({ ...options, fetch, retries: 3 });
  assert.equal((await engram.addMemory("b1", "x")).id, "m1");
  assert.equal(sent.length, 3);
  const rolledBack = scripted([json(409, { detail: "again", code: "retry" }), json(200, written)]);
  assert.equal((await new Engram({ ...options, fetch: rolledBack.fetch }).addMemory("b1", "x")).id, "m1");
});

test("a Retry-After longer than maxBackoffMs is not waited out", async () => {
  const { sent, fetch } = scripted([json(429, { detail: "slow down", code: "throttled" }, { "Retry-After": "60" })]);
  const error = await new Engram({ ...options, fetch }).getMemory("m1").catch((e) => e);
  assert.ok(error instanceof RateLimited);
  assert.deepEqual([error.retryAfter, error.status, error.code, error.detail], [60, 429, "throttled", "slow down"]);
  assert.equal(sent.length, 1);
});

test("retries: 0 sends once; the last error is thrown after the retries", async () => {
  const once = scripted([json(503, { detail: "busy", code: "unavailable" })]);
  await assert.rejects(new Engram({ ...options, fetch: once.fetch, retries: 0 }).getMemory("m1"), ServiceUnavailable);
  assert.equal(once.sent.length, 1);
  const thrice = scripted([reset(), reset(), reset()]);
  await assert.rejects(new Engram({ ...options, fetch: thrice.fetch }).getMemory("m1"), APIConnectionError);
  assert.equal(thrice.sent.length, 3);
});

test("a request past timeoutMs is an APITimeoutError", async () => {
  const { fetch } = scripted(["hang"]);
  await assert.rejects(new Engram({ ...options, fetch, timeoutMs: 50, retries: 0 }).getMemory("m1"), APITimeoutError);
});

test("an id cannot reach another endpoint: it is quoted into the path", async () => {
  const { sent, fetch } = scripted([json(200, memory)]);
  await new Engram({ ...options, fetch }).getMemory("../buckets/x");
  assert.equal(new URL(sent[0].url).pathname, "/api/v1/memories/..%2Fbuckets%2Fx");
});

test("no token: an error before any request", () => {
  const saved = process.env.ENGRAM_TOKEN;
  delete process.env.ENGRAM_TOKEN;
  try {
    assert.throws(() => new Engram({ baseUrl: "http://engram.test" }), /ENGRAM_TOKEN/);
  } finally {
    if (saved !== undefined) process.env.ENGRAM_TOKEN = saved;
  }
});
