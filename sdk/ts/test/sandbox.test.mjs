// Sandboxes, exec, snapshots and errors, against a real sbxd.
// Needs SBX_URL and SBX_API_KEY; the daemon must have the "busybox" image.
import assert from "node:assert/strict";
import { createServer } from "node:net";
import { after, test } from "node:test";

import {
  AuthError,
  Client,
  ConflictError,
  ExecError,
  InvalidRequestError,
  NotFoundError,
  SbxApiError,
  SbxConnectionError,
  SbxError,
} from "../dist/index.js";

const { SBX_URL, SBX_API_KEY } = process.env;
if (!SBX_URL || !SBX_API_KEY) {
  throw new Error(
    "these tests need a running sbxd: set SBX_URL (e.g. http://127.0.0.1:7070) and SBX_API_KEY " +
      "(the key in <data dir>/api-key), then run `npm run build && npm test`",
  );
}

const client = new Client({ url: SBX_URL, apiKey: SBX_API_KEY });
const tag = `ts-${process.pid}-${Date.now().toString(36)}`;

// Whatever a test could not remove in its own finally block.
const leftovers = new Set();
after(async () => {
  for (const sb of leftovers) await sb.delete().catch(() => undefined);
});

async function newSandbox(options = {}) {
  const sb = await client.create({ type: "small", image: "busybox", ttlSeconds: 600, noEnv: true, ...options });
  leftovers.add(sb);
  return sb;
}

async function remove(sb) {
  try {
    await sb.delete();
  } catch (e) {
    if (!(e instanceof NotFoundError)) throw e;
  }
  leftovers.delete(sb);
}

test("health answers without a key", async () => {
  const h = await new Client({ url: SBX_URL, apiKey: "" }).health();
  assert.equal(h.status, "ok");
  assert.equal(typeof h.version, "string");
});

test("create, exec (string, argv, check, streaming) and delete", async () => {
  const sb = await newSandbox({
    name: `${tag}-a`,
    env: { FROM_CREATE: "c" },
    metadata: { suite: tag },
  });
  let deleted = false;
  try {
    assert.match(sb.id, /^sb-[0-9a-f]{16}$/);
    assert.equal(sb.data.id, sb.id);
    assert.equal(sb.state, "running");
    assert.equal(sb.name, `${tag}-a`);
    assert.equal(sb.data.image, "busybox");
    assert.equal(sb.data.ttl_seconds, 600);
    assert.deepEqual(sb.data.metadata, { suite: tag });

    // A string runs through /bin/sh -c.
    const r = await sb.exec("echo hi; echo oops >&2; echo $FROM_CREATE $FROM_EXEC; exit 3", {
      env: { FROM_EXEC: "e" },
    });
    assert.equal(r.stdout, "hi\nc e\n");
    assert.equal(r.stderr, "oops\n");
    assert.equal(r.exitCode, 3);
    assert.equal(r.signal, null);
    assert.equal(r.timedOut, false);
    assert.equal(r.stdoutTruncated, false);
    assert.equal(r.stderrTruncated, false);
    assert.equal(typeof r.timing.queueMs, "number");
    assert.ok(r.timing.executeMs > 0);
    assert.ok(r.costUsd >= 0);

    // An array is the argv: no shell, so nothing is expanded or split.
    const argv = await sb.exec(["printf", "%s|", "a b", "$HOME"]);
    assert.equal(argv.stdout, "a b|$HOME|");
    assert.equal(argv.exitCode, 0);

    // cwd and stdin.
    const cat = await sb.exec("pwd; cat", { cwd: "/tmp", stdin: "from stdin" });
    assert.equal(cat.stdout, "/tmp\nfrom stdin");

    // Exact bytes: execBytes asks for base64 and hands back Uint8Arrays, stdin included.
    const all = Uint8Array.from({ length: 256 }, (_, i) => i);
    const bytes = await sb.execBytes("cat; printf '\\377' >&2", { stdin: all });
    assert.deepEqual([...bytes.stdout], [...all]);
    assert.deepEqual([...bytes.stderr], [255]);
    assert.equal(bytes.exitCode, 0);
    const text = await sb.execBytes(["printf", "a\\377b"]);
    assert.deepEqual([...text.stdout], [97, 255, 98]);
    assert.equal((await sb.exec(["printf", "a\\377b"])).stdout, "a\ufffdb"); // text mode replaces it

    // check: a non-zero exit throws ExecError carrying the result.
    await assert.rejects(sb.exec("echo out; echo bad >&2; exit 7", { check: true }), (e) => {
      assert.ok(e instanceof ExecError);
      assert.ok(e instanceof SbxError);
      assert.equal(e.result.exitCode, 7);
      assert.equal(e.result.stdout, "out\n");
      assert.match(e.message, /exited with code 7.*bad/);
      return true;
    });
    assert.equal((await sb.exec("true", { check: true })).exitCode, 0);

    // A signal is reported as such.
    const killed = await sb.exec("kill -9 $$");
    assert.equal(killed.signal, 9);
    assert.equal(killed.exitCode, 137);

    // The command's own timeout: exit 124, partial output, still a result.
    const slow = await sb.exec("echo started; sleep 30", { timeoutSeconds: 1 });
    assert.equal(slow.timedOut, true);
    assert.equal(slow.exitCode, 124);
    assert.equal(slow.stdout, "started\n");

    // Streaming: chunks arrive while the command runs, and the full result still comes.
    const chunks = [];
    const started = Date.now();
    let firstAt = 0;
    const streamed = await sb.exec("echo one; sleep 1.5; echo two; echo err >&2; exit 4", {
      onStdout: (s) => {
        firstAt ||= Date.now();
        chunks.push(["out", s]);
      },
      onStderr: (s) => chunks.push(["err", s]),
    });
    const doneAt = Date.now();
    assert.equal(streamed.stdout, "one\ntwo\n");
    assert.equal(streamed.stderr, "err\n");
    assert.equal(streamed.exitCode, 4);
    assert.ok(streamed.timing.executeMs >= 1000);
    assert.equal(chunks.filter(([k]) => k === "out").map(([, s]) => s).join(""), "one\ntwo\n");
    assert.equal(chunks.filter(([k]) => k === "err").map(([, s]) => s).join(""), "err\n");
    assert.ok(firstAt > 0 && doneAt - firstAt >= 1000, `the first chunk came ${firstAt - started} ms in, the end ${doneAt - started} ms in`);
    await assert.rejects(sb.exec("exit 5", { check: true, onStdout: () => undefined }), ExecError);

    // get and list.
    const got = await client.getSandbox(sb.id);
    assert.equal(got.id, sb.id);
    assert.equal(got.data.name, `${tag}-a`);
    const listed = await client.listSandboxes({ metadata: { suite: tag } });
    assert.deepEqual(listed.map((s) => s.id), [sb.id]);

    const answer = await sb.delete();
    deleted = true;
    assert.deepEqual(answer, { type: "sandbox.deleted", id: sb.id });
    await assert.rejects(client.getSandbox(sb.id), NotFoundError);
  } finally {
    if (!deleted) await remove(sb);
    leftovers.delete(sb);
  }
});

