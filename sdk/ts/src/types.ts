/** A JSON object as the daemon sent it (snake_case keys). */
export type JsonObject = { [key: string]: unknown };

/** A command: a string runs as `/bin/sh -c CMD`; an array is the argv (no shell). */
export type Command = string | readonly string[];

export interface ExecTiming {
  /** Milliseconds from the request's arrival to the answer, minus `executeMs`. */
  queueMs: number;
  /** Milliseconds from the start of the command to the exit of its leader. */
  executeMs: number;
}

export interface ExecResult {
  stdout: string;
  stderr: string;
  /** The exit status; 128+N when signal N killed the command, 124 on timeout. */
  exitCode: number;
  /** The signal that killed the command, or null. */
  signal: number | null;
  timedOut: boolean;
  stdoutTruncated: boolean;
  stderrTruncated: boolean;
  timing: ExecTiming;
  costUsd: number;
}

function num(v: unknown, fallback: number): number {
  return typeof v === "number" && Number.isFinite(v) ? v : fallback;
}

/** Converts an exec answer (snake_case) to an `ExecResult`. */
export function execResultFromJson(d: JsonObject): ExecResult {
  const timing = (d.timing && typeof d.timing === "object" ? d.timing : {}) as JsonObject;
  return {
    stdout: typeof d.stdout === "string" ? d.stdout : "",
    stderr: typeof d.stderr === "string" ? d.stderr : "",
    exitCode: num(d.exit_code, -1),
    signal: typeof d.signal === "number" ? d.signal : null,
    timedOut: d.timed_out === true,
    stdoutTruncated: d.stdout_truncated === true,
    stderrTruncated: d.stderr_truncated === true,
    timing: { queueMs: num(timing.queue_ms, 0), executeMs: num(timing.execute_ms, 0) },
    costUsd: num(d.cost_usd, 0),
  };
}

export interface Health {
  status: string;
  version: string;
  /** What this daemon has: hibernate (and the walls that can), memory templates' walls, the btrfs store, and its isolation kinds. */
  features: {
    hibernate: boolean;
    hibernate_isolation?: string[];
    memory_isolation?: string[];
    store: boolean;
    isolation: string[];
    [key: string]: unknown;
  };
  /** The store's use, or null when sandboxes' files are not on a store. */
  store: { size_mb: number; free_mb: number; reserve_mb: number; committed_mb: number; overcommit: number | null } | null;
  /** The microVM wall's accelerator (`kvm` or `tcg`); null without that wall, or while its probe runs. */
  microvm_accel?: string | null;
  [key: string]: unknown;
}

/** The raw JSON of a sandbox. */
export interface SandboxData {
  id: string;
  name: string | null;
  state: string;
  type: string;
  image: string;
  /** Who its commands and file operations run as when a call names no one. */
  user?: string;
  created_at: string;
  expires_at: string | null;
  ttl_seconds: number;
  metadata: Record<string, string>;
  resources: { cpus?: number; memory_mb?: number; pids?: number; disk_mb?: number; [key: string]: unknown };
  billed_seconds: number;
  cost_usd: number;
  error: string | null;
  /** `container`, `gvisor` or `microvm`. */
  isolation?: string;
  /** A microVM's accelerator (`kvm` or `tcg`); microVM sandboxes only. */
  microvm_accel?: string | null;
  [key: string]: unknown;
}

/** The raw JSON of a persistent disk. */
export interface DiskData {
  id: string;
  name: string | null;
  size_mb: number;
  used_bytes: number;
  created_at: string;
  [key: string]: unknown;
}

/** The raw JSON of a named snapshot. */
export interface SnapshotData {
  name: string;
  type?: string;
  image?: string;
  source?: string;
  /** Who its sandboxes run as when their create names no one: its source's user. */
  user?: string;
  parent?: string | null;
  layers?: number;
  size_bytes?: number;
  /** Whether it keeps its source's memory (a memory template), and for which wall. */
  memory?: boolean;
  memory_isolation?: string | null;
  /** That memory may hold the daemon's secrets: `no_env` sandboxes cannot start from it. */
  memory_secrets?: boolean;
  created_at?: string;
  [key: string]: unknown;
}

/** The answer to a delete: `{"type": "sandbox.deleted" | "disk.deleted", "id"}`. */
export interface Deleted {
  type: string;
  id?: string;
  name?: string;
  [key: string]: unknown;
}

export interface Resources {
  cpus?: number;
  memoryMb?: number;
  pids?: number;
}

export interface DiskMount {
  /** The disk's id or name. */
  id: string;
  /** Where the disk appears inside the sandbox. */
  mountPath: string;
}

