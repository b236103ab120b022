/**
 * `Engram`: a thin, typed client of Engram's HTTP API on openapi-fetch, with the operations,
 * retries and errors of the Python client (`AsyncEngram`, docs/CLIENT.md). Request bodies and
 * answers are typed by `schema.ts`, which openapi-typescript generates from the server's OpenAPI
 * schema (`npm run generate`); their fields keep the API's names (`attributed_to`, `hint_tags`).
 */

import createClient, { type Client } from "openapi-fetch";

import { APIConnectionError, APITimeoutError, EngramError, errorFor } from "./errors.js";
import { type CallKind, RetryPolicy, type RetryOptions, isTimeout, isTransportError } from "./retry.js";
import type { components, paths } from "./schema.js";

export const VERSION = "0.1.0";
export const DEFAULT_URL = "http://127.0.0.1:8000";
export const DEFAULT_TIMEOUT_MS = 30_000;

type Schemas = components["schemas"];
export type Bucket = Schemas["BucketOutput"];
export type BucketDetail = Schemas["BucketDetailOutput"];
export type MergeResult = Schemas["BucketMergeOut"];
export type WriteResult = Schemas["IngestResult"];
export type Memory = Schemas["MemoryDetailOut"];
export type MemoryListed = Schemas["MemoryOut"];
export type DeletedMemory = Schemas["DeletedMemoryOut"];
export type History = Schemas["MemoryHistory"];
export type SearchResult = Schemas["SearchOut"];
export type SearchHit = Schemas["SearchHitOut"];
export type CrossSearchResult = Schemas["CrossSearchOut"];
export type ImportResult = Schemas["ImportOut"];
export type SourceSubmitted = Schemas["SourceSubmitted"];
export type Source = Schemas["SourceOut"];
export type SourceDetail = Schemas["SourceDetailOut"];
export type SourceDeleted = Schemas["SourceDeleted"];
export type Entity = Schemas["EntityOut"];
export type EntityDetail = Schemas["EntityDetailOut"];
export type Edge = Schemas["EdgeOut"];
export type EdgeMemories = Schemas["EdgeMemories"];
export type Profile = Schemas["ProfileOut"];
export type ErasureResult = Schemas["ErasureOut"];
export type Feedback = Schemas["FeedbackOut"];
export type Block = Schemas["BlockOut"];
export type BlockVersion = Schemas["BlockVersionOut"];
export type LearnedRanking = Schemas["LearnedRankingOut"];
/** What a change of a block is based on: its `etag` (or the `Block` read), or `"*"` for any version. */
export type IfMatch = string | { etag: string };

/** A time, as a Date or an ISO 8601 string. */
export type Time = Date | string;
type Timed<T> = { [K in keyof T]: K extends `${string}_at` | "as_of" | "now" ? T[K] | Date : T[K] };

export type MemoryInput = Timed<Schemas["MemoryInRequest"]>;
export type MemoryFields = Omit<MemoryInput, "content">;
export type MemoryChanges = Timed<Schemas["PatchedMemoryUpdateInRequest"]>;
// The server fills in what is left out (mode, explain, excerpt have defaults).
export type SearchOptions = Timed<Partial<Omit<Schemas["SearchRequest"], "query">>>;
export type SearchAcrossOptions = Timed<Partial<Omit<Schemas["SearchAcrossBucketsRequest"], "query">>>;
export type ListMemoriesOptions = Timed<
  Omit<NonNullable<paths["/api/v1/buckets/{bucket_id}/memories"]["get"]["parameters"]["query"]>, "cursor" | "hint_tags">
> & { hint_tags?: string[] };
export type JsonLine = Record<string, unknown> | string;

export interface EngramOptions extends RetryOptions {
  /** The server, with or without `/api/v1` (default: `ENGRAM_URL`, else http://127.0.0.1:8000). */
  baseUrl?: string;
  /** An API token, `egm_…` (default: `ENGRAM_TOKEN`). */
  token?: string;
  /** Per request, in milliseconds (default 30,000). */
  timeoutMs?: number;
  /** The fetch to send requests with (default: the global one). */
  fetch?: typeof globalThis.fetch;
}

