import { Terminal } from "./terminal.js";
import { ndjsonObjects, type Transport } from "./http.js";
import { cmdField, defined } from "./exec.js";
import type { Command, JsonObject } from "./types.js";

/** What the daemon says of a background process. */
export interface ProcessData {
  pid: number;
  cmd: string[];
  cwd: string;
  /** Who runs it: "root" or the user it was started as. */
  user: string;
  state: "running" | "exited";
  exit_code: number | null;
  signal: number | null;
  error: string | null;
  started_at: string;
  ended_at: string | null;
  stdin_open: boolean;
  tty: boolean;
  next_seq: number;
  type?: string;
}

/** One event of a process's output stream. */
export type OutputEvent =
  | { type: "stdout" | "stderr"; seq: number; data: string }
  | { type: "gap"; from: number; to: number }
  | { type: "exit"; pid: number; exit_code: number | null; signal: number | null; error: string | null; next_seq: number };

/** A background process in a sandbox. It runs on its own; this object only talks about it. */
export class Process {
  data: ProcessData;

  constructor(
    private readonly http: Transport,
    private readonly base: string,
    data: ProcessData,
  ) {
    this.data = data;
  }

  get pid(): number {
    return this.data.pid;
  }

  private path(suffix = ""): string {
    return `${this.base}/processes/${this.pid}${suffix}`;
  }

  async info(): Promise<ProcessData> {
    this.data = await this.http.json<ProcessData>("GET", this.path());
    return this.data;
  }

  /** Sends a signal (a number or a name such as "TERM") to the process's group. */
  signal(sig: number | string = "TERM"): Promise<JsonObject> {
    return this.http.json<JsonObject>("POST", this.path("/signal"), { json: { signal: sig } });
  }

  kill(): Promise<JsonObject> {
    return this.signal("KILL");
  }

  sendStdin(data: string, options: { eof?: boolean } = {}): Promise<JsonObject> {
    return this.http.json<JsonObject>("POST", this.path("/stdin"), { json: { data, eof: options.eof ?? false } });
  }

  closeStdin(): Promise<JsonObject> {
    return this.sendStdin("", { eof: true });
  }

  /**
   * The output from sequence number `since`: stdout/stderr chunks, a `gap` for output
   * that already left the ring, and `exit` once the process has ended. With `follow`,
   * waits for more until it ends. To resume, pass the last `seq` + 1.
   */
  /**
   * This tty process's terminal (started with `tty: true`): type with `send`, `resize`,
   * and read its output with `for await`. Output from `since` (default: what the ring
   * still holds) comes first. `ConflictError` for a process without a terminal.
   */
  attach(options: { since?: number } = {}): Promise<Terminal> {
    const q = options.since === undefined ? "" : `?since=${options.since}`;
    return Terminal.open(this.http, this.path("/tty") + q);
  }

  async *output(options: { follow?: boolean; since?: number } = {}): AsyncGenerator<OutputEvent> {
    const res = await this.http.send("GET", this.path("/output"), {
      query: { since: options.since ?? 0, follow: options.follow ? "true" : "false" },
      accept: "application/x-ndjson",
      timeoutSeconds: null,
    });
    for await (const ev of ndjsonObjects(res, "the output stream")) yield ev as unknown as OutputEvent;
  }

  /** Resolves once the process has ended, with its final description. */
  async wait(): Promise<ProcessData> {
    for await (const ev of this.output({ follow: true, since: this.data.next_seq })) {
      if (ev.type === "exit") break;
    }
    return this.info();
  }
}

/** The background processes of a sandbox: `sb.processes`. */
export class Processes {
  constructor(
    private readonly http: Transport,
    private readonly base: string,
  ) {}

  /**
   * Starts a background process. With `tty` it runs on a pseudo-terminal of `cols` x
   * `rows` (default 80 x 24), to attach to with `process.attach()`.
   */
  async start(
    command: Command,
    options: {
      cwd?: string;
      env?: Record<string, string>;
      tty?: boolean;
      cols?: number;
      rows?: number;
      /** Run as this user of the sandbox (a name or a uid) instead of its default (`sandbox.user`). */
      user?: string;
    } = {},
  ): Promise<Process> {
    const body = defined({
      cmd: cmdField(command),
      cwd: options.cwd,
      env: options.env,
      tty: options.tty || undefined,
      cols: options.cols,
      rows: options.rows,
      user: options.user,
    });
    const d = await this.http.json<ProcessData>("POST", `${this.base}/processes`, { json: body });
    return new Process(this.http, this.base, d);
  }

  async list(): Promise<Process[]> {
    const d = await this.http.json<{ processes?: ProcessData[] }>("GET", `${this.base}/processes`);
    return (d?.processes ?? []).map((p) => new Process(this.http, this.base, p));
  }

  async get(pid: number): Promise<Process> {
    const d = await this.http.json<ProcessData>("GET", `${this.base}/processes/${pid}`);
    return new Process(this.http, this.base, d);
  }
}