export interface CreateOptions {
  /** `small` (the daemon's default), `default` or `large`. */
  type?: string;
  /** `container`, `gvisor` or `microvm` (default: the daemon's --default-isolation). */
  isolation?: string;
  /** Unique among sandboxes; matches `[a-z0-9][a-z0-9._-]{0,62}`. */
  name?: string;
  /** An imported image; give either `image` or `from`. */
  image?: string;
  /** A named snapshot to start from. */
  from?: string;
  ttlSeconds?: number;
  /** What the TTL does: `"stop"` (the default) or `"pause"`. */
  ttlAction?: string;
  /** Pause after this many idle seconds (0: never); see the daemon's docs for what counts. */
  idleTimeoutSeconds?: number;
  /** An exec on the paused sandbox resumes it first (default true). */
  autoResume?: boolean;
  /** Its ports open through sbxd's proxy without credentials. */
  public?: boolean;
  noEnv?: boolean;
  /** false: setuid programs (su, sudo) work inside; true (the default): nothing gains privileges by exec. */
  noNewPrivs?: boolean;
  /** Who commands and file operations run as when a call names no one (default: "user" where the image has that user, else "root"). */
  user?: string;
  /** Variables set for every exec. */
  env?: Record<string, string>;
  /** Free labels, usable as list filters. */
  metadata?: Record<string, string>;
  /** A mode (`"none"`, `"outbound"`), or the full rules. */
  network?: string | NetworkRules;
  resources?: Resources;
  disks?: DiskMount[];
}

/**
 * A sandbox's network rules. `allow` and `deny` take CIDRs and domain names
 * (`*.example.com` for any name below it); deny wins; with an allow list only what it
 * names is reachable. The host, cloud metadata and other sandboxes never are.
 */
export interface NetworkRules {
  mode?: "none" | "outbound";
  allow?: string[];
  deny?: string[];
}

/** A sandbox's network as the daemon shows it: its rules, address and bytes so far. */
export interface NetworkInfo {
  mode: "none" | "outbound";
  allow: string[];
  deny: string[];
  /** Its IPv4 address while it has a link (mode outbound and running). */
  address: string | null;
  /** Its IPv6 address while it has a link, when the daemon gives sandboxes IPv6. */
  address6: string | null;
  tx_bytes: number;
  rx_bytes: number;
}

/** A change of a sandbox's lifecycle policy; absent fields stay as they are. */
export interface UpdateOptions {
  /** Restarts the TTL: the sandbox expires this many seconds from now. */
  ttlSeconds?: number;
  ttlAction?: "stop" | "pause";
  idleTimeoutSeconds?: number;
  autoResume?: boolean;
  /** Its ports open through sbxd's proxy without credentials (or no longer). */
  public?: boolean;
}

/** Billed compute and network bytes within a time window (`client.usage()`). */
export interface Usage {
  from: string;
  to: string;
  sandboxes: {
    id: string;
    name: string | null;
    type: string;
    billed_seconds: number;
    cost_usd: number;
    /** Bytes through its links within the window (deleted sandboxes' too). */
    network: { tx_bytes: number; rx_bytes: number };
  }[];
  types: Record<string, { billed_seconds: number; cost_usd: number }>;
  serverless: { calls: number; cost_usd: number };
  total: {
    billed_seconds: number;
    compute_usd: number;
    cost_usd: number;
    network: { tx_bytes: number; rx_bytes: number };
  };
}

export interface ListSandboxesOptions {
  name?: string;
  state?: string;
  /** Every key must match. */
  metadata?: Record<string, string>;
}

export interface ExecOptions {
  /** The working directory (default: the user's home, `/root` for root). */
  cwd?: string;
  /**
   * Run as this user of the sandbox (a name in its /etc/passwd, such as the default
   * image's `"user"`, or a uid) instead of the sandbox's default (`user` at create):
   * its ids, its capabilities (none unless root), its HOME.
   */
  user?: string;
  /** Variables for this command, over the sandbox's own. */
  env?: Record<string, string>;
  /** Fed to the command's stdin, followed by EOF (default: `/dev/null`). */
  stdin?: string;
  /** The daemon kills the command's tree past this (default 60, at most 86400). */
  timeoutSeconds?: number;
  /** Throw `ExecError` when the command exits with a non-zero code. */
  check?: boolean;
  /** Called with each stdout chunk as it arrives (turns on streaming). */
  onStdout?: (chunk: string) => void;
  /** Called with each stderr chunk as it arrives (turns on streaming). */
  onStderr?: (chunk: string) => void;
}

/** `Sandbox.execBytes`'s options: an exec's, with stdin as bytes or text and no callbacks. */
export interface ExecBytesOptions extends Omit<ExecOptions, "stdin" | "onStdout" | "onStderr"> {
  /** Fed to the command's stdin, byte for byte, followed by EOF. */
  stdin?: Uint8Array | string;
}

/** An exec's result with its output as exact bytes. */
export interface ExecBytesResult extends Omit<ExecResult, "stdout" | "stderr"> {
  stdout: Uint8Array;
  stderr: Uint8Array;
}

export interface DiskExecOptions {
  /** The working directory (default `/mnt/disk`). */
  cwd?: string;
  env?: Record<string, string>;
  /** Default and maximum 300; past it the call throws `ExecTimeoutError`. */
  timeoutSeconds?: number;
  /** The image of the call's sandbox (default: the daemon's default image). */
  image?: string;
  /** A named snapshot for the call's sandbox instead of an image. */
  from?: string;
  /** The call's sandbox's network (default: the daemon's default mode). */
  network?: string | NetworkRules;
  /** The call's wall: `"container"`, `"gvisor"` (default: the daemon's default). */
  isolation?: string;
  /** Throw `ExecError` when the command exits with a non-zero code. */
  check?: boolean;
}

export interface CreateDiskOptions {
  name?: string;
  /** The size of the disk's filesystem (daemon default 1024). */
  sizeMb?: number;
}

export interface WriteFileResult {
  path: string;
  sizeBytes: number;
}