interface Answer<T> {
  data?: T;
  error?: unknown;
  response: Response;
}
type RequestExtra = { fetch: (request: Request) => Promise<Response> };

/**
 * A client of Engram's HTTP API. Every method returns a promise of the API's answer (typed from
 * the schema); the `list*` methods and `exportBucket` return async iterators that fetch the next
 * page (or line) as the iteration reaches it. An error answer throws an `EngramError` subclass.
 */
export class Engram {
  /** The server's root URL (without `/api/v1`). */
  readonly baseUrl: string;
  readonly retry: RetryPolicy;
  /** The typed openapi-fetch client underneath, for endpoints this layer does not wrap. */
  readonly api: Client<paths>;
  private readonly timeoutMs: number;
  private readonly fetchImpl: typeof globalThis.fetch;

  constructor(options: EngramOptions = {}) {
    const env = typeof process !== "undefined" ? process.env : {};
    const url = (options.baseUrl || env.ENGRAM_URL || DEFAULT_URL).trim().replace(/\/+$/, "");
    this.baseUrl = url.replace(/\/api\/v1$/, "");
    const token = options.token || env.ENGRAM_TOKEN;
    if (!token) throw new EngramError("No API token: pass token or set ENGRAM_TOKEN.");
    this.retry = new RetryPolicy(options);
    this.timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    this.fetchImpl = options.fetch ?? globalThis.fetch;
    this.api = createClient<paths>({
      baseUrl: this.baseUrl,
      headers: {
        Authorization: `Bearer ${token}`,
        Accept: "application/json",
        "User-Agent": `engram-client-ts/${VERSION} node/${typeof process !== "undefined" ? process.versions.node : "?"}`,
      },
      fetch: this.timed(this.timeoutMs).fetch,
    });
  }

  // --- plumbing ---------------------------------------------------------------------------------

  private timed(timeoutMs: number): RequestExtra {
    return { fetch: (request: Request) => this.fetchImpl(request, { signal: AbortSignal.timeout(timeoutMs) }) };
  }

  /** Send a call (again, as the retry policy allows) and return its answer's body, or throw. */
  private async run<T>(kind: CallKind, send: () => Promise<Answer<T>>, what: string): Promise<T> {
    for (let attempt = 0; ; attempt++) {
      let answer: Answer<T>;
      let wait: number | null;
      try {
        answer = await send();
      } catch (error) {
        if (!isTransportError(error)) throw error;
        wait = this.retry.delay(attempt, kind, { error });
        if (wait === null) {
          const Class = isTimeout(error) ? APITimeoutError : APIConnectionError;
          const reason = error instanceof Error ? ((error.cause as Error | undefined)?.message ?? error.message) : String(error);
          throw new Class(`${what}: ${reason}`, { cause: error });
        }
        await sleep(wait);
        continue;
      }
      if (answer.response.ok) return answer.data as T;
      wait = this.retry.delay(attempt, kind, { response: answer.response, body: answer.error });
      if (wait === null) throw errorFor(answer.response.status, answer.error, answer.response.headers);
      await sleep(wait);
    }
  }

  private read<T>(send: () => Promise<Answer<T>>, what: string): Promise<T> {
    return this.run({ idempotent: true }, send, what);
  }

  private write<T>(send: () => Promise<Answer<T>>, what: string): Promise<T> {
    return this.run({ idempotent: false }, send, what);
  }

  /** Every row of a paginated listing, following each page's `next` link (its query only). */
  private async *pages<T>(path: string, params: { path?: Record<string, string>; query?: Record<string, unknown> }) {
    let query: Record<string, unknown> | null = params.query ?? {};
    while (query !== null) {
      const current: Record<string, unknown> = query;
      const page = await this.read<{ results?: T[]; next?: string | null }>(
        () => (this.api.GET as any)(path, { params: { path: params.path, query: current } }),
        `GET ${path}`,
      );
      for (const row of page.results ?? []) yield row;
      query = nextQuery(page.next);
    }
  }

