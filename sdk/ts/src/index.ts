/**
 * The TypeScript client for sbxd, the self-hosted sandbox daemon for AI agents'
 * tool calls.
 *
 *     import { Client } from "@sbx/sdk";
 *     const client = new Client();
 *     const sb = await client.create({ image: "busybox", ttlSeconds: 600 });
 *     try {
 *       console.log((await sb.exec("echo hi", { check: true })).stdout);
 *     } finally {
 *       await sb.delete();
 *     }
 */
export { Client, DEFAULT_DATA_DIR, DEFAULT_TIMEOUT_SECONDS, DEFAULT_URL, type ClientOptions } from "./client.js";
export { Disk } from "./disk.js";
export { Sandbox, Snapshot } from "./sandbox.js";
export { Files, FileWatch, type AsUser, type FileEntry, type FileEvent } from "./files.js";
export { Process, Processes, type OutputEvent, type ProcessData } from "./processes.js";
export { Terminal } from "./terminal.js";
export {
  CodeContexts,
  type CodeContextData,
  type CodeResult,
  type Execution,
  type ExecutionError,
  type RunCodeOptions,
} from "./code.js";
export {
  AuthError,
  ConflictError,
  ERROR_STATUS,
  ExecError,
  ExecTimeoutError,
  InvalidRequestError,
  NotFoundError,
  QuotaExceededError,
  SbxApiError,
  SbxConnectionError,
  SbxError,
} from "./errors.js";
export type { Query } from "./http.js";
export type {
  Command,
  CreateDiskOptions,
  CreateOptions,
  Deleted,
  DiskData,
  DiskExecOptions,
  DiskMount,
  ExecBytesOptions,
  ExecBytesResult,
  ExecOptions,
  ExecResult,
  ExecTiming,
  NetworkInfo,
  NetworkRules,
  Health,
  JsonObject,
  ListSandboxesOptions,
  Resources,
  SandboxData,
  SnapshotData,
  UpdateOptions,
  Usage,
  WriteFileResult,
} from "./types.js";
