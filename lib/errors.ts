// One error vocabulary for the library and every server: each class carries the
// `code` word of docs/api.md (errors); server/http/errors.ts maps codes to statuses.

export type ErrorCode =
  | "bad_request"
  | "payload_too_large"
  | "unauthorized"
  | "forbidden"
  | "not_found"
  | "version_conflict"
  | "rate_limited"
  | "quota_exhausted"
  | "engine_unreachable"
  | "gpu_unavailable"
  | "unsupported_media_type"
  | "overloaded"
  | "idempotency_key_reused"
  | "store_unavailable"
  | "storage_full"
  | "state_unavailable"
  | "internal";

/** Base class of every error the library and the servers throw on purpose. */
export class SvcError extends Error {
  readonly code: ErrorCode;
  /** Extra, safe-to-show fields some errors carry (never secrets). */
  readonly extra: Record<string, unknown>;
  constructor(code: ErrorCode, message: string, extra: Record<string, unknown> = {}) {
    super(message);
    this.name = new.target.name;
    this.code = code;
    this.extra = extra;
  }
}

/** Bad input: `field` names the offending option or body field when known. */
export class ValidationError extends SvcError {
  readonly field: string | undefined;
  constructor(message: string, field?: string) {
    super("bad_request", message, field ? { field } : {});
    this.field = field;
  }
}
export class PayloadTooLargeError extends SvcError {
  constructor(message: string) {
    super("payload_too_large", message);
  }
}
export class UnauthorizedError extends SvcError {
  constructor(message = "Missing or invalid API key.") {
    super("unauthorized", message);
  }
}
export class ForbiddenError extends SvcError {
  constructor(message: string) {
    super("forbidden", message);
  }
}
export class NotFoundError extends SvcError {
  constructor(message: string) {
    super("not_found", message);
  }
}
/**
 * A resource that must not exist already does (for example a tenant id), or is in a state the
 * request conflicts with. HTTP 409 with the one 409 code of docs/api.md (errors), `version_conflict`.
 */
export class ConflictError extends SvcError {
  constructor(message: string) {
    super("version_conflict", message);
  }
}
export class VersionConflictError extends SvcError {
  constructor(
    message: string,
    readonly expected?: number,
    readonly actual?: number,
  ) {
    super("version_conflict", message);
  }
}
export class RateLimitedError extends SvcError {
  constructor(
    message: string,
    readonly retryAfterS: number,
  ) {
    super("rate_limited", message);
  }
}
export class QuotaExhaustedError extends SvcError {
  constructor(
    message: string,
    readonly retryAfterS: number,
  ) {
    super("quota_exhausted", message);
  }
}
/**
 * The service cannot carry out the request right now (a server-wide capacity such as request
 * bodies in flight or engine connections is in use, or the audit log cannot be written): HTTP
 * 503 with `Retry-After`; the request was not carried out and may be sent again.
 */
export class EngineUnreachableError extends SvcError {
  constructor(message = "The storage engine is unreachable.") {
    super("engine_unreachable", message);
  }
}
export class GpuUnavailableError extends SvcError {
  constructor(message: string) {
    super("gpu_unavailable", message);
  }
}
/** The server's memory budget for requests in flight is spent: HTTP 503 with Retry-After; the request may be retried. */
export class OverloadedError extends SvcError {
  constructor(
    message: string,
    readonly retryAfterS: number = 1,
  ) {
    super("overloaded", message);
  }
}
/**
 * A dependency failed while the process stays up (docs/operations.md, failures): the request was
 * not carried out, or not known to be, and may be sent again after `retryAfterS` (with its
 * Idempotency-Key for a write). HTTP 503, or 507 for `storage_full`, with `Retry-After`.
 */
