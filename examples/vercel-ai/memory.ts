/**
 * Engram as long-term memory for a Vercel AI SDK agent: two tools, `remember` and `recall`,
 * for `generateText` / `streamText` / an `Agent` (README.md shows them wired to a model).
 */

import { tool } from "ai";
import { Engram } from "engram-client";
import { z } from "zod";

export interface MemoryToolsOptions {
  /** The bucket the tools read and write, by id or name (default: ENGRAM_BUCKET). */
  bucket?: string;
  /** The client (default: one from ENGRAM_URL and ENGRAM_TOKEN). */
  engram?: Engram;
  /** Written with each memory and searched for alone: one agent's memories (optional). */
  agentId?: string;
  /** How many tokens of memories `recall` may return (default 400). */
  tokenBudget?: number;
}

export function memoryTools(options: MemoryToolsOptions = {}) {
  const engram = options.engram ?? new Engram();
  const bucket = options.bucket ?? process.env.ENGRAM_BUCKET;
  if (!bucket) throw new Error("No bucket: pass bucket or set ENGRAM_BUCKET.");
  const agent = options.agentId;
  // A name is looked up once, at the first call (a bucket id is used as it is).
  let resolved: Promise<string> | undefined;
  const bucketId = () => (resolved ??= resolveBucket(engram, bucket));

  return {
    remember: tool({
      description:
        "Store a fact worth knowing in later conversations: something the user said about themselves, " +
        "a preference, a decision, a name or a date. One self-contained fact per call " +
        '("Ana\'s sister lives in Porto", not "she lives there").',
      inputSchema: z.object({
        fact: z.string().min(1).describe("The fact, written so that it makes sense on its own."),
      }),
      execute: async ({ fact }) => {
        const written = await engram.addMemory(await bucketId(), fact, { attributed_to: "user", agent_id: agent });
        return { id: written.id, alreadyKnown: written.deduplicated };
      },
    }),
    recall: tool({
      description:
        "Look up what is known from earlier conversations. Call it before answering anything that may " +
        "depend on the user's preferences, people they mentioned or past decisions.",
      inputSchema: z.object({
        question: z.string().min(1).describe("What to recall, as a natural-language question."),
      }),
      execute: async ({ question }) => {
        const found = await engram.search(await bucketId(), question, {
          token_budget: options.tokenBudget ?? 400,
          filters: agent ? { agent_id: agent } : undefined,
        });
        return found.results.map((hit) => ({ fact: hit.content, stated: hit.created_at }));
      },
    }),
  };
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

async function resolveBucket(engram: Engram, bucket: string): Promise<string> {
  if (UUID.test(bucket)) return bucket;
  for await (const candidate of engram.listBuckets()) if (candidate.name === bucket) return candidate.id;
  throw new Error(`No bucket named ${JSON.stringify(bucket)} is visible to this token.`);
}
