import type { Client } from "./client.js";
import { ExecError } from "./errors.js";
import { budget, cmdField, defined } from "./exec.js";
import { seg } from "./http.js";
import {
  execResultFromJson,
  type Command,
  type Deleted,
  type DiskData,
  type DiskExecOptions,
  type ExecResult,
  type JsonObject,
  type WriteFileResult,
} from "./types.js";

/** The daemon's default and maximum timeout for a disk call, in seconds. */
const DISK_EXEC_TIMEOUT = 300;
/** Room on top of the command's limit for the call's sandbox to start and go. */
const DISK_EXEC_OVERHEAD = 60;

/**
 * A persistent disk: a filesystem that outlives sandboxes. Each `exec` is a
 * serverless call: a fresh sandbox with the disk at /mnt/disk runs one command and
 * is gone, so only what the command writes under /mnt/disk is kept.
 */
export class Disk {
  /** The raw JSON from the daemon, as of the last call that returned it. */
  data: DiskData;

  constructor(
    private readonly client: Client,
    data: DiskData,
  ) {
    this.data = data;
  }

  get id(): string {
    return this.data.id;
  }

  get name(): string | null {
    return this.data.name ?? null;
  }

  get sizeMb(): number {
    return this.data.size_mb;
  }

  get usedBytes(): number {
    return this.data.used_bytes;
  }

  private path(suffix = ""): string {
    return `/v1/disks/${seg(this.id)}${suffix}`;
  }

  /**
   * Runs one command in a fresh sandbox with this disk at /mnt/disk (also the
   * default working directory). Past `timeoutSeconds` (default and maximum 300)
   * the call throws `ExecTimeoutError`, whose `result` holds the partial output.
   */
  async exec(command: Command, options: DiskExecOptions = {}): Promise<ExecResult> {
    const body = defined({
      cmd: cmdField(command),
      cwd: options.cwd,
      env: options.env,
      timeout_seconds: options.timeoutSeconds,
      image: options.image,
      from: options.from,
      network: typeof options.network === "string" ? { mode: options.network } : options.network,
      isolation: options.isolation,
    });
    const limit = options.timeoutSeconds ?? DISK_EXEC_TIMEOUT;
    const d = await this.client.http.json<JsonObject>("POST", this.path("/exec"), {
      json: body,
      timeoutSeconds: budget(this.client.http.timeoutSeconds, limit + DISK_EXEC_OVERHEAD),
      slowHeaders: limit > DISK_EXEC_TIMEOUT - DISK_EXEC_OVERHEAD,
    });
    const result = execResultFromJson(d);
    if (options.check && result.exitCode !== 0) throw new ExecError(result);
    return result;
  }

  /**
   * The disk's files without a sandbox, in the shape of `sandbox.files`: `read` (text),
   * `readBytes` and `write`.
   */
  get files(): { read(path: string): Promise<string>; readBytes(path: string): Promise<Uint8Array>; write(path: string, data: string | Uint8Array): Promise<WriteFileResult> } {
    return {
      readBytes: (path: string) => this.readFile(path),
      read: async (path: string) => new TextDecoder().decode(await this.readFile(path)),
      write: (path: string, data: string | Uint8Array) => this.writeFile(path, data),
    };
  }

  /** The bytes of a file on the disk (`path` is relative to the disk's root); `files.readBytes`. */
  readFile(path: string): Promise<Uint8Array> {
    return this.client.http.bytes("GET", this.path("/files"), { query: { path } });
  }

  /** Writes a file on the disk, replacing it and creating missing directories; `files.write`. */
  async writeFile(path: string, data: string | Uint8Array): Promise<WriteFileResult> {
    const bytes = typeof data === "string" ? new TextEncoder().encode(data) : data;
    const d = await this.client.http.json<JsonObject>("PUT", this.path("/files"), { query: { path }, bytes });
    return {
      path: typeof d?.path === "string" ? d.path : path,
      sizeBytes: typeof d?.size_bytes === "number" ? d.size_bytes : bytes.byteLength,
    };
  }

  /** Reloads `data` (and so `usedBytes`) from the daemon. */
  async refresh(): Promise<this> {
    this.data = await this.client.http.json<DiskData>("GET", this.path());
    return this;
  }

  /** Deletes the disk and its files; 409 `ConflictError` while a sandbox uses it. */
  delete(): Promise<Deleted> {
    return this.client.http.json<Deleted>("DELETE", this.path());
  }
}
