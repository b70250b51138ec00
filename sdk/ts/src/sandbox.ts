import type { Client } from "./client.js";
import { Files } from "./files.js";
import { Processes } from "./processes.js";
import { CodeContexts, runCode, type Execution, type RunCodeOptions } from "./code.js";
import { ExecError, NotFoundError } from "./errors.js";
import { LONG_EXEC_SECONDS, budget, cmdField, defined } from "./exec.js";
import { fromBase64, readExecStream, readExecStreamBytes, seg, toBase64 } from "./http.js";
import {
  execResultFromJson,
  type Command,
  type Deleted,
  type ExecBytesOptions,
  type ExecBytesResult,
  type ExecOptions,
  type ExecResult,
  type JsonObject,
  type NetworkInfo,
  type NetworkRules,
  type SandboxData,
  type SnapshotData,
  type UpdateOptions,
} from "./types.js";

/** The daemon's default exec timeout, in seconds. */
const DEFAULT_EXEC_TIMEOUT = 60;

/** A named snapshot (template) that new sandboxes can start `from`. */
export class Snapshot {
  /** The raw JSON from the daemon. */
  data: SnapshotData;

  constructor(
    private readonly client: Client,
    data: SnapshotData,
  ) {
    this.data = data;
  }

  get name(): string {
    return this.data.name;
  }

  /** `snapshot.named.created` for a snapshot just taken. */
  get type(): string | undefined {
    return this.data.type;
  }

  /** Deletes the snapshot's name; sandboxes made from it keep working. */
  delete(): Promise<Deleted> {
    return this.client.deleteNamedSnapshot(this.name);
  }
}

/** A sandbox: an isolated machine that runs commands until it is deleted or its TTL ends. */
export class Sandbox {
  /** The raw JSON from the daemon, as of the last call that returned it. */
  data: SandboxData;

  /** The sandbox's files (read, write, list...). */
  readonly files: Files;
  /** Its background processes. */
  readonly processes: Processes;
  /** Its code interpreter's contexts (create, list, restart, delete). */
  readonly codeContexts: CodeContexts;

  constructor(
    private readonly client: Client,
    data: SandboxData,
  ) {
    this.data = data;
    this.files = new Files(client.http, `/v1/sandboxes/${seg(data.id)}`);
    this.processes = new Processes(client.http, `/v1/sandboxes/${seg(data.id)}`);
    this.codeContexts = new CodeContexts(client.http, `/v1/sandboxes/${seg(data.id)}`);
  }

  get id(): string {
    return this.data.id;
  }

  /**
   * The URL that reaches `port` inside the sandbox through the daemon's port proxy (send
   * the API key or this sandbox's token as a Bearer header).
   */
  getUrl(port: number, path = "/"): string {
    return `${this.client.http.baseUrl}${this.path(`/ports/${port}`)}${path.startsWith("/") ? path : "/" + path}`;
  }

  /**
   * A URL for `port` that works without credentials for `ttlSeconds` (default 3600, at
   * most 7 days): `getUrl` with a short-lived token of its own (`sbx_token`, stripped by
   * the proxy before the request reaches the sandbox). It reaches this port only.
   */
  async signedUrl(port: number, options: { path?: string; ttlSeconds?: number } = {}): Promise<string> {
    const grant = await this.client.http.json<JsonObject>("POST", this.path("/port-urls"), {
      json: { port, ttl_seconds: options.ttlSeconds ?? 3600 },
    });
    const url = this.getUrl(port, options.path ?? "/");
    return `${url}${url.includes("?") ? "&" : "?"}sbx_token=${encodeURIComponent(String(grant.token))}`;
  }

  /**
   * Resolves once something in the sandbox listens on TCP `port` (any protocol, any
   * address), as its kernel's socket table shows; rejects after `timeoutMs` (default 30 s).
   */
  async waitForPort(port: number, options: { timeoutMs?: number; intervalMs?: number } = {}): Promise<this> {
    const want = port.toString(16).toUpperCase().padStart(4, "0");
    const deadline = Date.now() + (options.timeoutMs ?? 30_000);
    for (;;) {
      for (const table of ["/proc/net/tcp", "/proc/net/tcp6"]) {
        let text: string;
        try {
          text = await this.files.read(table);
        } catch (e) {
          if (e instanceof NotFoundError) continue; // no IPv6 table: fine
          throw e;
        }
        for (const line of text.split("\n").slice(1)) {
          const f = line.trim().split(/\s+/);
          // local_address is ADDR:PORT in hex; state 0A is LISTEN.
          if (f.length > 3 && f[1].split(":").pop() === want && f[3] === "0A") return this;
        }
      }
      if (Date.now() >= deadline) throw new Error(`nothing listens on port ${port} in sandbox ${this.id}`);
      await new Promise((r) => setTimeout(r, options.intervalMs ?? 100));
    }
  }

