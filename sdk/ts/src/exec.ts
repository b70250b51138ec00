import { SbxError } from "./errors.js";
import type { Command, JsonObject } from "./types.js";

/** Past this many seconds, a plain (not streamed) answer could outlast fetch's own header timeout. */
export const LONG_EXEC_SECONDS = 240;

/** The `cmd` field: a string as is, an argv array copied after a type check. */
export function cmdField(command: Command): string | string[] {
  if (typeof command === "string") return command;
  if (Array.isArray(command) && command.every((a) => typeof a === "string")) return [...command];
  throw new SbxError("the command must be a string or an array of strings");
}

/** Adds the fields whose value is given, leaving the rest to the daemon's defaults. */
export function defined(fields: JsonObject): JsonObject {
  const out: JsonObject = {};
  for (const [k, v] of Object.entries(fields)) if (v !== undefined) out[k] = v;
  return out;
}

/** The client-side wait for a call that the daemon may run for `serverSeconds`. */
export function budget(clientTimeout: number | null, serverSeconds: number): number | null {
  if (clientTimeout == null || clientTimeout <= 0) return null;
  return Math.max(clientTimeout, serverSeconds);
}