  // --- buckets ----------------------------------------------------------------------------------

  /** Every bucket the token sees (one, for a token restricted to a bucket), page by page. */
  listBuckets(options: { pageSize?: number } = {}): AsyncGenerator<Bucket> {
    return this.pages<Bucket>("/api/v1/buckets", { query: clean({ limit: options.pageSize }) });
  }

  /** Create a bucket (scope `write`); `Conflict` if the name exists. */
  createBucket(name: string, options: { description?: string } = {}): Promise<Bucket> {
    return this.write(() => this.api.POST("/api/v1/buckets", { body: clean({ ...options, name }) as Schemas["BucketCreateRequest"] }), "POST /buckets");
  }

  /** A bucket, with its `memory_count` and `pending_enrichment`. */
  getBucket(bucketId: string): Promise<BucketDetail> {
    return this.read(() => this.api.GET("/api/v1/buckets/{bucket_id}", { params: { path: { bucket_id: bucketId } } }),
      "GET /buckets/{id}");
  }

  /** Rename a bucket, or change its description or `retention_days` (only what is given). */
  updateBucket(bucketId: string, changes: Schemas["PatchedBucketUpdateRequest"]): Promise<Bucket> {
    return this.write(
      () => this.api.PATCH("/api/v1/buckets/{bucket_id}", { params: { path: { bucket_id: bucketId } }, body: changes }),
      "PATCH /buckets/{id}",
    );
  }

  /** Delete a bucket and its memories for good (scope `admin`). */
  async deleteBucket(bucketId: string): Promise<void> {
    await this.run({ idempotent: true },
      () => this.api.DELETE("/api/v1/buckets/{bucket_id}", { params: { path: { bucket_id: bucketId } } }),
      "DELETE /buckets/{id}");
  }

  /** Move every memory of `bucketId` into `targetBucketId` (scope `admin`); `dry_run` only counts. */
  mergeBucket(bucketId: string, targetBucketId: string, options: { remove_source?: boolean; dry_run?: boolean } = {}): Promise<MergeResult> {
    return this.write(
      () => this.api.POST("/api/v1/buckets/{bucket_id}/merge", {
        params: { path: { bucket_id: bucketId } },
        body: { target_bucket_id: targetBucketId, ...options } as Schemas["BucketMergeInRequest"],
      }),
      "POST /buckets/{id}/merge",
    );
  }

  /**
   * What the bucket's ranking learned from its ratings: the settings in use, when, on how many
   * ratings, and their held-back score against the defaults' (docs/RETRIEVAL.md).
   */
  getLearnedRanking(bucketId: string): Promise<LearnedRanking> {
    return this.read(
      () => this.api.GET("/api/v1/buckets/{bucket_id}/learned-ranking", { params: { path: { bucket_id: bucketId } } }),
      "GET /buckets/{id}/learned-ranking",
    );
  }

  /** Forget what the bucket's ranking learned (scope `write`): the defaults until its ratings change. Audited. */
  resetLearnedRanking(bucketId: string): Promise<LearnedRanking> {
    return this.run({ idempotent: true },
      () => this.api.DELETE("/api/v1/buckets/{bucket_id}/learned-ranking", { params: { path: { bucket_id: bucketId } } }),
      "DELETE /buckets/{id}/learned-ranking");
  }

  // --- memories ---------------------------------------------------------------------------------

  /** Write one memory; if the bucket holds the same text, its id with `deduplicated: true`. */
  async addMemory(bucketId: string, content: string, fields: MemoryFields = {}): Promise<WriteResult> {
    const answer = await this.writeMemories(bucketId, { ...jsonable(fields), content });
    return answer.results[0];
  }

