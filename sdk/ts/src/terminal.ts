import { webcrypto } from "node:crypto";
import * as net from "node:net";
import * as tls from "node:tls";

import { SbxConnectionError } from "./errors.js";
import { errorFrom, toBase64, type Transport } from "./http.js";

const GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
const TEXT = 1;
const BINARY = 2;
const CLOSE = 8;
const PING = 9;
const PONG = 10;

function concat(a: Uint8Array, b: Uint8Array): Uint8Array {
  const out = new Uint8Array(a.length + b.length);
  out.set(a);
  out.set(b, a.length);
  return out;
}

/**
 * The terminal of a process started with `tty: true`, attached over its WebSocket
 * (`await process.attach()`): `send` types input, `resize` changes its size, and iterating
 * gives its output (Uint8Array) until it ends; then `exitCode` and `signal` are set.
 * Output already in the process's ring comes first.
 */
export class Terminal implements AsyncIterable<Uint8Array> {
  exitCode: number | null = null;
  signal: number | null = null;
  private buf: Uint8Array = new Uint8Array(0);
  private readonly out: Uint8Array[] = [];
  private ended = false;
  private failure: Error | null = null;
  private wake: (() => void) | null = null;
  private live = false; // frames are parsed once the handshake is checked
  private closed = false;

  private constructor(private readonly sock: net.Socket) {}

  /** @internal Opens the WebSocket at `path` (use `process.attach()`). */
  static async open(http: Transport, path: string): Promise<Terminal> {
    const url = new URL(http.baseUrl + path);
    const port = Number(url.port) || (url.protocol === "https:" ? 443 : 80);
    const sock =
      url.protocol === "https:"
        ? tls.connect({ host: url.hostname, port, servername: url.hostname })
        : net.connect({ host: url.hostname, port });
    const key = toBase64(webcrypto.getRandomValues(new Uint8Array(16)));
    const lines = [
      `GET ${url.pathname}${url.search} HTTP/1.1`,
      `Host: ${url.host}`,
      "Upgrade: websocket",
      "Connection: Upgrade",
      `Sec-WebSocket-Key: ${key}`,
      "Sec-WebSocket-Version: 13",
    ];
    if (http.authorization) lines.push(`Authorization: ${http.authorization}`);
    let head: Uint8Array = new Uint8Array(0);
    let handshaken = false;
    const t = new Terminal(sock);
    sock.on("close", () => t.gone());
    sock.on("error", () => t.gone());
    const headers = await new Promise<{ status: number; fields: Map<string, string>; rest: Uint8Array }>(
      (resolve, reject) => {
        sock.on(url.protocol === "https:" ? "secureConnect" : "connect", () => {
          sock.setNoDelay(true);
          sock.write(lines.join("\r\n") + "\r\n\r\n");
        });
        sock.on("error", (e) => reject(new SbxConnectionError(`attach: ${e.message}`)));
        sock.on("close", () => reject(new SbxConnectionError("attach: the connection closed")));
        sock.on("data", (chunk) => {
          if (handshaken) {
            // The terminal's frames: kept from the first byte, parsed once attached.
            t.buf = concat(t.buf, chunk);
            if (t.live) t.parse();
            return;
          }
          head = concat(head, chunk);
          const text = new TextDecoder("latin1").decode(head);
          const end = text.indexOf("\r\n\r\n");
          if (end < 0) return;
          const all = text.slice(0, end).split("\r\n");
          const fields = new Map<string, string>();
          for (const l of all.slice(1)) {
            const c = l.indexOf(":");
            if (c > 0) fields.set(l.slice(0, c).trim().toLowerCase(), l.slice(c + 1).trim());
          }
          handshaken = true;
          resolve({ status: Number(all[0]!.split(" ")[1]), fields, rest: head.slice(end + 4) });
        });
      },
    );
    if (headers.status !== 101) {
      // The error answer: its body (a Content-Length one) follows the header.
      const length = Number(headers.fields.get("content-length") ?? 0);
      let body = headers.rest;
      while (body.length < length) {
        const more = await new Promise<Uint8Array | null>((resolve) => {
          sock.on("data", resolve);
          sock.on("close", () => resolve(null));
        });
        if (!more) break;
        body = concat(body, more);
      }
      sock.destroy();
      throw await errorFrom(new Response(body as unknown as BodyInit, { status: headers.status }));
    }
    const digest = new Uint8Array(await webcrypto.subtle.digest("SHA-1", new TextEncoder().encode(key + GUID)));
    if (headers.fields.get("sec-websocket-accept") !== toBase64(digest)) {
      sock.destroy();
      throw new SbxConnectionError("the terminal's WebSocket handshake did not match");
    }
    t.attach(headers.rest);
    return t;
  }

