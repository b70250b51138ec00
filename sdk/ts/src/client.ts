import { readFileSync } from "node:fs";

import { Disk } from "./disk.js";
import { defined } from "./exec.js";
import { Transport, seg, type Query } from "./http.js";
import { Sandbox, Snapshot } from "./sandbox.js";
import type {
  CreateDiskOptions,
  CreateOptions,
  Deleted,
  DiskData,
  Health,
  JsonObject,
  ListSandboxesOptions,
  SandboxData,
  SnapshotData,
  Usage,
} from "./types.js";

export const DEFAULT_URL = "http://127.0.0.1:7070";
export const DEFAULT_DATA_DIR = "/var/lib/sbx";
/** The default client-side timeout per request, in seconds. */
export const DEFAULT_TIMEOUT_SECONDS = 600;

export interface ClientOptions {
  /** The daemon's URL; default `$SBX_URL`, else http://127.0.0.1:7070. */
  url?: string;
  /** The API key; default `$SBX_API_KEY`, else the file `$SBX_DATA_DIR/api-key` (data dir /var/lib/sbx). */
  apiKey?: string;
  /**
   * How long to wait for an answer, in seconds (default 600; null or 0: forever).
   * An exec always gets at least its own `timeoutSeconds` plus some room.
   */
  timeoutSeconds?: number | null;
}

/** The key from `$SBX_API_KEY`, else from `<data dir>/api-key`; undefined if neither is there. */
function defaultApiKey(): string | undefined {
  const fromEnv = process.env.SBX_API_KEY;
  if (fromEnv) return fromEnv.trim();
  const dir = process.env.SBX_DATA_DIR || DEFAULT_DATA_DIR;
  try {
    return readFileSync(`${dir.replace(/\/+$/, "")}/api-key`, "utf8").trim() || undefined;
  } catch {
    return undefined;
  }
}

function resourcesField(r: CreateOptions["resources"]): JsonObject | undefined {
  if (r === undefined) return undefined;
  return defined({ cpus: r.cpus, memory_mb: r.memoryMb, pids: r.pids });
}

/** A client for one sbxd. Cheap to make; it holds no connection of its own. */
export class Client {
  /** The daemon's base URL, without a trailing slash. */
  readonly url: string;
  /** @internal */
  readonly http: Transport;

  constructor(options: ClientOptions = {}) {
    const url = options.url || process.env.SBX_URL || DEFAULT_URL;
    this.url = url.replace(/\/+$/, "");
    const apiKey = options.apiKey !== undefined ? options.apiKey : defaultApiKey();
    const timeout = options.timeoutSeconds === undefined ? DEFAULT_TIMEOUT_SECONDS : options.timeoutSeconds;
    this.http = new Transport(this.url, apiKey || undefined, timeout);
  }

  /** `{status: "ok", version}`; needs no key. */
  health(): Promise<Health> {
    return this.http.json<Health>("GET", "/v1/health", { auth: false });
  }

  /** Creates a sandbox and resolves once it can run commands. */
  async create(options: CreateOptions = {}): Promise<Sandbox> {
    const network = typeof options.network === "string" ? { mode: options.network } : options.network;
    const body = defined({
      type: options.type,
      isolation: options.isolation,
      name: options.name,
      image: options.image,
      from: options.from,
      ttl_seconds: options.ttlSeconds,
      ttl_action: options.ttlAction,
      idle_timeout_seconds: options.idleTimeoutSeconds,
      auto_resume: options.autoResume,
      public: options.public,
      no_env: options.noEnv,
      no_new_privs: options.noNewPrivs,
      user: options.user,
      env: options.env,
      metadata: options.metadata,
      network,
      resources: resourcesField(options.resources),
      disks: options.disks?.map((d) => ({ id: d.id, mount_path: d.mountPath })),
    });
    const d = await this.http.json<SandboxData>("POST", "/v1/sandboxes", { json: body });
    return new Sandbox(this, d);
  }

  /** The sandbox with this id; `NotFoundError` if there is none. */
  async getSandbox(id: string): Promise<Sandbox> {
    return new Sandbox(this, await this.http.json<SandboxData>("GET", `/v1/sandboxes/${seg(id)}`));
  }