  /**
   * Write a batch (up to 1,000) in one transaction: strings, or objects with the fields of
   * `addMemory`. Results come in input order. `sequence: false`: unrelated facts, not a sequence
   * whose members give each other context.
   */
  async addMemories(bucketId: string, memories: Iterable<string | MemoryInput>, options: { sequence?: boolean } = {}): Promise<WriteResult[]> {
    const items = Array.from(memories, (m) => (typeof m === "string" ? { content: m } : jsonable(m)));
    const answer = await this.writeMemories(bucketId, clean({ memories: items, sequence: options.sequence }));
    return answer.results;
  }

  private writeMemories(bucketId: string, body: Record<string, unknown>): Promise<Schemas["IngestResponse"]> {
    return this.write(
      () => this.api.POST("/api/v1/buckets/{bucket_id}/memories", {
        params: { path: { bucket_id: bucketId } },
        body: body as Schemas["MemoryWriteRequest"],
      }),
      "POST /buckets/{id}/memories",
    );
  }

  getMemory(memoryId: string): Promise<Memory> {
    return this.read(() => this.api.GET("/api/v1/memories/{memory_id}", { params: { path: { memory_id: memoryId } } }),
      "GET /memories/{id}");
  }

  /**
   * Change the fields given (`null` clears one); the previous values go to the memory's history.
   * New content colliding with another memory: `Conflict` with `code === "duplicate_content"` and `existingId`.
   */
  updateMemory(memoryId: string, changes: MemoryChanges): Promise<Memory> {
    return this.write(
      () => this.api.PATCH("/api/v1/memories/{memory_id}", {
        params: { path: { memory_id: memoryId } },
        body: jsonable(changes) as Schemas["PatchedMemoryUpdateInRequest"],
      }),
      "PATCH /memories/{id}",
    );
  }

  /** Delete a memory; it stays restorable for its bucket's `retention_days`. */
  async deleteMemory(memoryId: string): Promise<void> {
    await this.run({ idempotent: true },
      () => this.api.DELETE("/api/v1/memories/{memory_id}", { params: { path: { memory_id: memoryId } } }),
      "DELETE /memories/{id}");
  }

  /** Put a deleted memory back, under the same id. */
  restoreMemory(memoryId: string): Promise<Memory> {
    return this.write(
      () => this.api.POST("/api/v1/memories/{memory_id}/restore", { params: { path: { memory_id: memoryId } } }),
      "POST /memories/{id}/restore",
    );
  }

  /**
   * Say that a memory (its id, or a hit of a search) was `useful` for `query` or `irrelevant`
   * to it. Later searches of its bucket lift a memory rated useful for questions like `query`
   * and demote one rated irrelevant (docs/RETRIEVAL.md, Feedback).
   */
  rate(
    memory: string | { id: string },
    signal: Schemas["SignalEnum"],
    options: { query: string; agent_id?: string; run_id?: string },
  ): Promise<Feedback> {
    const memoryId = typeof memory === "string" ? memory : memory.id;
    return this.write(
      () => this.api.POST("/api/v1/memories/{memory_id}/feedback", {
        params: { path: { memory_id: memoryId } },
        body: clean({ ...options, signal }) as Schemas["FeedbackInRequest"],
      }),
      "POST /memories/{id}/feedback",
    );
  }

  /** Every change of a memory, oldest first, with the values before it. */
  getMemoryHistory(memoryId: string): Promise<History> {
    return this.read(
      () => this.api.GET("/api/v1/memories/{memory_id}/history", { params: { path: { memory_id: memoryId } } }),
      "GET /memories/{id}/history",
    );
  }

  /** A bucket's memories, newest first, fetched a page at a time as the iteration goes. */
  listMemories(bucketId: string, options: ListMemoriesOptions = {}): AsyncGenerator<MemoryListed> {
    return this.pages<MemoryListed>("/api/v1/buckets/{bucket_id}/memories", {
      path: { bucket_id: bucketId },
      query: queryOf(options),
    });
  }