  /** Types `data` into the terminal. */
  send(data: string | Uint8Array): void {
    this.frame(BINARY, typeof data === "string" ? new TextEncoder().encode(data) : data);
  }

  resize(cols: number, rows: number): void {
    this.frame(TEXT, new TextEncoder().encode(JSON.stringify({ type: "resize", cols, rows })));
  }

  /** Ctrl-D. */
  sendEof(): void {
    this.frame(TEXT, new TextEncoder().encode('{"type":"eof"}'));
  }

  async *[Symbol.asyncIterator](): AsyncIterator<Uint8Array> {
    for (;;) {
      if (this.out.length > 0) {
        yield this.out.shift()!;
        continue;
      }
      if (this.failure && this.exitCode === null) throw this.failure;
      if (this.ended) return;
      await new Promise<void>((resolve) => (this.wake = resolve));
    }
  }

  /** Reads to the end; the process's exit code. */
  async wait(): Promise<number | null> {
    for await (const _ of this) void _;
    return this.exitCode;
  }

  /** Detaches (the process keeps running). */
  close(): void {
    if (!this.ended) {
      try {
        this.frame(CLOSE, new Uint8Array([0x03, 0xe8]));
      } catch {
        // already gone
      }
    }
    this.ended = true;
    this.sock.destroy();
    this.notify();
  }

  private attach(rest: Uint8Array): void {
    this.buf = concat(rest, this.buf);
    this.live = true;
    this.parse();
    if (this.closed) this.gone();
  }

  private gone(): void {
    this.closed = true;
    if (!this.live) return; // attach() looks again
    if (!this.ended && this.exitCode === null) this.failure = new SbxConnectionError("the terminal's connection closed");
    this.ended = true;
    this.notify();
  }

  private notify(): void {
    const w = this.wake;
    this.wake = null;
    if (w) w();
  }

  // Whole frames from the buffer (the server sends unfragmented, unmasked frames).
  private parse(): void {
    for (;;) {
      const b = this.buf;
      if (b.length < 2) return;
      let n = b[1]! & 0x7f;
      let at = 2;
      if (n === 126) {
        if (b.length < 4) return;
        n = (b[2]! << 8) | b[3]!;
        at = 4;
      } else if (n === 127) {
        if (b.length < 10) return;
        n = Number(new DataView(b.buffer, b.byteOffset + 2, 8).getBigUint64(0));
        at = 10;
      }
      if (b.length < at + n) return;
      const op = b[0]! & 0x0f;
      const payload = b.slice(at, at + n);
      this.buf = b.slice(at + n);
      if (op === BINARY) {
        this.out.push(payload);
      } else if (op === TEXT) {
        const msg = JSON.parse(new TextDecoder().decode(payload));
        if (msg.type === "exit") {
          this.exitCode = msg.exit_code ?? null;
          this.signal = msg.signal ?? null;
        }
      } else if (op === PING) {
        this.frame(PONG, payload);
      } else if (op === CLOSE) {
        if (!this.ended) {
          try {
            this.frame(CLOSE, payload.slice(0, 2));
          } catch {
            // already gone
          }
        }
        this.ended = true;
        this.sock.destroy();
      }
      this.notify();
    }
  }

  private frame(op: number, payload: Uint8Array): void {
    const n = payload.length;
    const head = n < 126 ? new Uint8Array(2) : n < 65536 ? new Uint8Array(4) : new Uint8Array(10);
    head[0] = 0x80 | op;
    if (n < 126) {
      head[1] = 0x80 | n;
    } else if (n < 65536) {
      head[1] = 0x80 | 126;
      head[2] = n >> 8;
      head[3] = n & 0xff;
    } else {
      head[1] = 0x80 | 127;
      new DataView(head.buffer).setBigUint64(2, BigInt(n));
    }
    const mask = webcrypto.getRandomValues(new Uint8Array(4));
    const masked = new Uint8Array(n);
    for (let i = 0; i < n; i++) masked[i] = payload[i]! ^ mask[i % 4]!;
    this.sock.write(concat(concat(head, mask), masked));
  }
}
