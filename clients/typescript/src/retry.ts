/**
 * When a failed call is sent again: the rules of the Python client (clients/python/engram_client/_core.py,
 * `RetryPolicy`), so that both clients do the same thing to the server.
 *
 * - any call that was certainly not carried out: the connection was refused (nothing was sent),
 *   the token was throttled (429), or PostgreSQL rolled it back (409 `retry`);
 * - calls that may be repeated (GET, PUT, DELETE, and a search: a read sent as POST) also after a
 *   broken connection, a timeout, or 502/503/504.
 *
 * The wait before attempt n+1 is `backoffMs × 2ⁿ` with jitter (half to all of it), capped at
 * `maxBackoffMs`; a `Retry-After` is the wait, and one longer than `maxBackoffMs` is not waited:
 * the error is thrown at once.
 */

import { parseRetryAfter } from "./errors.js";

export interface RetryOptions {
  /** Further attempts after the first (default 2; 0 turns retrying off). */
  retries?: number;
  /** The first wait, in milliseconds (default 500). */
  backoffMs?: number;
  /** The longest wait, in milliseconds (default 30,000). */
  maxBackoffMs?: number;
}

/** How a call may be repeated. */
export interface CallKind {
  /** Sending it twice does what sending it once does. */
  idempotent: boolean;
  /** False: never sent twice, whatever happened (an import). */
  replayable?: boolean;
}

export type Outcome = { error: unknown } | { response: Response; body: unknown };

// Errors of a connection that was never made: nothing reached the server.
const NOT_SENT = new Set([
  "ECONNREFUSED",
  "ENOTFOUND",
  "EAI_AGAIN",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "UND_ERR_CONNECT_TIMEOUT",
]);
// Answers worth waiting out for calls that may be repeated: the database is away for a moment
// (503), or a proxy in front of Engram could not reach it (502, 504).
const TRANSIENT = new Set([502, 503, 504]);

export class RetryPolicy {
  readonly retries: number;
  readonly backoffMs: number;
  readonly maxBackoffMs: number;

  constructor({ retries = 2, backoffMs = 500, maxBackoffMs = 30_000 }: RetryOptions = {}) {
    this.retries = retries;
    this.backoffMs = backoffMs;
    this.maxBackoffMs = maxBackoffMs;
  }

  /** Milliseconds to wait before attempt `attempt + 1`, or null: do not retry. */
  delay(attempt: number, call: CallKind, outcome: Outcome): number | null {
    if (attempt >= this.retries || call.replayable === false) return null;
    let retryAfter: number | null = null;
    if ("error" in outcome) {
      if (!(notSent(outcome.error) || (call.idempotent && isTransportError(outcome.error)))) return null;
    } else {
      const status = outcome.response.status;
      const rolledBack = status === 409 && codeOf(outcome.body) === "retry";
      if (!(status === 429 || rolledBack || (call.idempotent && TRANSIENT.has(status)))) return null;
      retryAfter = parseRetryAfter(outcome.response.headers.get("retry-after"));
    }
    if (retryAfter === null) {
      const step = Math.min(this.maxBackoffMs, this.backoffMs * 2 ** attempt);
      return step / 2 + Math.random() * (step / 2);
    }
    const ms = retryAfter * 1000;
    return ms <= this.maxBackoffMs ? ms : null;
  }
}

/** The code of a failed fetch (undici puts the socket's error in `cause`). */
export function errorCode(error: unknown): string | undefined {
  const cause = (error as { cause?: { code?: unknown } } | null)?.cause;
  return typeof cause?.code === "string" ? cause.code : undefined;
}

export function isTimeout(error: unknown): boolean {
  return (error as { name?: unknown } | null)?.name === "TimeoutError";
}

function notSent(error: unknown): boolean {
  const code = errorCode(error);
  return code !== undefined && NOT_SENT.has(code);
}

/** A failure of the connection (fetch's TypeError, a timeout), not a bug in the caller's code. */
export function isTransportError(error: unknown): boolean {
  return isTimeout(error) || (error instanceof TypeError && (error.message === "fetch failed" || errorCode(error) !== undefined));
}

function codeOf(body: unknown): unknown {
  return typeof body === "object" && body !== null ? (body as { code?: unknown }).code : undefined;
}