  /** A bucket's deleted memories that can still be restored, most recently deleted first. */
  listDeletedMemories(bucketId: string, options: { page_size?: number } = {}): AsyncGenerator<DeletedMemory> {
    return this.pages<DeletedMemory>("/api/v1/buckets/{bucket_id}/deleted", {
      path: { bucket_id: bucketId },
      query: queryOf(options),
    });
  }

  /**
   * The memories that answer `query` best (`hybrid` by default), within `limit` and
   * `token_budget`; `filters`, `explain`, `ranking`, `now` and `excerpt` as the API takes them
   * (docs/API.md). A search is a read: it is retried like one.
   */
  search(bucketId: string, query: string, options: SearchOptions = {}): Promise<SearchResult> {
    return this.read(
      () => this.api.POST("/api/v1/buckets/{bucket_id}/search", {
        params: { path: { bucket_id: bucketId } },
        body: { ...jsonable(options), query } as Schemas["SearchRequest"],
      }),
      "POST /buckets/{id}/search",
    );
  }

  /**
   * One search over several buckets (`buckets`; default: every bucket the token can read),
   * fused once and cut to one `limit` and one `token_budget`; each hit's `bucket_id` names its
   * bucket, and the answer's `buckets` lists those searched.
   */
  searchBuckets(query: string, options: SearchAcrossOptions = {}): Promise<CrossSearchResult> {
    return this.read(
      () => this.api.POST("/api/v1/search", { body: { ...jsonable(options), query } as Schemas["SearchAcrossBucketsRequest"] }),
      "POST /search",
    );
  }

  // --- memory blocks ----------------------------------------------------------------------------

  /** The bucket's memory blocks the token may read (`agent_id`: that agent's only). */
  listBlocks(bucketId: string, options: { agent_id?: string; pageSize?: number } = {}): AsyncGenerator<Block> {
    return this.pages<Block>("/api/v1/buckets/{bucket_id}/blocks", {
      path: { bucket_id: bucketId },
      query: clean({ agent_id: options.agent_id, limit: options.pageSize }),
    });
  }

  /** The block `label` (`agent_id`: that agent's; else the bucket's shared block). */
  getBlock(bucketId: string, label: string, options: { agent_id?: string } = {}): Promise<Block> {
    return this.read(
      () => this.api.GET("/api/v1/buckets/{bucket_id}/blocks/{label}", {
        params: { path: { bucket_id: bucketId, label }, query: clean(options) },
      }),
      "GET /buckets/{id}/blocks/{label}",
    );
  }

  /**
   * Set the block's whole text. A missing block is created without `if_match` (`create_only`:
   * only if missing, else `PreconditionFailed`); an existing one is replaced only with `if_match`
   * (the etag or Block the text replaces, or `"*"`), else `PreconditionRequired`; a stale one
   * is `PreconditionFailed` (412). A conditional write is never sent twice.
   */
  putBlock(
    bucketId: string,
    label: string,
    content: string,
    options: { agent_id?: string; max_tokens?: number; reason?: string; if_match?: IfMatch; create_only?: boolean } = {},
  ): Promise<Block> {
    const { agent_id, if_match, create_only, ...fields } = options;
    return this.write(
      () => this.api.PUT("/api/v1/buckets/{bucket_id}/blocks/{label}", {
        params: { path: { bucket_id: bucketId, label }, query: clean({ agent_id }), header: conditions(if_match, create_only) },
        body: clean({ ...fields, content }) as Schemas["BlockPutRequest"],
      }),
      "PUT /buckets/{id}/blocks/{label}",
    );
  }

  /**
   * Change a block: `content` (its whole text), `append` (a line at the end), `replace` with
   * `replace_with` (its first occurrence), and/or `max_tokens`. `if_match`: the etag (or Block)
   * the change is based on, or `"*"` to apply it to the block as it then is.
   */
  editBlock(
    bucketId: string,
    label: string,
    options: Schemas["PatchedBlockPatchRequest"] & { if_match: IfMatch; agent_id?: string },
  ): Promise<Block> {
    const { agent_id, if_match, ...fields } = options;
    return this.write(
      () => this.api.PATCH("/api/v1/buckets/{bucket_id}/blocks/{label}", {
        params: { path: { bucket_id: bucketId, label }, query: clean({ agent_id }), header: conditions(if_match) },
        body: clean(fields) as Schemas["PatchedBlockPatchRequest"],
      }),
      "PATCH /buckets/{id}/blocks/{label}",
    );
  }

