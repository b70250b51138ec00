import {
  SbxConnectionError,
  SbxError,
  apiError,
  codeForStatus,
  statusForCode,
  type SbxApiError,
} from "./errors.js";
import { execResultFromJson, type ExecResult, type JsonObject } from "./types.js";

export type Query = Record<string, string | number | boolean | undefined> | URLSearchParams;

export interface SendOptions {
  query?: Query;
  /** A JSON body. */
  json?: unknown;
  /** A raw body, sent as application/octet-stream. */
  bytes?: Uint8Array;
  /** Send the API key (default true). */
  auth?: boolean;
  /** The Accept header (default application/json). */
  accept?: string;
  /** Overrides the client's timeout for this request; null means none. */
  timeoutSeconds?: number | null;
  /** The answer may take more than five minutes to start (see patientDispatcher). */
  slowHeaders?: boolean;
}

const UNDICI_DISPATCHER = Symbol.for("undici.globalDispatcher.1");
let patient: Promise<unknown> | undefined;

/**
 * Node's fetch gives up when response headers take more than 300 s, and a disk call
 * answers only at the end of its command, which may run for up to 300 s plus its
 * sandbox's start. This makes, once, a dispatcher of the same class as fetch's own
 * (undici's Agent) without those limits; the SDK's own timeout still applies. If
 * fetch's dispatcher is not a plain Agent (a proxy or mock was installed), or
 * anything else is off, it returns undefined and fetch's defaults stay.
 */
function patientDispatcher(): Promise<unknown> {
  patient ??= (async () => {
    try {
      const g = globalThis as unknown as Record<symbol, unknown>;
      if (g[UNDICI_DISPATCHER] === undefined) await (await fetch("data:,")).arrayBuffer();
      const current = g[UNDICI_DISPATCHER] as { constructor?: unknown } | undefined;
      const Ctor = current?.constructor as (new (options: object) => unknown) | undefined;
      if (typeof Ctor !== "function" || Ctor.name !== "Agent") return undefined;
      return new Ctor({ headersTimeout: 0, bodyTimeout: 0 });
    } catch {
      return undefined;
    }
  })();
  return patient;
}

/** Percent-encodes one path segment (an id or a name). */
export function seg(value: string): string {
  if (typeof value !== "string" || value === "") throw new SbxError(`expected a non-empty id or name, got ${String(value)}`);
  return encodeURIComponent(value);
}

function queryString(query: Query | undefined): string {
  if (!query) return "";
  let params: URLSearchParams;
  if (query instanceof URLSearchParams) {
    params = query;
  } else {
    params = new URLSearchParams();
    for (const [k, v] of Object.entries(query)) if (v !== undefined) params.append(k, String(v));
  }
  const s = params.toString();
  return s ? `?${s}` : "";
}

function describe(e: unknown): string {
  if (e instanceof Error) {
    const cause = e.cause instanceof Error ? e.cause.message || e.cause.name : "";
    const code = (e.cause as { code?: unknown } | undefined)?.code;
    let s = e.message;
    if (cause && cause !== s) s += `: ${cause}`;
    if (typeof code === "string" && !s.includes(code)) s += ` (${code})`;
    return s;
  }
  return String(e);
}

/** Wraps a fetch or body-read failure. */
export function connectionError(e: unknown, what: string, timeoutSeconds: number | null): SbxError {
  if (e instanceof SbxError) return e;
  const name = (e as { name?: unknown } | null)?.name;
  if (name === "TimeoutError" || name === "AbortError") {
    const after = timeoutSeconds != null ? ` after ${timeoutSeconds} s` : "";
    return new SbxConnectionError(`${what}: no answer${after} (the client's timeout)`, { cause: e });
  }
  return new SbxConnectionError(`${what}: ${describe(e)}`, { cause: e });
}