  /** The sandboxes, oldest first, optionally filtered by name, state and metadata. */
  async listSandboxes(filter: ListSandboxesOptions = {}): Promise<Sandbox[]> {
    const query = new URLSearchParams();
    if (filter.name !== undefined) query.append("name", filter.name);
    if (filter.state !== undefined) query.append("state", filter.state);
    for (const [k, v] of Object.entries(filter.metadata ?? {})) query.append(`metadata.${k}`, v);
    const d = await this.http.json<{ sandboxes?: SandboxData[] }>("GET", "/v1/sandboxes", { query });
    return (d?.sandboxes ?? []).map((s) => new Sandbox(this, s));
  }

  /**
   * Billed seconds and cost per sandbox, per type and in total, plus serverless calls,
   * within [from, to). Times are `Date`s, RFC 3339 strings or Unix seconds; both
   * default to the whole history.
   */
  async usage(options: { from?: Date | string | number; to?: Date | string | number } = {}): Promise<Usage> {
    const query = new URLSearchParams();
    const fmt = (t: Date | string | number): string =>
      t instanceof Date ? (t.getTime() / 1000).toFixed(3) : String(t);
    if (options.from !== undefined) query.append("from", fmt(options.from));
    if (options.to !== undefined) query.append("to", fmt(options.to));
    return this.http.json<Usage>("GET", "/v1/usage", { query });
  }

  /** Sets a daemon secret: injected as env into every exec of sandboxes without `noEnv`. */
  async setSecret(name: string, value: string): Promise<JsonObject> {
    return this.http.json<JsonObject>("PUT", `/v1/secrets/${seg(name)}`, { json: { value } });
  }

  /** The secrets' names (values never come back out of the API). */
  async listSecrets(): Promise<string[]> {
    const d = await this.http.json<{ secrets?: { name: string }[] }>("GET", "/v1/secrets");
    return (d?.secrets ?? []).map((s) => s.name);
  }

  async deleteSecret(name: string): Promise<JsonObject> {
    return this.http.json<JsonObject>("DELETE", `/v1/secrets/${seg(name)}`);
  }

  /** Creates a persistent disk. */
  async createDisk(options: CreateDiskOptions = {}): Promise<Disk> {
    const body = defined({ name: options.name, size_mb: options.sizeMb });
    return new Disk(this, await this.http.json<DiskData>("POST", "/v1/disks", { json: body }));
  }

  /** The disk with this id or name; `NotFoundError` if there is none. */
  async getDisk(idOrName: string): Promise<Disk> {
    return new Disk(this, await this.http.json<DiskData>("GET", `/v1/disks/${seg(idOrName)}`));
  }

  async listDisks(): Promise<Disk[]> {
    const d = await this.http.json<{ disks?: DiskData[] }>("GET", "/v1/disks");
    return (d?.disks ?? []).map((x) => new Disk(this, x));
  }

  /** The named snapshot; `NotFoundError` if there is none. */
  async getSnapshot(name: string): Promise<Snapshot> {
    return new Snapshot(this, await this.http.json<SnapshotData>("GET", `/v1/snapshots/${seg(name)}`));
  }

  async listSnapshots(): Promise<Snapshot[]> {
    const d = await this.http.json<{ snapshots?: SnapshotData[] }>("GET", "/v1/snapshots");
    return (d?.snapshots ?? []).map((s) => new Snapshot(this, s));
  }

  /** Deletes a named snapshot: `{"type": "snapshot.named.deleted", "name"}`. */
  deleteNamedSnapshot(name: string): Promise<Deleted> {
    return this.http.json<Deleted>("DELETE", `/v1/snapshots/${seg(name)}`);
  }

  /**
   * A raw call: sends `body` as JSON and returns the parsed answer, throwing the
   * usual errors. `path` starts with `/v1/`.
   */
  request<T = unknown>(method: string, path: string, options: { query?: Query; body?: unknown } = {}): Promise<T> {
    return this.http.json<T>(method.toUpperCase(), path, { query: options.query, json: options.body });
  }
}