  get name(): string | null {
    return this.data.name ?? null;
  }

  get state(): string {
    return this.data.state;
  }

  get metadata(): Record<string, string> {
    return this.data.metadata ?? {};
  }

  private path(suffix = ""): string {
    return `/v1/sandboxes/${seg(this.id)}${suffix}`;
  }

  /**
   * Runs code in a long-lived interpreter of the sandbox (Python unless `language` is
   * `bash`): what one call defines, the next call of the same context sees. Resolves to
   * the cell's `Execution` (`results`, `logs`, `error`, `text`); the callbacks get output
   * and results as they come.
   */
  runCode(code: string, options: RunCodeOptions = {}): Promise<Execution> {
    return runCode(this.client.http, this.path(""), code, options);
  }

  /**
   * Runs a command and resolves to its result once it ends. A non-zero exit is a
   * normal result unless `check` is set. With `onStdout` or `onStderr`, the output
   * is streamed to them as it arrives, and the full result is still returned.
   */
  async exec(command: Command, options: ExecOptions = {}): Promise<ExecResult> {
    const body = defined({
      cmd: cmdField(command),
      cwd: options.cwd,
      env: options.env,
      stdin: options.stdin,
      timeout_seconds: options.timeoutSeconds,
      user: options.user,
    });
    const limit = options.timeoutSeconds ?? DEFAULT_EXEC_TIMEOUT;
    const wait = budget(this.client.http.timeoutSeconds, limit + 30);
    const { onStdout, onStderr } = options;
    // A long command is streamed even without callbacks: the stream's keepalive
    // lines keep fetch from giving up on a quiet connection.
    const stream = onStdout !== undefined || onStderr !== undefined || limit > LONG_EXEC_SECONDS;
    let result: ExecResult;
    if (stream) {
      const res = await this.client.http.send("POST", this.path("/exec"), {
        json: body,
        accept: "application/x-ndjson",
        timeoutSeconds: wait,
      });
      if ((res.headers.get("content-type") ?? "").includes("application/x-ndjson")) {
        result = await readExecStream(res, onStdout, onStderr, wait);
      } else {
        // A daemon that does not stream answered with the whole result.
        result = execResultFromJson((await res.json()) as JsonObject);
        if (result.stdout) onStdout?.(result.stdout);
        if (result.stderr) onStderr?.(result.stderr);
      }
    } else {
      const d = await this.client.http.json<JsonObject>("POST", this.path("/exec"), { json: body, timeoutSeconds: wait });
      result = execResultFromJson(d);
    }
    if (options.check && result.exitCode !== 0) throw new ExecError(result);
    return result;
  }

  /**
   * Runs a command like `exec`, with its output (and stdin) as exact bytes: a tar, an
   * image, anything that is not UTF-8 text (the request's `"encoding": "base64"`).
   */
  async execBytes(command: Command, options: ExecBytesOptions = {}): Promise<ExecBytesResult> {
    const stdin = options.stdin;
    const body = defined({
      cmd: cmdField(command),
      cwd: options.cwd,
      env: options.env,
      stdin: stdin === undefined ? undefined : toBase64(typeof stdin === "string" ? new TextEncoder().encode(stdin) : stdin),
      timeout_seconds: options.timeoutSeconds,
      encoding: "base64",
      user: options.user,
    });
    const limit = options.timeoutSeconds ?? DEFAULT_EXEC_TIMEOUT;
    const wait = budget(this.client.http.timeoutSeconds, limit + 30);
    // Streamed: keepalive lines keep fetch from giving up on a quiet command.
    const res = await this.client.http.send("POST", this.path("/exec"), {
      json: body,
      accept: "application/x-ndjson",
      timeoutSeconds: wait,
    });
    let result: ExecBytesResult;
    if ((res.headers.get("content-type") ?? "").includes("application/x-ndjson")) {
      const got = await readExecStreamBytes(res, wait);
      result = { ...got.exit, stdout: got.stdout, stderr: got.stderr };
    } else {
      const d = (await res.json()) as JsonObject;
      const r = execResultFromJson(d);
      result = { ...r, stdout: fromBase64(r.stdout), stderr: fromBase64(r.stderr) };
    }
    if (options.check && result.exitCode !== 0)
      throw new ExecError({ ...result, stdout: new TextDecoder().decode(result.stdout), stderr: new TextDecoder().decode(result.stderr) });
    return result;
  }

