import { SbxConnectionError } from "./errors.js";
import { budget, defined } from "./exec.js";
import { ndjsonObjects, seg, type Transport } from "./http.js";
import type { JsonObject } from "./types.js";

/**
 * One result of a cell: the last expression's value (`is_main_result`) or something it
 * displayed. `text` is its repr; the rich forms are there when the object offers them
 * (`png`, `jpeg` and `pdf` base64, the others text).
 */
export interface CodeResult {
  is_main_result: boolean;
  text?: string;
  html?: string;
  markdown?: string;
  svg?: string;
  png?: string;
  jpeg?: string;
  pdf?: string;
  latex?: string;
  json?: unknown;
  javascript?: string;
}

export interface ExecutionError {
  name: string;
  value: string;
  traceback: string;
}

/** What a cell did, in E2B's shape; `text` is the main result's text. */
export interface Execution {
  results: CodeResult[];
  logs: { stdout: string[]; stderr: string[] };
  error: ExecutionError | null;
  executionCount: number;
  context: string;
  timedOut: boolean;
  restarted: boolean;
  /** Output past the daemon's cap was left out (never when streamed). */
  truncated: boolean;
  text: string | undefined;
}

export interface CodeContextData {
  id: string;
  language: string;
  cwd: string;
  user: string;
  pid: number;
  started_at?: string;
}

export interface RunCodeOptions {
  /** `python` (default) or `bash`. */
  language?: string;
  /** A context (or its id); default: the language's own context, made on first use. */
  context?: string | CodeContextData;
  /** For this cell only. */
  env?: Record<string, string>;
  /** Default 300: then the cell is interrupted. */
  timeoutSeconds?: number;
  onStdout?: (text: string) => void;
  onStderr?: (text: string) => void;
  onResult?: (result: CodeResult) => void;
  onError?: (error: ExecutionError) => void;
}

function execution(d: JsonObject): Execution {
  const results = (Array.isArray(d.results) ? d.results : []) as unknown as CodeResult[];
  const logs = (d.logs ?? {}) as { stdout?: string[]; stderr?: string[] };
  return {
    results,
    logs: { stdout: logs.stdout ?? [], stderr: logs.stderr ?? [] },
    error: (d.error as unknown as ExecutionError | null) ?? null,
    executionCount: Number(d.execution_count ?? 0),
    context: String(d.context ?? ""),
    timedOut: Boolean(d.timed_out),
    restarted: Boolean(d.restarted),
    truncated: Boolean(d.truncated),
    text: results.find((r) => r.is_main_result)?.text,
  };
}

/** `sb.runCode(code, options)`: code in a long-lived interpreter of the sandbox. */
export async function runCode(http: Transport, base: string, code: string, options: RunCodeOptions = {}): Promise<Execution> {
  const context = typeof options.context === "object" ? options.context.id : options.context;
  const body = defined({
    code,
    language: options.language,
    context,
    env: options.env,
    timeout_seconds: options.timeoutSeconds,
  });
  // The daemon may wait up to the timeout for earlier cells, start an interpreter (30 s),
  // run the cell, and replace a stuck one (3 s, then 30 s).
  const wait = budget(http.timeoutSeconds, 2 * (options.timeoutSeconds ?? 300) + 93);
  const { onStdout, onStderr, onResult, onError } = options;
  if (!onStdout && !onStderr && !onResult && !onError) {
    return execution(await http.json<JsonObject>("POST", `${base}/code`, { json: body, timeoutSeconds: wait }));
  }
  const res = await http.send("POST", `${base}/code`, { json: body, accept: "application/x-ndjson", timeoutSeconds: wait });
  if (!(res.headers.get("content-type") ?? "").includes("application/x-ndjson")) {
    return execution((await res.json()) as JsonObject);
  }
  const out: JsonObject = { results: [], logs: { stdout: [], stderr: [] }, error: null };
  const results = out.results as unknown as CodeResult[];
  const logs = out.logs as unknown as { stdout: string[]; stderr: string[] };
  for await (const m of ndjsonObjects(res, "the code stream")) {
    if (m.type === "stdout" || m.type === "stderr") {
      const text = String(m.text ?? "");
      logs[m.type].push(text);
      (m.type === "stdout" ? onStdout : onStderr)?.(text);
    } else if (m.type === "result") {
      const { type: _type, ...r } = m;
      results.push(r as unknown as CodeResult);
      onResult?.(r as unknown as CodeResult);
    } else if (m.type === "error" && m.error) {
      const e = m.error as { message?: string };
      throw new SbxConnectionError(`the cell failed: ${e.message ?? "unknown"}`);
    } else if (m.type === "error") {
      const e = { name: String(m.name ?? ""), value: String(m.value ?? ""), traceback: String(m.traceback ?? "") };
      out.error = e as unknown as JsonObject;
      onError?.(e);
    } else if (m.type === "end") {
      return execution({ ...out, ...m });
    }
  }
  throw new SbxConnectionError("the code stream ended before the cell did");
}

/** A sandbox's code contexts: `sb.codeContexts`. */
export class CodeContexts {
  constructor(
    private readonly http: Transport,
    private readonly base: string,
  ) {}

  create(options: { language?: string; cwd?: string; user?: string } = {}): Promise<CodeContextData> {
    return this.http.json<CodeContextData>("POST", `${this.base}/code/contexts`, { json: defined(options) });
  }

  async list(): Promise<CodeContextData[]> {
    const d = await this.http.json<{ contexts: CodeContextData[] }>("GET", `${this.base}/code/contexts`);
    return d.contexts;
  }

  restart(context: string | CodeContextData): Promise<CodeContextData> {
    const id = typeof context === "object" ? context.id : context;
    return this.http.json<CodeContextData>("POST", `${this.base}/code/contexts/${seg(id)}/restart`, { json: {} });
  }

  delete(context: string | CodeContextData): Promise<JsonObject> {
    const id = typeof context === "object" ? context.id : context;
    return this.http.json<JsonObject>("DELETE", `${this.base}/code/contexts/${seg(id)}`);
  }
}
