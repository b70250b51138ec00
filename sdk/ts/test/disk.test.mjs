// Persistent disks, serverless calls and disk files, against a real sbxd.
// Needs SBX_URL and SBX_API_KEY; the daemon must have the "busybox" image.
import assert from "node:assert/strict";
import { after, test } from "node:test";

import {
  Client,
  ConflictError,
  ExecError,
  ExecTimeoutError,
  InvalidRequestError,
  NotFoundError,
  SbxApiError,
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
const image = "busybox";

// Whatever a test could not remove in its own finally block.
const leftovers = new Set();
after(async () => {
  for (const x of leftovers) await x.delete().catch(() => undefined);
});

async function remove(x) {
  try {
    await x.delete();
  } catch (e) {
    if (!(e instanceof NotFoundError)) throw e;
  }
  leftovers.delete(x);
}

test("a disk outlives its calls; each call is a fresh sandbox", async () => {
  const name = `${tag}-d1`;
  const disk = await client.createDisk({ name, sizeMb: 64 });
  leftovers.add(disk);
  let deleted = false;
  try {
    assert.match(disk.id, /^dk-/);
    assert.equal(disk.data.id, disk.id);
    assert.equal(disk.name, name);
    assert.equal(disk.sizeMb, 64);
    assert.equal(typeof disk.data.created_at, "string");

    const first = await disk.exec("pwd; echo kept > /mnt/disk/x; echo lost > /root/lost; echo $SBX_SANDBOX_ID", {
      image,
    });
    assert.equal(first.exitCode, 0);
    const [cwd, firstSandbox] = first.stdout.trim().split("\n");
    assert.equal(cwd, "/mnt/disk");
    assert.equal(typeof first.timing.queueMs, "number");
    assert.equal(typeof first.timing.executeMs, "number");
    assert.ok(Number.isFinite(first.timing.queueMs) && first.timing.queueMs >= 0);
    assert.ok(Number.isFinite(first.timing.executeMs) && first.timing.executeMs > 0);
    assert.equal(typeof first.costUsd, "number");

    const second = await disk.exec("cat /mnt/disk/x; ls -A /root; echo $SBX_SANDBOX_ID", { image });
    assert.equal(second.exitCode, 0);
    assert.equal(second.stdout.split("\n")[0], "kept");
    assert.ok(!second.stdout.includes("lost"), `the /root file of the first call is gone: ${second.stdout}`);
    assert.ok(!second.stdout.includes(firstSandbox), "each call gets its own sandbox");

    // By name too, with argv, cwd and env.
    const byName = await client.getDisk(name);
    assert.equal(byName.id, disk.id);
    const argv = await byName.exec(["sh", "-c", 'cat /mnt/disk/x; echo "$V"; pwd'], { image, cwd: "/tmp", env: { V: "v1" } });
    assert.equal(argv.stdout, "kept\nv1\n/tmp\n");
    assert.ok((await client.listDisks()).some((d) => d.id === disk.id));
    assert.ok((await disk.refresh()).usedBytes > 0);

    // check.
    await assert.rejects(disk.exec("exit 3", { image, check: true }), (e) => {
      assert.ok(e instanceof ExecError);
      assert.equal(e.result.exitCode, 3);
      return true;
    });

    // Past its limit the call answers 504, with what the command printed.
    await assert.rejects(disk.exec("echo partial; sleep 30", { image, timeoutSeconds: 1 }), (e) => {
      assert.ok(e instanceof ExecTimeoutError, `got ${e}`);
      assert.ok(e instanceof SbxApiError);
      assert.equal(e.status, 504);
      assert.equal(e.code, "exec_timeout");
      assert.ok(e.result, "the error carries the partial result");
      assert.equal(e.result.stdout, "partial\n");
      assert.equal(e.result.timedOut, true);
      assert.equal(typeof e.result.timing.executeMs, "number");
      return true;
    });

    const answer = await disk.delete();
    deleted = true;
    assert.equal(answer.type, "disk.deleted");
    await assert.rejects(client.getDisk(disk.id), NotFoundError);
  } finally {
    if (!deleted) await remove(disk);
    leftovers.delete(disk);
  }
});

test("writeFile and readFile round trip", async () => {
  const disk = await client.createDisk({ sizeMb: 64 });
  leftovers.add(disk);
  try {
    const w = await disk.writeFile("notes/hello.txt", "héllo\n");
    assert.equal(w.path, "notes/hello.txt");
    assert.equal(w.sizeBytes, Buffer.byteLength("héllo\n"));
    assert.equal(new TextDecoder().decode(await disk.readFile("notes/hello.txt")), "héllo\n");
    // One shape with sandbox.files: text by default, bytes on request.
    assert.equal(await disk.files.read("notes/hello.txt"), "héllo\n");
    await disk.files.write("notes/b.bin", new Uint8Array([0, 255]));
    assert.deepEqual(await disk.files.readBytes("notes/b.bin"), new Uint8Array([0, 255]));

    const bytes = new Uint8Array(70000);
    for (let i = 0; i < bytes.length; i++) bytes[i] = (i * 7) % 256;
    assert.equal((await disk.writeFile("bin/data", bytes)).sizeBytes, bytes.length);
    const back = await disk.readFile("bin/data");
    assert.ok(back instanceof Uint8Array);
    assert.deepEqual(back, bytes);

    // The calls see the files, and the files API sees what the calls write.
    assert.equal((await disk.exec("cat notes/hello.txt; wc -c < bin/data", { image })).stdout, "héllo\n70000\n");
    await disk.exec("printf made-inside > /mnt/disk/inside", { image, check: true });
    assert.equal(new TextDecoder().decode(await disk.readFile("inside")), "made-inside");

    await assert.rejects(disk.readFile("no/such/file"), NotFoundError);
    await assert.rejects(disk.writeFile("../escape", "x"), InvalidRequestError);
  } finally {
    await remove(disk);
  }
});

test("a disk in a sandbox; no delete while it is in use", async () => {
  const disk = await client.createDisk({ sizeMb: 64 });
  leftovers.add(disk);
  try {
    const sb = await client.create({
      image,
      ttlSeconds: 300,
      disks: [{ id: disk.id, mountPath: "/srv/data" }],
    });
    leftovers.add(sb);
    try {
      await sb.exec("echo from-session > /srv/data/shared", { check: true });
      assert.equal((await disk.exec("cat shared", { image })).stdout, "from-session\n");
      await assert.rejects(disk.delete(), (e) => {
        assert.ok(e instanceof ConflictError);
        assert.equal(e.status, 409);
        return true;
      });
    } finally {
      await remove(sb);
    }
  } finally {
    // The sandbox's teardown runs behind its delete: wait for the disk to be free.
    for (let i = 0; ; i++) {
      try {
        await remove(disk);
        break;
      } catch (e) {
        if (!(e instanceof ConflictError) || i >= 50) throw e;
        await new Promise((r) => setTimeout(r, 200));
      }
    }
  }
});