test("snapshot, fork and create from a snapshot", async () => {
  const snapName = `${tag}-snap`;
  const sb = await newSandbox();
  const made = [];
  let snapTaken = false;
  try {
    await sb.exec("echo template > /root/t", { check: true });
    const snap = await sb.snapshot(snapName);
    snapTaken = true;
    assert.equal(snap.type, "snapshot.named.created");
    assert.equal(snap.name, snapName);
    assert.equal(snap.data.source, sb.id);

    const one = await sb.fork();
    made.push(one);
    assert.ok(!Array.isArray(one));
    assert.equal(one.metadata.forked_from, sb.id);
    assert.equal((await one.exec("cat /root/t")).stdout, "template\n");

    const three = await sb.fork({ count: 3 });
    made.push(...three);
    assert.equal(three.length, 3);
    assert.equal(new Set(three.map((s) => s.id)).size, 3);

    const fromSnap = await client.create({ from: snapName, ttlSeconds: 300 });
    made.push(fromSnap);
    assert.equal((await fromSnap.exec("cat /root/t")).stdout, "template\n");

    const del = await client.deleteNamedSnapshot(snapName);
    snapTaken = false;
    assert.equal(del.type, "snapshot.named.deleted");
    await assert.rejects(client.deleteNamedSnapshot(snapName), NotFoundError);
  } finally {
    for (const s of made) await remove(s);
    await remove(sb);
    if (snapTaken) await client.deleteNamedSnapshot(snapName).catch(() => undefined);
  }
});

