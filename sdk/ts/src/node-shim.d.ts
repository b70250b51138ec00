// The few Node.js APIs the SDK uses, declared here so that the package needs no
// type packages at build time. This file is not part of the published types.
declare module "node:fs" {
  export function readFileSync(path: string, encoding: "utf8"): string;
}

declare const process: {
  readonly env: { readonly [name: string]: string | undefined };
};

declare module "node:net" {
  interface Socket {
    on(event: "connect" | "secureConnect" | "close" | "end", listener: () => void): this;
    on(event: "data", listener: (chunk: Uint8Array) => void): this;
    on(event: "error", listener: (err: Error) => void): this;
    write(data: Uint8Array | string): boolean;
    setNoDelay(on: boolean): this;
    destroy(): void;
  }
  export function connect(options: { host: string; port: number }): Socket;
  export type { Socket };
}

declare module "node:tls" {
  import type { Socket } from "node:net";
  export function connect(options: { host: string; port: number; servername: string }): Socket;
}

// Node 18 has no global `crypto`: the Web Crypto object comes from node:crypto.
declare module "node:crypto" {
  export const webcrypto: Crypto;
}
