import type { Transport } from "./http.js";
import { NotFoundError, SbxConnectionError } from "./errors.js";
import type { JsonObject } from "./types.js";

/** One entry of a sandbox's file system, as `files.list` and `files.stat` describe it. */
export interface FileEntry {
  name: string;
  path: string;
  type: "file" | "dir" | "symlink" | "other";
  size: number;
  /** Permission bits, e.g. 0o644. */
  mode: number;
  /** RFC 3339. */
  mtime: string;
  /** A symlink's target. */
  target?: string;
  uid: number;
  gid: number;
  /** The names of uid and gid in the sandbox's /etc/passwd and /etc/group ("" if none). */
  owner: string;
  group: string;
}

/**
 * `user`: the sandbox user (a name or uid) a file call runs as. The kernel then checks
 * each access as theirs, and what the call makes is theirs. The sandbox's `user` by default.
 */
export interface AsUser {
  user?: string;
}

/**
 * The files of a running sandbox: `sb.files`. Paths are absolute inside the sandbox and
 * resolve inside its root (symlinks too). A paused sandbox is resumed first. Every call
 * but `watch` takes `{ user }` (see AsUser).
 */
export class Files {
  constructor(
    private readonly http: Transport,
    private readonly base: string,
  ) {}

  /** A file's bytes. */
  readBytes(path: string, options: AsUser = {}): Promise<Uint8Array> {
    return this.http.bytes("GET", `${this.base}/files`, { query: { path, user: options.user }, timeoutSeconds: 600 });
  }

  /** A file's text (UTF-8). */
  async read(path: string, options: AsUser = {}): Promise<string> {
    return new TextDecoder().decode(await this.readBytes(path, options));
  }

  /**
   * Writes a whole file; it appears under `path` only once complete. `mode` is its
   * permission bits (setuid, setgid and sticky are dropped); missing folders are made.
   */
  async write(path: string, data: string | Uint8Array, options: { mode?: number } & AsUser = {}): Promise<JsonObject> {
    const bytes = typeof data === "string" ? new TextEncoder().encode(data) : data;
    const query: Record<string, string> = { path };
    if (options.mode !== undefined) query.mode = options.mode.toString(8);
    if (options.user !== undefined) query.user = options.user;
    return this.http.json<JsonObject>("PUT", `${this.base}/files`, { query, bytes, timeoutSeconds: 600 });
  }

  /** The entries of a folder, `depth` levels down (links are not followed). */
  async list(path = "/", options: { depth?: number } & AsUser = {}): Promise<FileEntry[]> {
    const d = await this.http.json<{ entries?: FileEntry[] }>("GET", `${this.base}/files/list`, {
      query: { path, depth: options.depth ?? 1, user: options.user },
    });
    return d?.entries ?? [];
  }

  /** One path (a symlink is described, not followed). */
  stat(path: string, options: AsUser = {}): Promise<FileEntry> {
    return this.http.json<FileEntry>("GET", `${this.base}/files/stat`, { query: { path, user: options.user } });
  }

  async exists(path: string, options: AsUser = {}): Promise<boolean> {
    try {
      await this.stat(path, options);
      return true;
    } catch (e) {
      if (e instanceof NotFoundError) return false;
      throw e;
    }
  }

  /** Deletes a file, link or empty folder (`recursive`: a whole folder). */
  remove(path: string, options: { recursive?: boolean } & AsUser = {}): Promise<JsonObject> {
    return this.http.json<JsonObject>("DELETE", `${this.base}/files`, {
      query: { path, recursive: options.recursive ? "true" : undefined, user: options.user },
    });
  }

  mkdir(path: string, options: { parents?: boolean } & AsUser = {}): Promise<JsonObject> {
    return this.http.json<JsonObject>("POST", `${this.base}/files/mkdir`, {
      query: { user: options.user },
      json: { path, parents: options.parents ?? true },
    });
  }

  /** Renames; refuses to replace an existing target unless `overwrite`. */
  move(from: string, to: string, options: { overwrite?: boolean } & AsUser = {}): Promise<JsonObject> {
    return this.http.json<JsonObject>("POST", `${this.base}/files/move`, {
      query: { user: options.user },
      json: { from, to, overwrite: options.overwrite ?? false },
    });
  }

  /**
   * Watches the folder `path` (with `recursive`, the folders under it on the same
   * filesystem too). Resolves once the watch is in place; iterate the result for events
   * (`create`, `write`, `remove`, `rename` with `to`, or `overflow`/`error`), and `close()`
   * it to stop. It also ends when the folder goes.
   */
  async watch(path: string, options: { recursive?: boolean } = {}): Promise<FileWatch> {
    const res = await this.http.send("GET", `${this.base}/files/watch`, {
      query: { path, recursive: options.recursive ? "true" : "false" },
      accept: "application/x-ndjson",
      timeoutSeconds: null,
    });
    if (!res.body) throw new SbxConnectionError("the watch has no body");
    const w = new FileWatch(res.body.getReader());
    const first = await w.nextLine();
    if (first?.type !== "watching") {
      await w.close();
      throw new SbxConnectionError(`the watch did not start: ${JSON.stringify(first)}`);
    }
    return w;
  }
}

/** One change seen by a watch. */
export interface FileEvent {
  type: "create" | "write" | "remove" | "rename" | "overflow" | "error";
  path: string;
  is_dir: boolean;
  /** For a rename: the new path, or null when it left the watched folder. */
  to?: string | null;
  message?: string;
}

/** A running watch (`await sb.files.watch(path)`): an async iterable of events. */
export class FileWatch implements AsyncIterable<FileEvent> {
  private pending = "";
  private readonly decoder = new TextDecoder();
  private closed = false;

  constructor(private readonly reader: ReadableStreamDefaultReader<Uint8Array>) {}

  /** The next event line (keep-alives skipped), or null at the end. */
  async nextLine(): Promise<FileEvent | { type: "watching"; path: string } | null> {
    for (;;) {
      const nl = this.pending.indexOf("\n");
      if (nl >= 0) {
        const line = this.pending.slice(0, nl).trim();
        this.pending = this.pending.slice(nl + 1);
        if (!line) continue;
        const ev = JSON.parse(line);
        if (ev.type !== "keepalive") return ev;
        continue;
      }
      if (this.closed) return null;
      let chunk: ReadableStreamReadResult<Uint8Array>;
      try {
        chunk = await this.reader.read();
      } catch (e) {
        if (this.closed) return null;
        throw new SbxConnectionError(`the watch broke: ${String(e)}`);
      }
      if (chunk.done) return null;
      this.pending += this.decoder.decode(chunk.value, { stream: true });
    }
  }

  async *[Symbol.asyncIterator](): AsyncIterator<FileEvent> {
    for (;;) {
      const ev = await this.nextLine();
      if (!ev) return;
      if (ev.type !== "watching") yield ev;
    }
  }

  /** Stops watching (the agent's watch ends with the connection). */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.reader.cancel().catch(() => undefined);
  }
}