  /** Delete a block and its history (`if_match`: its etag, its Block, or `"*"`). */
  async deleteBlock(bucketId: string, label: string, options: { if_match: IfMatch; agent_id?: string }): Promise<void> {
    await this.write(
      () => this.api.DELETE("/api/v1/buckets/{bucket_id}/blocks/{label}", {
        params: { path: { bucket_id: bucketId, label }, query: clean({ agent_id: options.agent_id }), header: conditions(options.if_match) },
      }),
      "DELETE /buckets/{id}/blocks/{label}",
    );
  }

  /** Every version of a block, newest first: its text, who wrote it, when and why. */
  getBlockHistory(bucketId: string, label: string, options: { agent_id?: string; pageSize?: number } = {}): AsyncGenerator<BlockVersion> {
    return this.pages<BlockVersion>("/api/v1/buckets/{bucket_id}/blocks/{label}/history", {
      path: { bucket_id: bucketId, label },
      query: clean({ agent_id: options.agent_id, limit: options.pageSize }),
    });
  }

  // --- export and import ------------------------------------------------------------------------

  /**
   * A bucket's memories as the export's JSON objects, one per line, oldest first, read as they stream;
   * `blocks`: then a `{block}` object per memory block, `feedback`: then a `{feedback}` object per rating.
   */
  async *exportBucket(
    bucketId: string,
    options: { versions?: boolean; embeddings?: boolean; blocks?: boolean; feedback?: boolean } = {},
  ): AsyncGenerator<Record<string, unknown>> {
    const flags = { versions: options.versions, embeddings: options.embeddings, blocks: options.blocks, feedback: options.feedback };
    const stream = await this.read(
      () => this.api.GET("/api/v1/buckets/{bucket_id}/export", {
        params: { path: { bucket_id: bucketId }, query: clean(Object.fromEntries(Object.entries(flags).map(([k, v]) => [k, v || undefined]))) },
        parseAs: "stream",
      }) as Promise<Answer<ReadableStream<Uint8Array>>>,
      "GET /buckets/{id}/export",
    );
    let rest = "";
    const decoder = new TextDecoder();
    for await (const chunk of stream as unknown as AsyncIterable<Uint8Array>) {
      rest += decoder.decode(chunk, { stream: true });
      const lines = rest.split("\n");
      rest = lines.pop() ?? "";
      for (const line of lines) if (line.trim()) yield JSON.parse(line);
    }
    rest += decoder.decode();
    if (rest.trim()) yield JSON.parse(rest);
  }

  /**
   * Import JSON Lines: an export's objects or plain `{content}` objects, or their JSON texts;
   * all or nothing unless `skipInvalid`. The body is built in memory and, as the Python client's
   * streamed one, never sent twice. The answer comes once every line is written: give a larger
   * `timeoutMs` for big imports.
   */
  async importBucket(
    bucketId: string,
    lines: Iterable<JsonLine> | AsyncIterable<JsonLine>,
    options: { skipInvalid?: boolean; timeoutMs?: number } = {},
  ): Promise<ImportResult> {
    let body = "";
    for await (const line of lines as AsyncIterable<JsonLine>) {
      const text = typeof line === "string" ? line : JSON.stringify(jsonable(line));
      body += text.endsWith("\n") ? text : `${text}\n`;
    }
    return this.run(
      { idempotent: false, replayable: false },
      () => this.api.POST("/api/v1/buckets/{bucket_id}/import", {
        params: { path: { bucket_id: bucketId }, query: clean({ skip_invalid: options.skipInvalid || undefined }) },
        body,
        bodySerializer: (text?: string) => text ?? "",
        headers: { "Content-Type": "application/x-ndjson" },
        ...(options.timeoutMs !== undefined ? this.timed(options.timeoutMs) : {}),
      }),
      "POST /buckets/{id}/import",
    );
  }

