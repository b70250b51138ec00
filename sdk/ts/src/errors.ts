import { execResultFromJson, type ExecResult } from "./types.js";

/** The base class of every error this SDK throws. */
export class SbxError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** The daemon could not be reached, the connection broke, or the request timed out on our side. */
export class SbxConnectionError extends SbxError {}

/** The error codes sbxd answers with, and their HTTP status. */
export const ERROR_STATUS: Readonly<Record<string, number>> = Object.freeze({
  invalid_request: 400,
  unauthorized: 401,
  forbidden: 403,
  not_found: 404,
  conflict: 409,
  too_large: 413,
  quota_exceeded: 429,
  internal: 500,
  unavailable: 503,
  exec_timeout: 504,
});

/** The daemon answered with an error (`{"error": {"code", "message"}}`). */
export class SbxApiError extends SbxError {
  /** The HTTP status (for an error inside an exec stream: the status of its code). */
  readonly status: number;
  /** The daemon's error code, such as `not_found`. */
  readonly code: string;
  /** The parsed response body, or the raw text if it was not JSON. */
  readonly body: unknown;

  constructor(status: number, code: string, message: string, body?: unknown) {
    super(message);
    this.status = status;
    this.code = code;
    this.body = body;
  }
}

/** 400 `invalid_request`: a bad body, field, id or name, or a feature this daemon lacks. */
export class InvalidRequestError extends SbxApiError {}

/** 401 `unauthorized` or 403 `forbidden`: the API key is missing, wrong or not allowed. */
export class AuthError extends SbxApiError {}

/** 404 `not_found`: no such sandbox, disk, image, snapshot or route. */
export class NotFoundError extends SbxApiError {}

/** 409 `conflict`: the state is wrong, or the name is taken. */
export class ConflictError extends SbxApiError {}

/** 429 `quota_exceeded`: past a daemon quota; nothing was changed. */
export class QuotaExceededError extends SbxApiError {}

/**
 * 504 `exec_timeout`: the command ran past its limit (disk calls), or the sandbox's
 * agent did not answer in time. `result` holds what the command printed, when the
 * daemon sent it.
 */
export class ExecTimeoutError extends SbxApiError {
  readonly result: ExecResult | undefined;

  constructor(status: number, code: string, message: string, body?: unknown) {
    super(status, code, message, body);
    const b = body as Record<string, unknown> | null | undefined;
    const hasOutput = !!b && typeof b === "object" && (typeof b.stdout === "string" || typeof b.stderr === "string");
    this.result = hasOutput ? execResultFromJson(b) : undefined;
  }
}

/** Thrown by `exec(..., { check: true })` when the command exits with a non-zero code. */
export class ExecError extends SbxError {
  readonly result: ExecResult;

  constructor(result: ExecResult) {
    let message = `command exited with code ${result.exitCode}`;
    if (result.signal != null) message += ` (signal ${result.signal})`;
    if (result.timedOut) message += " (timed out)";
    const tail = result.stderr.trim();
    if (tail) message += `: ${tail.length > 1000 ? "..." + tail.slice(-1000) : tail}`;
    super(message);
    this.result = result;
  }

  get exitCode(): number {
    return this.result.exitCode;
  }
}

/** Builds the right `SbxApiError` subclass for a status and code. */
export function apiError(status: number, code: string, message: string, body?: unknown): SbxApiError {
  switch (status) {
    case 400:
      return new InvalidRequestError(status, code, message, body);
    case 401:
    case 403:
      return new AuthError(status, code, message, body);
    case 404:
      return new NotFoundError(status, code, message, body);
    case 409:
      return new ConflictError(status, code, message, body);
    case 429:
      return new QuotaExceededError(status, code, message, body);
    case 504:
      return new ExecTimeoutError(status, code, message, body);
    default:
      return new SbxApiError(status, code, message, body);
  }
}

/** The status for an error code (used for errors that arrive inside an exec stream). */
export function statusForCode(code: string): number {
  return ERROR_STATUS[code] ?? 500;
}

/** The code for a status, for error answers that carry no code of their own. */
export function codeForStatus(status: number): string {
  for (const [code, s] of Object.entries(ERROR_STATUS)) if (s === status) return code;
  return `http_${status}`;
}