/** Turns an error answer into the right `SbxApiError`. */
export async function errorFrom(res: Response): Promise<SbxApiError> {
  let text = "";
  try {
    text = await res.text();
  } catch {
    // The status alone still says what happened.
  }
  let body: unknown = text;
  try {
    body = text ? JSON.parse(text) : undefined;
  } catch {
    // Not JSON (a proxy's page, say): keep the text.
  }
  const err = (body as { error?: { code?: unknown; message?: unknown } } | undefined)?.error;
  const code = typeof err?.code === "string" && err.code ? err.code : codeForStatus(res.status);
  let message: string;
  if (typeof err?.message === "string" && err.message) message = err.message;
  else message = (typeof body === "string" && body.trim().slice(0, 500)) || `HTTP ${res.status} ${res.statusText}`.trim();
  return apiError(res.status, code, message, body);
}

export class Transport {
  constructor(
    readonly baseUrl: string,
    private readonly apiKey: string | undefined,
    readonly timeoutSeconds: number | null,
  ) {}

  /** @internal The Authorization header's value, if there is a key. */
  get authorization(): string | undefined {
    return this.apiKey ? `Bearer ${this.apiKey}` : undefined;
  }

  /** Sends a request and returns the response if it is 2xx; throws otherwise. */
  async send(method: string, path: string, opts: SendOptions = {}): Promise<Response> {
    const url = this.baseUrl + path + queryString(opts.query);
    const headers: Record<string, string> = { accept: opts.accept ?? "application/json" };
    if (opts.auth !== false && this.apiKey) headers.authorization = `Bearer ${this.apiKey}`;
    const init: RequestInit & { dispatcher?: unknown } = { method, headers };
    if (opts.json !== undefined) {
      headers["content-type"] = "application/json";
      init.body = JSON.stringify(opts.json);
    } else if (opts.bytes !== undefined) {
      headers["content-type"] = "application/octet-stream";
      init.body = opts.bytes as unknown as BodyInit;
    }
    const timeout = opts.timeoutSeconds !== undefined ? opts.timeoutSeconds : this.timeoutSeconds;
    if (timeout != null && timeout > 0) init.signal = AbortSignal.timeout(Math.ceil(timeout * 1000));
    if (opts.slowHeaders) {
      const d = await patientDispatcher();
      if (d !== undefined) init.dispatcher = d;
    }
    const what = `${method} ${url}`;
    let res: Response;
    try {
      res = await fetch(url, init);
    } catch (e) {
      throw connectionError(e, what, timeout);
    }
    if (!res.ok) throw await errorFrom(res);
    return res;
  }

  /** Sends a request and returns the parsed JSON answer (undefined for an empty body). */
  async json<T = unknown>(method: string, path: string, opts: SendOptions = {}): Promise<T> {
    const res = await this.send(method, path, opts);
    let text: string;
    try {
      text = await res.text();
    } catch (e) {
      throw connectionError(e, `${method} ${this.baseUrl}${path}`, this.timeoutSeconds);
    }
    if (!text) return undefined as T;
    try {
      return JSON.parse(text) as T;
    } catch {
      throw new SbxError(`${method} ${path}: the answer is not JSON: ${text.slice(0, 200)}`);
    }
  }

  /** Sends a request and returns the raw answer body. */
  async bytes(method: string, path: string, opts: SendOptions = {}): Promise<Uint8Array> {
    const res = await this.send(method, path, { accept: "application/octet-stream", ...opts });
    try {
      return new Uint8Array(await res.arrayBuffer());
    } catch (e) {
      throw connectionError(e, `${method} ${this.baseUrl}${path}`, this.timeoutSeconds);
    }
  }
}

/**
 * Reads an exec's NDJSON stream to its `exit` line, calling the callbacks with each
 * output chunk, and returns the whole result. An `error` line throws its SbxApiError.
 */