test("pause, resume, lifecycle policy and usage", async () => {
  const sb = await newSandbox({ ttlAction: "pause", idleTimeoutSeconds: 600 });
  try {
    await sb.exec("echo kept > /root/f", { check: true });
    await sb.pause();
    assert.equal(sb.state, "paused");
    assert.equal(sb.data.pause_mode, "freeze");
    const billed = sb.data.billed_seconds;
    await sb.pause(); // idempotent
    assert.equal(sb.state, "paused");
    // An exec resumes it (autoResume defaults to on).
    assert.equal((await sb.exec("cat /root/f")).stdout, "kept\n");
    await sb.refresh();
    assert.equal(sb.state, "running");
    assert.ok(sb.data.billed_seconds >= billed);
    await sb.update({ ttlSeconds: 7200, autoResume: false });
    assert.equal(sb.data.ttl_seconds, 7200);
    assert.equal(sb.data.auto_resume, false);
    await sb.setTimeout(900);
    assert.ok(Date.parse(sb.data.expires_at) - Date.now() < 905_000);
    await sb.pause();
    await assert.rejects(sb.exec("true"), ConflictError);
    await sb.resume();
    assert.equal(sb.state, "running");
    await assert.rejects(sb.pause({ mode: "nap" }), InvalidRequestError);
    const u = await client.usage({ from: new Date(Date.now() - 3_600_000) });
    const line = u.sandboxes.find((x) => x.id === sb.id);
    assert.ok(line, "the sandbox is in the usage");
    assert.equal(line.type, "small");
    assert.ok(u.total.cost_usd >= u.total.compute_usd);
  } finally {
    await remove(sb);
  }
});

test("secrets reach execs, not no-env sandboxes; SBX_TOKEN reads only its sandbox", async () => {
  const name = `TS_SECRET_${process.pid}`;
  await client.setSecret(name, "v1");
  const sb = await newSandbox({ noEnv: false });
  const locked = await newSandbox({ noEnv: true });
  try {
    assert.ok((await client.listSecrets()).includes(name));
    assert.equal((await sb.exec(`echo $${name}`)).stdout, "v1\n");
    assert.equal((await locked.exec(`echo [$${name}]`)).stdout, "[]\n");
    const token = (await sb.exec("echo $SBX_TOKEN")).stdout.trim();
    const scoped = new Client({ url: SBX_URL, apiKey: token });
    assert.equal((await scoped.getSandbox(sb.id)).id, sb.id);
    await assert.rejects(scoped.getSandbox(locked.id), AuthError);
    await assert.rejects(scoped.create({ image: "busybox" }), AuthError);
  } finally {
    await client.deleteSecret(name);
    await remove(sb);
    await remove(locked);
  }
});

test("bad input gives InvalidRequestError", async () => {
  await assert.rejects(client.create({ name: "Bad Name", image: "busybox" }), (e) => {
    assert.ok(e instanceof InvalidRequestError);
    assert.ok(e instanceof SbxApiError);
    assert.ok(e instanceof SbxError);
    assert.equal(e.status, 400);
    assert.equal(e.code, "invalid_request");
    assert.equal(typeof e.message, "string");
    assert.ok(e.message.length > 0);
    assert.equal(e.body.error.code, "invalid_request");
    return true;
  });
  const sb = await newSandbox();
  try {
    await assert.rejects(sb.exec("true", { timeoutSeconds: 0 }), InvalidRequestError);
  } finally {
    await remove(sb);
  }
});

test("network rules: set, normalized, refused when bad", async () => {
  // Mode none only: this daemon's sandboxes send nothing off the machine.
  const sb = await newSandbox({ network: "none" });
  try {
    assert.equal(sb.network.mode, "none");
    assert.equal(sb.network.address, null);
    await sb.setNetwork({ mode: "none", allow: ["*.Example.COM"], deny: ["10.1.2.3/8"] });
    assert.deepEqual(sb.network.allow, ["*.example.com"]);
    assert.deepEqual(sb.network.deny, ["10.0.0.0/8"]);
    await assert.rejects(sb.setNetwork({ mode: "none", allow: ["10.0.0.0/33"] }), InvalidRequestError);
    await sb.refresh();
    assert.deepEqual(sb.network.allow, ["*.example.com"]);
  } finally {
    await remove(sb);
  }
});

test("unknown ids give NotFoundError", async () => {
  await assert.rejects(client.getSandbox("sb-0000000000000000"), (e) => {
    assert.ok(e instanceof NotFoundError);
    assert.equal(e.status, 404);
    assert.equal(e.code, "not_found");
    return true;
  });
  await assert.rejects(client.create({ image: `${tag}-no-such-image` }), NotFoundError);
});

test("a wrong key gives AuthError", async () => {
  const bad = new Client({ url: SBX_URL, apiKey: "sbx_wrong" });
  await assert.rejects(bad.listSandboxes(), (e) => {
    assert.ok(e instanceof AuthError);
    assert.equal(e.status, 401);
    assert.equal(e.code, "unauthorized");
    return true;
  });
});

test("an unreachable daemon gives SbxConnectionError", async () => {
  // A port that was free a moment ago: nothing listens there.
  const port = await new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
  const down = new Client({ url: `http://127.0.0.1:${port}`, apiKey: "x" });
  await assert.rejects(down.health(), (e) => {
    assert.ok(e instanceof SbxConnectionError);
    assert.ok(e instanceof SbxError);
    return true;
  });
});
