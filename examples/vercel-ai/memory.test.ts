/**
 * The tools run offline (no model is called): their `execute` is called as the AI SDK would
 * call it after a model's tool call, against the live Engram of ENGRAM_URL / ENGRAM_TOKEN
 * (tests/clients/test_typescript_client.py starts one). Skipped without ENGRAM_URL.
 */

import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import { test } from "node:test";
import { fileURLToPath, pathToFileURL } from "node:url";

import { generateText, stepCountIs } from "ai";
import { MockLanguageModelV3 } from "ai/test";
import { Engram, PermissionDenied } from "engram-client";

import { memoryTools } from "./memory.js";

const live = { skip: process.env.ENGRAM_URL ? false : "ENGRAM_URL is not set: no server to test against" };
const call = { toolCallId: "call-1", messages: [] };

test("what the agent remembers in one conversation it recalls in the next", live, async () => {
  const engram = new Engram();
  const bucket = await engram.createBucket(`vercel-ai-${randomUUID().slice(0, 8)}`);
  const first = memoryTools({ bucket: bucket.id, agentId: "assistant-1" });
  const stored = await first.remember.execute!({ fact: "The user prefers window seats on trains." }, call);
  await first.remember.execute!({ fact: "The user's daughter is called Lina." }, call);
  assert.equal((stored as { alreadyKnown: boolean }).alreadyKnown, false);

  const later = memoryTools({ bucket: bucket.name, agentId: "assistant-1" }); // a new conversation; by name
  const recalled = (await later.recall.execute!({ question: "Which seat does the user like on trains?" }, call)) as Array<{ fact: string }>;
  assert.equal(recalled[0].fact, "The user prefers window seats on trains.");
  // Another agent's memories are not its own.
  const other = memoryTools({ bucket: bucket.id, agentId: "assistant-2" });
  assert.deepEqual(await other.recall.execute!({ question: "Which seat does the user like on trains?" }, call), []);
});

/** A model that answers with these turns in order: a tool call (name and input) or text. */
function scripted(...turns: Array<{ tool: string; input: object } | string>) {
  const usage = {
    inputTokens: { total: 1, noCache: 1, cacheRead: undefined, cacheWrite: undefined },
    outputTokens: { total: 1, text: 1, reasoning: undefined },
  };
  return new MockLanguageModelV3({
    doGenerate: turns.map((turn, i) => ({
      content: [typeof turn === "string"
        ? { type: "text" as const, text: turn }
        : { type: "tool-call" as const, toolCallId: `call-${i}`, toolName: turn.tool, input: JSON.stringify(turn.input) }],
      finishReason: { unified: typeof turn === "string" ? ("stop" as const) : ("tool-calls" as const), raw: undefined },
      usage,
      warnings: [],
    })),
  });
}

test("in generateText's tool loop, the model's calls reach Engram and their results reach the model", live, async () => {
  const bucket = await new Engram().createBucket(`vercel-ai-loop-${randomUUID().slice(0, 8)}`);
  const tools = memoryTools({ bucket: bucket.id });
  const told = await generateText({
    model: scripted({ tool: "remember", input: { fact: "The user is vegetarian." } }, "Noted."),
    tools,
    stopWhen: stepCountIs(3),
    prompt: "I'm vegetarian, by the way.",
  });
  assert.equal(told.text, "Noted.");
  const asked = await generateText({
    model: scripted({ tool: "recall", input: { question: "Is the user vegetarian?" } }, "You are vegetarian."),
    tools,
    stopWhen: stepCountIs(3),
    prompt: "Suggest a dinner for me.",
  });
  const [result] = asked.steps[0].toolResults;
  assert.deepEqual((result.output as Array<{ fact: string }>).map((r) => r.fact), ["The user is vegetarian."]);
});

test("the Vercel AI SDK snippet of docs/INTEGRATIONS.md runs, with a scripted model", live, async () => {
  const doc = readFileSync(fileURLToPath(new URL("../../../docs/INTEGRATIONS.md", import.meta.url)), "utf8");
  const section = doc.split(/^## /m).find((s) => s.startsWith("Vercel AI SDK\n"));
  const block = section && /^```ts\n([\s\S]*?)^```$/m.exec(section);
  assert.ok(block, "docs/INTEGRATIONS.md has no ts snippet under ## Vercel AI SDK");
  // Beside the compiled memory.js, which the snippet imports; `model` is the one free name.
  const file = fileURLToPath(new URL("./integrations-snippet.mjs", import.meta.url));
  writeFileSync(file, `const model = globalThis.engramSnippetModel;\n${block[1]}`);

  const engram = new Engram();
  const bucket = await engram.createBucket(`vercel-ai-doc-${randomUUID().slice(0, 8)}`);
  process.env.ENGRAM_BUCKET = bucket.id;
  (globalThis as Record<string, unknown>).engramSnippetModel = scripted(
    { tool: "remember", input: { fact: "The user is vegetarian." } },
    "How about a mushroom risotto?",
  );
  try {
    await import(pathToFileURL(file).href);
  } finally {
    delete process.env.ENGRAM_BUCKET;
  }
  const found = await engram.search(bucket.id, "Is the user vegetarian?");
  assert.deepEqual(found.results.map((h) => h.content), ["The user is vegetarian."]);
});

test("a read-only token recalls but its remember is refused", { skip: live.skip || (process.env.ENGRAM_READ_ONLY_TOKEN ? false : "no ENGRAM_READ_ONLY_TOKEN") }, async () => {
  const writer = new Engram();
  const bucket = await writer.createBucket(`vercel-ai-ro-${randomUUID().slice(0, 8)}`);
  await writer.addMemory(bucket.id, "The office wifi is called Meadow.");
  const tools = memoryTools({ bucket: bucket.id, engram: new Engram({ token: process.env.ENGRAM_READ_ONLY_TOKEN }) });
  await assert.rejects(tools.remember.execute!({ fact: "Refused." }, call) as Promise<unknown>, PermissionDenied);
  const recalled = (await tools.recall.execute!({ question: "What is the wifi called?" }, call)) as Array<{ fact: string }>;
  assert.deepEqual(recalled.map((r) => r.fact), ["The office wifi is called Meadow."]);
});
