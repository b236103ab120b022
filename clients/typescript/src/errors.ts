/**
 * Errors the client throws: the same classes, chosen the same way, as the Python client's
 * (clients/python/engram_client/errors.py).
 *
 * Every error answered by the API becomes an `EngramError` subclass chosen by its HTTP status,
 * carrying the API's `code` (`not_found`, `duplicate_content`, `invalid`, …), its message
 * (`detail`), the `status`, the whole response `body` and its `headers`. A request that got no
 * answer throws `APIConnectionError` (`APITimeoutError` when it timed out).
 */

export interface EngramErrorInit {
  code?: string | null;
  status?: number | null;
  body?: unknown;
  headers?: Record<string, string>;
  cause?: unknown;
}

export class EngramError extends Error {
  /** The API's message (the body's `detail`), without the code and status `message` adds. */
  readonly detail: string;
  readonly code: string | null;
  readonly status: number | null;
  readonly body: unknown;
  readonly headers: Record<string, string>;

  constructor(detail: string, init: EngramErrorInit = {}) {
    const status = init.status ?? null;
    super(status === null ? detail : `${detail} (${init.code ?? "error"}, HTTP ${status})`, { cause: init.cause });
    this.name = new.target.name;
    this.detail = detail;
    this.code = init.code ?? null;
    this.status = status;
    this.body = init.body ?? null;
    this.headers = init.headers ?? {};
  }

  /** Per-field messages of a validation error (`{content: ["This field may not be blank."]}`). */
  get errors(): Record<string, unknown> {
    return (isObject(this.body) && isObject(this.body.errors) ? this.body.errors : {}) as Record<string, unknown>;
  }
}

/** 400: a field is wrong (`errors` says which), the body is not JSON, or a domain rule refused it. */
export class ValidationError extends EngramError {}

/** 401: the token is missing, unknown, revoked or expired. */
export class AuthenticationError extends EngramError {}

/** 403: the token lacks the scope, or is restricted to another bucket or agent. */
export class PermissionDenied extends EngramError {}

/** 404: missing — or another tenant's, which the API does not tell apart. */
export class NotFound extends EngramError {}

/** 409: a name or content collision, or a concurrent change that was rolled back (`code === "retry"`). */
export class Conflict extends EngramError {
  /** The memory already holding this content (`code === "duplicate_content"`). */
  get existingId(): string | null {
    return isObject(this.body) && typeof this.body.existing_id === "string" ? this.body.existing_id : null;
  }

  /** The entities an ambiguous name denotes (`code === "ambiguous_name"`, from `getProfile({name})`). */
  get candidates(): Array<Record<string, unknown>> {
    return isObject(this.body) && Array.isArray(this.body.candidates) ? this.body.candidates : [];
  }
}

/**
 * 412: the If-Match (or If-None-Match) condition failed: the block changed since it was read (or
 * exists already). `version` and `etag` name its current version. Nothing was changed.
 */
export class PreconditionFailed extends EngramError {
  get version(): number | null {
    return isObject(this.body) && typeof this.body.version === "number" ? this.body.version : null;
  }

  get etag(): string | null {
    return isObject(this.body) && typeof this.body.etag === "string" ? this.body.etag : null;
  }
}

/** 428: changing an existing block needs `if_match` (its `etag`, or `"*"`). */
export class PreconditionRequired extends PreconditionFailed {}

/** 413: the body is over the server's limit. */
export class RequestTooLarge extends EngramError {}

/** 429: too many requests for this token; `retryAfter` says how long to wait (seconds). */
export class RateLimited extends EngramError {
  get retryAfter(): number | null {
    return parseRetryAfter(this.headers["retry-after"]);
  }
}

/** 5xx: the server failed (500) or is unavailable for a moment (502, 503, 504). */
export class ServerError extends EngramError {}

/** 503: the database is unreachable for a moment; retried for reads. */
export class ServiceUnavailable extends ServerError {
  get retryAfter(): number | null {
    return parseRetryAfter(this.headers["retry-after"]);
  }
}

/** No answer: the server could not be reached, or the connection broke. */
export class APIConnectionError extends EngramError {}

/** No answer within the client's timeout. */
export class APITimeoutError extends APIConnectionError {}

const BY_STATUS: Record<number, typeof EngramError> = {
  400: ValidationError,
  401: AuthenticationError,
  403: PermissionDenied,
  404: NotFound,
  409: Conflict,
  412: PreconditionFailed,
  413: RequestTooLarge,
  428: PreconditionRequired,
  429: RateLimited,
  503: ServiceUnavailable,
};

/** The error for an answer of the API with status >= 400 (its JSON body, or its text). */
export function errorFor(status: number, body: unknown, headers: Headers | Record<string, string>): EngramError {
  let detail: string;
  let code: string | null = null;
  if (isObject(body)) {
    detail = String(body.detail || `HTTP ${status}`);
    code = typeof body.code === "string" ? body.code : null;
  } else {
    detail = String(body ?? "").trim().slice(0, 500) || `HTTP ${status}`;
  }
  const Class = BY_STATUS[status] ?? (status >= 500 ? ServerError : EngramError);
  return new Class(detail, { code, status, body, headers: headerRecord(headers) });
}

/** Seconds from a `Retry-After` header (the API sends seconds; an HTTP date is ignored). */
export function parseRetryAfter(value: string | null | undefined): number | null {
  if (!value) return null;
  const seconds = Number(value);
  return Number.isFinite(seconds) ? Math.max(0, seconds) : null;
}

function headerRecord(headers: Headers | Record<string, string>): Record<string, string> {
  if (!(headers instanceof Headers)) return headers;
  const out: Record<string, string> = {};
  headers.forEach((value, name) => {
    out[name.toLowerCase()] = value;
  });
  return out;
}

function isObject(value: unknown): value is Record<string, any> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