  // --- documents and conversations --------------------------------------------------------------

  /** Submit a document (text or Markdown), distilled into memories in the background: follow it with `getSource`. */
  submitDocument(bucketId: string, title: string, text: string, fields: Timed<Partial<Omit<Schemas["DocumentSubmitRequest"], "title" | "text">>> = {}): Promise<SourceSubmitted> {
    return this.write(
      () => this.api.POST("/api/v1/buckets/{bucket_id}/documents", {
        params: { path: { bucket_id: bucketId } },
        body: { ...jsonable(fields), title, text } as Schemas["DocumentSubmitRequest"],
      }),
      "POST /buckets/{id}/documents",
    );
  }

  /** Submit a conversation (`{role, content, timestamp?, name?}` messages), distilled in the background. */
  submitConversation(
    bucketId: string,
    messages: Schemas["MessageInRequest"][],
    fields: Partial<Omit<Schemas["ConversationSubmitRequest"], "messages">> = {},
  ): Promise<SourceSubmitted> {
    return this.write(
      () => this.api.POST("/api/v1/buckets/{bucket_id}/conversations", {
        params: { path: { bucket_id: bucketId } },
        body: { ...fields, messages } as Schemas["ConversationSubmitRequest"],
      }),
      "POST /buckets/{id}/conversations",
    );
  }

  /** A bucket's documents and conversations, newest first. */
  listSources(bucketId: string, options: { status?: string; kind?: "document" | "conversation"; page_size?: number } = {}): AsyncGenerator<Source> {
    return this.pages<Source>("/api/v1/buckets/{bucket_id}/sources", { path: { bucket_id: bucketId }, query: queryOf(options) });
  }

  /** A source's status and progress, and its chunks with the memories each produced. */
  getSource(sourceId: string, options: { chunk_offset?: number; chunk_limit?: number } = {}): Promise<SourceDetail> {
    return this.read(
      () => this.api.GET("/api/v1/sources/{source_id}", { params: { path: { source_id: sourceId }, query: clean(options) } }),
      "GET /sources/{id}",
    );
  }

  /** Delete a source and the memories it created (those also stated elsewhere stay). */
  deleteSource(sourceId: string): Promise<SourceDeleted> {
    return this.run({ idempotent: true },
      () => this.api.DELETE("/api/v1/sources/{source_id}", { params: { path: { source_id: sourceId } } }),
      "DELETE /sources/{id}");
  }

  // --- knowledge graph --------------------------------------------------------------------------

  /** A bucket's entities, most mentioned first; `q` matches names and aliases. */
  listEntities(bucketId: string, options: { q?: string; type?: string; pageSize?: number } = {}): AsyncGenerator<Entity> {
    const { pageSize, ...rest } = options;
    return this.pages<Entity>("/api/v1/buckets/{bucket_id}/entities", { path: { bucket_id: bucketId }, query: queryOf({ ...rest, limit: pageSize }) });
  }

  /** An entity with its current and historical edges (as they stood at `as_of`). */
  getEntity(entityId: string, options: { as_of?: Time } = {}): Promise<EntityDetail> {
    return this.read(
      () => this.api.GET("/api/v1/entities/{entity_id}", { params: { path: { entity_id: entityId }, query: queryOf(options) } }),
      "GET /entities/{id}",
    );
  }

  /** A bucket's edges: valid at a time, touching an entity, of a predicate. */
  listEdges(bucketId: string, options: { valid_at?: Time; entity?: string; predicate?: string; pageSize?: number } = {}): AsyncGenerator<Edge> {
    const { pageSize, ...rest } = options;
    return this.pages<Edge>("/api/v1/buckets/{bucket_id}/edges", { path: { bucket_id: bucketId }, query: queryOf({ ...rest, limit: pageSize }) });
  }

