// Files, background processes and port URLs from the SDK, against a real sbxd.
// Needs SBX_URL and SBX_API_KEY; the daemon must have the "busybox" image.
import assert from "node:assert/strict";
import { after, test } from "node:test";

import { Client, ConflictError, NotFoundError } from "../dist/index.js";

const { SBX_URL, SBX_API_KEY } = process.env;
if (!SBX_URL || !SBX_API_KEY) throw new Error("these tests need SBX_URL and SBX_API_KEY");
const client = new Client({ url: SBX_URL, apiKey: SBX_API_KEY });
const made = [];
after(async () => {
  for (const sb of made) await sb.delete().catch(() => undefined);
});

async function sandbox() {
  const sb = await client.create({ image: "busybox", ttlSeconds: 600 });
  made.push(sb);
  return sb;
}

test("files: write, read, list, stat, move, remove", async () => {
  const sb = await sandbox();
  const bytes = new Uint8Array(300000).map((_, i) => (i * 7) & 255);
  await sb.files.write("/w/blob.bin", bytes);
  assert.deepEqual(await sb.files.readBytes("/w/blob.bin"), bytes);
  await sb.files.write("/w/run.sh", "#!/bin/sh\necho ran\n", { mode: 0o755 });
  assert.equal((await sb.exec("/w/run.sh")).stdout, "ran\n");
  assert.equal((await sb.files.stat("/w/run.sh")).mode, 0o755);
  assert.deepEqual((await sb.files.list("/w")).map((e) => e.name), ["blob.bin", "run.sh"]);
  await assert.rejects(sb.files.move("/w/run.sh", "/w/blob.bin"), ConflictError);
  await sb.files.move("/w/run.sh", "/w/moved.sh");
  assert.equal(await sb.files.read("/w/moved.sh"), "#!/bin/sh\necho ran\n");
  await sb.files.remove("/w", { recursive: true });
  assert.equal(await sb.files.exists("/w"), false);
  await assert.rejects(sb.files.read("/w/moved.sh"), NotFoundError);
});

test("processes: start, follow, stdin, wait; getUrl", async () => {
  const sb = await sandbox();
  const p = await sb.processes.start("read x; echo got:$x; echo err >&2; exit 4");
  await p.sendStdin("hello\n", { eof: true });
  const info = await p.wait();
  assert.equal(info.exit_code, 4);
  const events = [];
  for await (const ev of p.output()) events.push(ev);
  const out = events.filter((e) => e.type === "stdout").map((e) => e.data).join("");
  assert.equal(out, "got:hello\n");
  assert.equal(events.at(-1).type, "exit");
  assert.deepEqual((await sb.processes.list()).map((q) => q.pid), [p.pid]);
  assert.equal(sb.getUrl(8080, "/x"), `${SBX_URL.replace(/\/$/, "")}/v1/sandboxes/${sb.id}/ports/8080/x`);
});

test("signedUrl opens one port without credentials; waitForPort", async () => {
  const sb = await sandbox();
  await assert.rejects(sb.waitForPort(8125, { timeoutMs: 300 }), /nothing listens on port 8125/);
  await sb.processes.start("mkdir -p /w && hostname > /w/name && sleep 0.5 && exec httpd -f -p 127.0.0.1:8125 -h /w");
  assert.equal(await sb.waitForPort(8125), sb);
  // Without credentials the proxy refuses; with the signed URL's token it lets the request in.
  assert.equal((await fetch(sb.getUrl(8125, "/name"))).status, 401);
  const url = await sb.signedUrl(8125, { path: "/name", ttlSeconds: 60 });
  assert.match(url, /[?]sbx_token=/);
  const r = await fetch(url);
  assert.equal(r.status, 200);
  assert.equal((await r.text()).trim(), sb.id);
  assert.equal((await fetch(url.replace("/ports/8125/", "/ports/8126/"))).status, 401);
  // public: the ports open to anyone, and closed again.
  await sb.update({ public: true });
  assert.equal(sb.data.public, true);
  assert.equal((await fetch(sb.getUrl(8125, "/name"))).status, 200);
  await sb.update({ public: false });
  assert.equal((await fetch(sb.getUrl(8125, "/name"))).status, 401);
  const open = await client.create({ image: "busybox", ttlSeconds: 600, public: true });
  made.push(open);
  assert.equal(open.data.public, true);
});

test("files.watch: events as files change, until closed", async () => {
  const sb = await sandbox();
  await sb.exec("mkdir -p /w/sub", { check: true });
  const w = await sb.files.watch("/w", { recursive: true });
  const seen = [];
  const done = (async () => {
    for await (const ev of w) {
      seen.push(ev);
      if (ev.type === "rename") break;
    }
  })();
  await sb.exec("echo a > /w/sub/a.txt && mv /w/sub/a.txt /w/b.txt", { check: true });
  await done;
  await w.close();
  assert.deepEqual(seen[0], { type: "create", path: "/w/sub/a.txt", is_dir: false });
  assert.deepEqual(seen.at(-1), { type: "rename", path: "/w/sub/a.txt", to: "/w/b.txt", is_dir: false });
  await assert.rejects(sb.files.watch("/nope"), NotFoundError);
});

