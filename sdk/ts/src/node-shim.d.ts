// The few Node.js APIs the SDK uses, declared here so that the package needs no
// type packages at build time. This file is not part of the published types.
declare module "node:fs" {
  export function readFileSync(path: string, encoding: "utf8"): string;
}

declare const process: {
  readonly env: { readonly [name: string]: string | undefined };
};