  /** An edge and the memories stating it. */
  getEdgeMemories(edgeId: string): Promise<EdgeMemories> {
    return this.read(() => this.api.GET("/api/v1/edges/{edge_id}/memories", { params: { path: { edge_id: edgeId } } }),
      "GET /edges/{id}/memories");
  }

  /**
   * What the bucket's memories say about an entity, by `name` (`Conflict` with `candidates`
   * when it denotes several) or by `entity_id`: its current facts and their history, related
   * entities, and with `budget` a `digest` of at most that many tokens.
   */
  getProfile(
    bucketId: string,
    options: { name?: string; entity_id?: string; type?: string; as_of?: Time; budget?: number; limit?: number },
  ): Promise<Profile> {
    const { name, entity_id: entityId, type, ...rest } = options;
    if ((name === undefined) === (entityId === undefined)) throw new TypeError("give name or entity_id (one of them)");
    const query = queryOf(rest);
    if (entityId !== undefined) {
      return this.read(
        () => this.api.GET("/api/v1/buckets/{bucket_id}/entities/{entity_id}/profile", {
          params: { path: { bucket_id: bucketId, entity_id: entityId }, query },
        }),
        "GET /buckets/{id}/entities/{id}/profile",
      );
    }
    return this.read(
      () => this.api.GET("/api/v1/buckets/{bucket_id}/profile", {
        params: { path: { bucket_id: bucketId }, query: { ...query, ...clean({ type }), name: name as string } },
      }),
      "GET /buckets/{id}/profile",
    );
  }

  // --- erasure ----------------------------------------------------------------------------------

  /** Delete for good every memory of the tenant carrying all the identifiers given (scope `admin`); `dry_run` only counts. */
  erase(options: Schemas["ErasureInRequest"]): Promise<ErasureResult> {
    return this.write(() => this.api.POST("/api/v1/erasure", { body: options }), "POST /erasure");
  }
}

// --- helpers -------------------------------------------------------------------------------------

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** `value` without its undefined fields. */
function clean<T extends Record<string, unknown>>(value: T): T {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined)) as T;
}

/** A value as JSON sends it: Dates as ISO 8601, undefined fields left out (null is sent: it clears). */
function jsonable<T>(value: T): any {
  if (value instanceof Date) return value.toISOString();
  if (Array.isArray(value)) return value.map(jsonable);
  if (typeof value === "object" && value !== null) {
    return Object.fromEntries(
      Object.entries(value)
        .filter(([, v]) => v !== undefined)
        .map(([k, v]) => [k, jsonable(v)]),
    );
  }
  return value;
}

/** Query parameters as the API reads them: lists comma-separated, Dates in ISO 8601, flags true/false. */
function queryOf(params: Record<string, unknown>): Record<string, string | number | boolean> {
  const out: Record<string, string | number | boolean> = {};
  for (const [name, value] of Object.entries(params)) {
    if (value === undefined || value === null) continue;
    if (value instanceof Date) out[name] = value.toISOString();
    else if (Array.isArray(value)) out[name] = value.join(",");
    else if (typeof value === "object") out[name] = JSON.stringify(value); // a metadata filter: JSON in the query string
    else out[name] = value as string;
  }
  return out;
}

/** The query of a page's `next` link, or null on the last page. Only the query is taken: the
 * link's host is the server's view of itself, which behind a proxy is not this client's. */
function nextQuery(link: string | null | undefined): Record<string, string> | null {
  if (!link) return null;
  return Object.fromEntries(new URL(link, "http://engram.invalid").searchParams);
}

/** The If-Match / If-None-Match headers of a conditional block write. */
function conditions(ifMatch?: IfMatch, createOnly?: boolean): { "If-Match"?: string; "If-None-Match"?: string } {
  const headers: { "If-Match"?: string; "If-None-Match"?: string } = {};
  if (ifMatch !== undefined) headers["If-Match"] = typeof ifMatch === "string" ? ifMatch : ifMatch.etag;
  if (createOnly) headers["If-None-Match"] = "*";
  return headers;
}