/** The bytes of a base64 string (an exec answer's fields with `"encoding": "base64"`). */
export function fromBase64(s: string): Uint8Array {
  const bin = atob(s);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

/** The base64 of some bytes. */
export function toBase64(bytes: Uint8Array): string {
  let bin = "";
  for (let i = 0; i < bytes.length; i += 0x8000) bin += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(bin);
}

/**
 * Reads an NDJSON exec stream of `"encoding": "base64"`: each data field decoded on its
 * own (base64 pieces cannot be joined as text); resolves to the exit line and the bytes.
 */
export async function readExecStreamBytes(
  res: Response,
  timeoutSeconds: number | null,
): Promise<{ exit: ExecResult; stdout: Uint8Array; stderr: Uint8Array }> {
  const parts: Record<"stdout" | "stderr", Uint8Array[]> = { stdout: [], stderr: [] };
  const collect = (k: "stdout" | "stderr") => (chunk: string) => parts[k].push(fromBase64(chunk));
  const exit = await readExecStream(res, collect("stdout"), collect("stderr"), timeoutSeconds);
  const join = (list: Uint8Array[]) => {
    const out = new Uint8Array(list.reduce((n, p) => n + p.length, 0));
    let at = 0;
    for (const p of list) {
      out.set(p, at);
      at += p.length;
    }
    return out;
  };
  return { exit, stdout: join(parts.stdout), stderr: join(parts.stderr) };
}

/**
 * The JSON objects of an NDJSON answer, one per line as they arrive (blank lines and
 * keep-alives skipped). The body is let go when the caller stops iterating.
 */
export async function* ndjsonObjects(res: Response, what: string): AsyncGenerator<JsonObject> {
  if (!res.body) throw new SbxConnectionError(`${what}: the answer has no body`);
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let pending = "";
  try {
    while (true) {
      const { done, value } = await reader.read();
      if (done) return;
      pending += decoder.decode(value, { stream: true });
      let nl: number;
      while ((nl = pending.indexOf("\n")) >= 0) {
        const line = pending.slice(0, nl).trim();
        pending = pending.slice(nl + 1);
        if (!line) continue;
        const m = JSON.parse(line) as JsonObject;
        if (m.type !== "keepalive") yield m;
      }
    }
  } finally {
    reader.releaseLock();
    await res.body.cancel().catch(() => undefined);
  }
}

export async function readExecStream(
  res: Response,
  onStdout: ((chunk: string) => void) | undefined,
  onStderr: ((chunk: string) => void) | undefined,
  timeoutSeconds: number | null,
): Promise<ExecResult> {
  const what = "reading the exec stream";
  if (!res.body) throw new SbxConnectionError(`${what}: the answer has no body`);
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let pending = "";
  let stdout = "";
  let stderr = "";

  const handle = (line: string): ExecResult | undefined => {
    if (!line.trim()) return undefined;
    let msg: JsonObject;
    try {
      msg = JSON.parse(line) as JsonObject;
    } catch {
      throw new SbxError(`${what}: a line is not JSON: ${line.slice(0, 200)}`);
    }
    switch (msg.type) {
      case "stdout": {
        const data = typeof msg.data === "string" ? msg.data : "";
        stdout += data;
        if (data) onStdout?.(data);
        return undefined;
      }
      case "stderr": {
        const data = typeof msg.data === "string" ? msg.data : "";
        stderr += data;
        if (data) onStderr?.(data);
        return undefined;
      }
      case "exit":
        return execResultFromJson({ ...msg, stdout, stderr });
      case "error": {
        const err = (msg.error ?? {}) as { code?: unknown; message?: unknown };
        const code = typeof err.code === "string" ? err.code : "internal";
        const message = typeof err.message === "string" ? err.message : "the exec failed";
        throw apiError(statusForCode(code), code, message, msg);
      }
      default:
        return undefined; // keepalive, or a line type this SDK does not know yet
    }
  };

  try {
    for (;;) {
      let chunk: ReadableStreamReadResult<Uint8Array>;
      try {
        chunk = await reader.read();
      } catch (e) {
        throw connectionError(e, what, timeoutSeconds);
      }
      if (chunk.done) break;
      pending += decoder.decode(chunk.value, { stream: true });
      let start = 0;
      let nl: number;
      while ((nl = pending.indexOf("\n", start)) >= 0) {
        const result = handle(pending.slice(start, nl));
        if (result) return result;
        start = nl + 1;
      }
      pending = pending.slice(start);
    }
    pending += decoder.decode();
    const result = handle(pending);
    if (result) return result;
    throw new SbxConnectionError(`${what}: the stream ended before its exit line`);
  } finally {
    reader.cancel().catch(() => undefined);
  }
}