test("a terminal: attach, type, resize, exit", async () => {
  const sb = await sandbox();
  const p = await sb.processes.start("sh", { tty: true, cols: 80, rows: 24 });
  const term = await p.attach();
  const it = term[Symbol.asyncIterator]();
  let seen = "";
  const readUntil = async (want) => {
    while (!seen.includes(want)) {
      const { value, done } = await it.next();
      assert.equal(done, false, `the terminal ended before ${want}: ${seen}`);
      seen += new TextDecoder().decode(value);
    }
  };
  term.send("echo $((6 * 7))\n");
  await readUntil("42");
  term.resize(100, 30);
  term.send("stty size\n");
  await readUntil("30 100");
  term.send(new TextEncoder().encode("exit 5\n"));
  assert.equal(await term.wait(), 5);
  // Attached again, the ring's output comes first.
  const again = await p.attach({ since: 0 });
  let all = "";
  for await (const chunk of again) all += new TextDecoder().decode(chunk);
  assert.ok(all.includes("42"));
  assert.equal(again.exitCode, 5);
  const plain = await sb.processes.start("sleep 1");
  await assert.rejects(plain.attach(), ConflictError);
});

test("user: exec and processes as another user of the sandbox", async () => {
  const sb = await sandbox();
  // busybox has no /etc/passwd users but root: a uid runs with gid = uid, home /.
  const r = await sb.exec("id -u; id -g; pwd; echo $HOME; touch /root/x", { user: "1234" });
  assert.equal(r.stdout, "1234\n1234\n/\n/\n");
  assert.notEqual(r.exitCode, 0);
  assert.equal((await sb.exec("id -u")).stdout, "0\n");
  const bytes = await sb.execBytes("id -u", { user: "4321" });
  assert.equal(new TextDecoder().decode(bytes.stdout), "4321\n");
  const p = await sb.processes.start("id -u", { user: "1234" });
  assert.equal(p.data.user, "1234");
  const bad = await sb.exec("true", { user: "nosuch" });
  assert.equal(bad.exitCode, 127);
  assert.match(bad.stderr, /no user "nosuch"/);
});

test("user: file calls as another user of the sandbox", async () => {
  const sb = await sandbox();
  await sb.files.mkdir("/home/u", { user: "0" });
  await sb.exec("chown 1234:1234 /home/u");
  await sb.files.write("/home/u/a.txt", "mine", { user: "1234" });
  await sb.files.mkdir("/home/u/d", { user: "1234" });
  for (const p of ["/home/u/a.txt", "/home/u/d"]) {
    const st = await sb.files.stat(p, { user: "1234" });
    assert.deepEqual([st.uid, st.gid], [1234, 1234]);
  }
  assert.equal(await sb.files.read("/home/u/a.txt", { user: "1234" }), "mine");
  assert.equal((await sb.files.stat("/etc/passwd")).owner, "root");
  // Where that user may not write, the kernel says no, and nothing is made.
  await assert.rejects(sb.files.write("/root/planted", "x", { user: "1234" }), /ermission denied/);
  await assert.rejects(sb.files.move("/home/u/a.txt", "/etc/a.txt", { user: "1234" }), /ermission denied/);
  await assert.rejects(sb.files.remove("/etc/passwd", { user: "1234" }), /ermission denied/);
  assert.equal(await sb.files.exists("/root/planted"), false);
  assert.equal(await sb.files.exists("/etc/passwd", { user: "1234" }), true);
  assert.deepEqual((await sb.files.list("/home/u", { user: "1234" })).map((e) => e.name), ["a.txt", "d"]);
});

test("runCode: state between cells, streamed output, errors, contexts", async () => {
  const sb = await client.create({ image: "default", ttlSeconds: 600 });
  made.push(sb);
  const first = await sb.runCode("x = 20\nprint('set')\nx + 1");
  assert.equal(first.text, "21");
  assert.deepEqual(first.logs.stdout, ["set\n"]);
  assert.equal(first.error, null);
  assert.equal(first.context, "python");
  const seen = [];
  const streamed = await sb.runCode("for i in range(2): print(i)\nx * 2", { onStdout: (t) => seen.push(t) });
  assert.equal(seen.join(""), "0\n1\n");
  assert.equal(streamed.text, "40");
  const failed = await sb.runCode("raise KeyError('k')");
  assert.equal(failed.error.name, "KeyError");
  assert.match(failed.error.traceback, /<cell-/);
  const ctx = await sb.codeContexts.create({ language: "bash" });
  assert.deepEqual((await sb.runCode("echo $((6*7))", { context: ctx })).logs.stdout, ["42\n"]);
  assert.ok((await sb.codeContexts.list()).some((c) => c.id === ctx.id));
  await sb.codeContexts.delete(ctx);
  await assert.rejects(sb.runCode("echo", { context: ctx }), NotFoundError);
});