  /**
   * Captures the sandbox's files as a named snapshot (a template for `create({ from })`);
   * with `memory: true`, its running memory too (every wall; containers where sbxd has CRIU: sandboxes from it start
   * with its processes running).
   */
  async snapshot(name: string, options?: { memory?: boolean }): Promise<Snapshot> {
    const body: Record<string, unknown> = { name };
    if (options?.memory) body.memory = true;
    const d = await this.client.http.json<SnapshotData>("POST", this.path("/snapshot"), { json: body });
    return new Snapshot(this.client, d);
  }

  /**
   * One new running sandbox with a copy of this one's files; with `memory: true`, started
   * from this running sandbox's memory too (every wall; containers where sbxd has CRIU).
   */
  fork(options?: { count?: undefined; memory?: boolean }): Promise<Sandbox>;
  /** `count` new running sandboxes (1 to 64), each with a copy of this one's files. */
  fork(options: { count: number; memory?: boolean }): Promise<Sandbox[]>;
  async fork(options: { count?: number; memory?: boolean } = {}): Promise<Sandbox | Sandbox[]> {
    const body: Record<string, unknown> = options.count === undefined ? {} : { count: options.count };
    if (options.memory) body.memory = true;
    const d = await this.client.http.json<{ sandboxes?: SandboxData[] }>("POST", this.path("/fork"), { json: body });
    const made = (d?.sandboxes ?? []).map((s) => new Sandbox(this.client, s));
    return options.count === undefined ? made[0]! : made;
  }

  /** Reloads `data` from the daemon. */
  async refresh(): Promise<this> {
    this.data = await this.client.http.json<SandboxData>("GET", this.path());
    return this;
  }

  /** Kills every process and keeps the files. */
  async stop(): Promise<this> {
    this.data = await this.client.http.json<SandboxData>("POST", this.path("/stop"), { json: {} });
    return this;
  }

  /**
   * Pauses the sandbox: `"freeze"` (the default) keeps its memory in RAM and resumes in
   * milliseconds; `"hibernate"` checkpoints it to disk where the daemon supports it.
   * Compute is not billed while paused. Idempotent.
   */
  async pause(options: { mode?: "freeze" | "hibernate" } = {}): Promise<this> {
    this.data = await this.client.http.json<SandboxData>("POST", this.path("/pause"), {
      json: { mode: options.mode ?? "freeze" },
    });
    return this;
  }

  /** Resumes a paused sandbox (an exec resumes it too unless `autoResume` is off). Idempotent. */
  async resume(): Promise<this> {
    this.data = await this.client.http.json<SandboxData>("POST", this.path("/resume"), { json: {} });
    return this;
  }

  /** Changes the lifecycle policy; `ttlSeconds` restarts the TTL from now. */
  async update(options: UpdateOptions): Promise<this> {
    const body = defined({
      ttl_seconds: options.ttlSeconds,
      ttl_action: options.ttlAction,
      idle_timeout_seconds: options.idleTimeoutSeconds,
      auto_resume: options.autoResume,
      public: options.public,
    });
    this.data = await this.client.http.json<SandboxData>("PATCH", this.path(), { json: body });
    return this;
  }

  /**
   * Replaces the sandbox's network rules (the whole object): new connections follow them
   * at once, and a running sandbox gets or loses its link.
   */
  async setNetwork(rules: NetworkRules): Promise<this> {
    this.data = await this.client.http.json<SandboxData>("PATCH", this.path("/network"), { json: rules });
    return this;
  }

  /** Its rules, its address while it has a link, and the bytes it sent and received. */
  get network(): NetworkInfo {
    return this.data.network as NetworkInfo;
  }

  /** Extends the TTL: the sandbox now expires `seconds` from now. */
  async setTimeout(seconds: number): Promise<this> {
    this.data = await this.client.http.json<SandboxData>("POST", this.path("/timeout"), {
      json: { timeout_seconds: seconds },
    });
    return this;
  }

  /** Boots a stopped sandbox again on its files. */
  async start(): Promise<this> {
    this.data = await this.client.http.json<SandboxData>("POST", this.path("/start"), { json: {} });
    return this;
  }

  /** Deletes the sandbox: `{"type": "sandbox.deleted", "id"}`. */
  delete(): Promise<Deleted> {
    return this.client.http.json<Deleted>("DELETE", this.path());
  }
}