export abstract class DependencyError extends SvcError {
  constructor(
    code: "store_unavailable" | "storage_full" | "state_unavailable",
    message: string,
    readonly retryAfterS: number,
  ) {
    super(code, message);
  }
}
/** PostgreSQL or LMDB cannot be reached, failed mid-request, or did not answer in time. */
export class StoreUnavailableError extends DependencyError {
  constructor(message = "The store is unavailable; retry later.", retryAfterS = 2) {
    super("store_unavailable", message, retryAfterS);
  }
}
/** The store's disk or map has no room for the write; reads go on. */
export class StorageFullError extends DependencyError {
  constructor(message = "The store has no space left for this write; retry after space is freed.", retryAfterS = 30) {
    super("storage_full", message, retryAfterS);
  }
}
/** Whether `e` is a file system's "no space" (ENOSPC, EDQUOT: a full disk or a used-up quota). */
export function isNoSpace(e: unknown): boolean {
  const err = e as { code?: unknown; message?: unknown } | null;
  const code = err?.code;
  return code === "ENOSPC" || code === "EDQUOT" || code === 28 || (typeof err?.message === "string" && /No space left|quota exceeded/i.test(err.message));
}
/** The system error's code of `e` (ENOSPC, EROFS, EIO, ...), or undefined: a short name that says what failed and nothing else of the error. */
export function systemCode(e: unknown): string | undefined {
  const code = (e as { code?: unknown } | null)?.code;
  return typeof code === "string" && /^E[A-Z0-9]{1,15}$/.test(code) ? code : undefined;
}
/** Whether `e` is a read-only file system (EROFS: mounted so, or remounted so after a disk error). */
export function isReadOnlyFs(e: unknown): boolean {
  const err = e as { code?: unknown; message?: unknown } | null;
  return err?.code === "EROFS" || err?.code === 30 || (typeof err?.message === "string" && /Read-only file system/i.test(err.message));
}
/** The gateway's shared state (Redis) is down or did not answer in time. */
export class StateUnavailableError extends DependencyError {
  constructor(message = "The gateway's state store is unavailable; retry later.", retryAfterS = 2) {
    super("state_unavailable", message, retryAfterS);
  }
}
export class UnsupportedMediaTypeError extends SvcError {
  constructor(message: string) {
    super("unsupported_media_type", message);
  }
}
/**
 * An Idempotency-Key already used, within its 24 hours, for a different request (method,
 * path, metadata or body): HTTP 422. The contract's vocabulary has no code for it.
 */
export class IdempotencyKeyReusedError extends SvcError {
  constructor(message: string) {
    super("idempotency_key_reused", message);
  }
}
export class InternalError extends SvcError {
  constructor(message = "Internal error.") {
    super("internal", message);
  }
}

/** HTTP status of each code, the one place where codes meet statuses. */
export const STATUS_OF: Readonly<Record<ErrorCode, number>> = Object.freeze({
  bad_request: 400,
  unauthorized: 401,
  forbidden: 403,
  not_found: 404,
  version_conflict: 409,
  payload_too_large: 413,
  unsupported_media_type: 415,
  idempotency_key_reused: 422,
  rate_limited: 429,
  internal: 500,
  gpu_unavailable: 501,
  engine_unreachable: 502,
  quota_exhausted: 503,
  overloaded: 503,
  store_unavailable: 503,
  storage_full: 507,
  state_unavailable: 503,
});

const CLASS_OF: Record<ErrorCode, new (message: string) => SvcError> = {
  bad_request: ValidationError,
  payload_too_large: PayloadTooLargeError,
  unauthorized: UnauthorizedError,
  forbidden: ForbiddenError,
  not_found: NotFoundError,
  version_conflict: VersionConflictError,
  rate_limited: class extends RateLimitedError {
    constructor(m: string) {
      super(m, 0);
    }
  },
  quota_exhausted: class extends QuotaExhaustedError {
    constructor(m: string) {
      super(m, 0);
    }
  },
  engine_unreachable: EngineUnreachableError,
  gpu_unavailable: GpuUnavailableError,
  unsupported_media_type: UnsupportedMediaTypeError,
  overloaded: class extends OverloadedError {
    constructor(m: string) {
      super(m, 0);
    }
  },
  idempotency_key_reused: IdempotencyKeyReusedError,
  store_unavailable: StoreUnavailableError,
  storage_full: StorageFullError,
  state_unavailable: StateUnavailableError,
  internal: InternalError,
};

/** Rebuilds a typed error from a wire error body (used by the HTTP client). */
export function errorFromCode(code: string, message: string): SvcError {
  const Cls = (CLASS_OF as Record<string, new (m: string) => SvcError>)[code] ?? InternalError;
  return new Cls(message);
}
