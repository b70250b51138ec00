// E2B's own SDK (the `e2b` package, pinned in package.json) against sbxd's E2B-compatible
// front: node e2b_client.mjs SCENARIO. The environment carries what a user sets to
// switch: E2B_API_KEY, E2B_API_URL and E2B_SANDBOX_URL. Prints one JSON object of what
// the SDK returned and threw, for tests/integration/test_e2b.py to check.
import { Sandbox } from "e2b";

const out = {};

// What a call threw, as the SDK's error class and message (or what it returned).
async function attempt(fn) {
  try {
    return { ok: true, value: await fn() };
  } catch (e) {
    return { ok: false, error: e.constructor.name, message: String(e.message) };
  }
}

function info(i) {
  return {
    sandboxId: i.sandboxId, templateId: i.templateId, name: i.name, metadata: i.metadata, state: i.state,
    startedAt: i.startedAt.toISOString(), endAt: i.endAt.toISOString(), cpuCount: i.cpuCount,
    memoryMB: i.memoryMB, envdVersion: i.envdVersion,
  };
}

async function lifecycle() {
  const sbx = await Sandbox.create({ metadata: { suite: "e2b", run: process.env.RUN_TAG }, envs: { GREETING: "hi" },
                                     timeoutMs: 120_000 });
  out.id = sbx.sandboxId;
  out.created = info(await sbx.getInfo());
  const listed = [];
  const pages = Sandbox.list({ query: { metadata: { run: process.env.RUN_TAG } }, limit: 1 });
  while (pages.hasNext) listed.push(...(await pages.nextItems()).map((s) => s.sandboxId));
  out.listed = listed;
  await sbx.setTimeout(600_000);
  out.afterTimeout = info(await Sandbox.getInfo(sbx.sandboxId));
  out.pause = await sbx.pause();
  out.pauseAgain = await Sandbox.pause(sbx.sandboxId);
  out.paused = info(await Sandbox.getInfo(sbx.sandboxId));
  out.pausedListed = (await Sandbox.list({ query: { state: ["paused"], metadata: { run: process.env.RUN_TAG } } })
    .nextItems()).map((s) => s.sandboxId);
  const again = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 300_000 });
  out.connected = { sandboxId: again.sandboxId, info: info(await again.getInfo()) };
  out.kill = await sbx.kill();
  out.killAgain = await Sandbox.kill(sbx.sandboxId);
  out.gone = await attempt(() => Sandbox.getInfo(sbx.sandboxId));
  out.connectGone = await attempt(() => Sandbox.connect(sbx.sandboxId));
}

async function refusals() {
  out.wrongKey = await attempt(() => Sandbox.create({ apiKey: "e2b_not_the_key" }));
  out.wrongKeyList = await attempt(() => Sandbox.list({ apiKey: "e2b_not_the_key" }).nextItems());
  out.noTemplate = await attempt(() => Sandbox.create("no-such-template"));
  out.badTemplate = await attempt(() => Sandbox.create("NOT..valid"));
  out.mcp = await attempt(() => Sandbox.create({ mcp: { tool: {} } }));
  out.missing = await attempt(() => Sandbox.getInfo("sb-0000000000000000"));
  out.missingTimeout = await attempt(() => Sandbox.setTimeout("sb-0000000000000000", 10_000));
}

// A sandbox whose timeout passes is killed, as E2B's are.
async function expiry() {
  const sbx = await Sandbox.create({ timeoutMs: 2_000 });
  out.id = sbx.sandboxId;
  const deadline = Date.now() + 30_000;
  let last;
  while (Date.now() < deadline) {
    last = await attempt(() => Sandbox.getInfo(sbx.sandboxId));
    if (!last.ok) break;
    await new Promise((r) => setTimeout(r, 250));
  }
  out.afterExpiry = last;
}

// Commands through the data plane (E2B runs each as /bin/bash -l -c: the default image).
async function commands() {
  const sbx = await Sandbox.create("default", { envs: { GREETING: "hi" }, timeoutMs: 300_000 });
  out.id = sbx.sandboxId;
  out.token = sbx.envdAccessToken;
  try {
    out.running = await sbx.isRunning();
    const r = await sbx.commands.run("echo hello; echo oops >&2; echo $GREETING $FOO; pwd; id -un",
                                     { envs: { FOO: "bar" }, cwd: "/tmp" });
    out.run = { stdout: r.stdout, stderr: r.stderr, exitCode: r.exitCode };
    out.asUser = (await sbx.commands.run("id -un", { user: "user" })).stdout;
    out.asRoot = (await sbx.commands.run("id -un; pwd", { user: "root" })).stdout;
    out.failing = await attempt(() => sbx.commands.run("echo partial; exit 3"));
    if (!out.failing.ok) {
      const e = await sbx.commands.run("echo partial; exit 3").catch((err) => err);
      out.failing.exitCode = e.exitCode;
      out.failing.stdout = e.stdout;
    }
    const seen = [];
    const h = await sbx.commands.run("for i in 1 2 3; do echo $i; sleep 0.3; done", {
      background: true, onStdout: (d) => seen.push({ d, t: Date.now() }),
    });
    out.backgroundPid = h.pid;
    const done = await h.wait();
    out.background = { stdout: done.stdout, chunks: seen.map((s) => s.d), spreadMs: seen.length ? seen[seen.length - 1].t - seen[0].t : 0 };
    const sleeper = await sbx.commands.run("sleep 60", { background: true });
    out.kill = await sleeper.kill();
    out.killedWait = await attempt(() => sleeper.wait());
    out.killUnknown = await sbx.commands.kill(999999);
    const t0 = Date.now();
    out.timeout = await attempt(() => sbx.commands.run("sleep 30; echo never", { timeoutMs: 1_500 }));
    out.timeoutMs = Date.now() - t0;
    // The timeout killed it (argv[0] of each process: no sleep left).
    out.sleepsLeft = (await sbx.commands.run("sleep 1; grep -al '^sleep' /proc/[0-9]*/cmdline | wc -l")).stdout.trim();
    out.big = (await sbx.commands.run("head -c 3000000 /dev/zero | tr '\\0' x")).stdout.length;
  } finally {
    await sbx.kill();
  }
  out.runningAfterKill = await sbx.isRunning();
  out.afterKill = await attempt(() => sbx.commands.run("echo still"));
}

// Files through the data plane: the SDK's multipart and octet-stream uploads, reads as
// text and bytes, the filesystem calls, a watch, paths from the user's home, another user.
async function files() {
  const sbx = await Sandbox.create("default", { timeoutMs: 300_000 });
  out.id = sbx.sandboxId;
  const entry = (e) => ({ name: e.name, type: e.type, path: e.path, size: e.size, permissions: e.permissions,
                          owner: e.owner, group: e.group, modified: e.modifiedTime ? e.modifiedTime.getTime() : null });
  try {
    out.write = await sbx.files.write("/tmp/e2b/hello.txt", "hello from e2b\n");
    out.read = await sbx.files.read("/tmp/e2b/hello.txt");
    // Binary and larger than one read: 200 kB of every byte value, as octet-stream.
    const bytes = new Uint8Array(200_000).map((_, i) => (i * 7 + (i >> 8)) & 255);
    out.octet = await sbx.files.write("/tmp/e2b/bin.dat", bytes, { useOctetStream: true });
    const back = await sbx.files.read("/tmp/e2b/bin.dat", { format: "bytes" });
    out.binary = { length: back.length, same: back.length === bytes.length && back.every((b, i) => b === bytes[i]) };
    out.empty = await sbx.files.write("/tmp/e2b/empty.txt", "");
    out.readEmpty = await sbx.files.read("/tmp/e2b/empty.txt");
    out.many = await sbx.files.write([{ path: "/tmp/e2b/a.txt", data: "A" }, { path: "rel.txt", data: "R" }]);
    out.readRel = await sbx.files.read("rel.txt");
    out.list = (await sbx.files.list("/tmp/e2b")).map(entry);
    out.exists = await sbx.files.exists("/tmp/e2b/a.txt");
    out.existsNot = await sbx.files.exists("/tmp/e2b/nope");
    out.makeDir = await sbx.files.makeDir("/tmp/e2b/d/e");
    out.makeDirAgain = await sbx.files.makeDir("/tmp/e2b/d/e");
    out.rename = entry(await sbx.files.rename("/tmp/e2b/a.txt", "/tmp/e2b/d/a2.txt"));
    out.deep = (await sbx.files.list("/tmp/e2b/d", { depth: 2 })).map((e) => e.path);
    out.info = entry(await sbx.files.getInfo("/tmp/e2b/d"));
    await sbx.files.remove("/tmp/e2b/d");
    out.afterRemove = await sbx.files.exists("/tmp/e2b/d");
    out.removeMissing = await attempt(() => sbx.files.remove("/tmp/e2b/none"));
    out.readMissing = await attempt(() => sbx.files.read("/tmp/e2b/none"));
    out.infoMissing = await attempt(() => sbx.files.getInfo("/tmp/e2b/none"));
    out.listMissing = await attempt(() => sbx.files.list("/tmp/e2b/none"));
    // Another user: paths from their home, files theirs, and the kernel checks as them.
    out.userWrite = await sbx.files.write("notes.txt", "mine", { user: "user" });
    out.userInfo = entry(await sbx.files.getInfo("notes.txt", { user: "user" }));
    out.userDenied = await attempt(() => sbx.files.write("/root/x.txt", "no", { user: "user" }));
    out.userCannotRead = await attempt(() => sbx.files.read("/etc/shadow", { user: "user" }));
    // A watch sees a write, a rename and a removal, named within the folder.
    const events = [];
    const w = await sbx.files.watchDir("/tmp/e2b", (e) => events.push(`${e.type}:${e.name}`));
    await sbx.files.write("/tmp/e2b/watched.txt", "w", { useOctetStream: true });
    await sbx.files.rename("/tmp/e2b/watched.txt", "/tmp/e2b/moved.txt");
    await sbx.files.remove("/tmp/e2b/moved.txt");
    const until = Date.now() + 10_000;
    while (Date.now() < until && !events.some((e) => e === "remove:moved.txt")) await new Promise((r) => setTimeout(r, 100));
    await w.stop();
    out.events = events;
    out.seen = (await sbx.commands.run("cat /tmp/e2b/hello.txt /home/user/rel.txt; stat -c '%U %a' /home/user/notes.txt")).stdout;
  } finally {
    await sbx.kill();
  }
  out.afterKill = await attempt(() => sbx.files.read("/tmp/e2b/hello.txt"));
}

// A background command's life through the other process calls: list, stdin, connect.
async function processes() {
  const sbx = await Sandbox.create("default", { timeoutMs: 300_000 });
  out.id = sbx.sandboxId;
  try {
    // A line-by-line echo that reads its input to the end.
    const h = await sbx.commands.run("while read l; do echo got:$l; done; echo eof", { background: true, stdin: true });
    const sleeper = await sbx.commands.run("sleep 30", { background: true, cwd: "/tmp" });
    out.listed = (await sbx.commands.list()).map((p) => ({ pid: p.pid, cmd: p.cmd, args: p.args, cwd: p.cwd }));
    out.pids = { echo: h.pid, sleeper: sleeper.pid };
    await sbx.commands.sendStdin(h.pid, "one\n");
    // Another client connects to it and sees what comes from then on, and its end.
    const seen = [];
    await new Promise((r) => setTimeout(r, 500));
    const again = await sbx.commands.connect(h.pid, { onStdout: (d) => seen.push(d) });
    await sbx.commands.sendStdin(h.pid, "two\n");
    await sbx.commands.closeStdin(h.pid);
    const done = await again.wait();
    out.connected = { stdout: done.stdout, exitCode: done.exitCode, seen: seen.join("") };
    out.first = (await h.wait()).stdout;
    out.stdinGone = await attempt(() => sbx.commands.sendStdin(h.pid, "late\n"));
    out.connectUnknown = await attempt(() => sbx.commands.connect(999999));
    await sleeper.kill();
    // The kill is sent at once; the command is seen gone once its exit is reported.
    const until = Date.now() + 10_000;
    for (;;) {
      out.listedAfter = (await sbx.commands.list()).map((p) => p.pid);
      if (!out.listedAfter.includes(sleeper.pid) || Date.now() >= until) break;
      await new Promise((r) => setTimeout(r, 50));
    }
  } finally {
    await sbx.kill();
  }
}

// A terminal: sandbox.pty's create, input, resize and end.
async function pty() {
  const sbx = await Sandbox.create("default", { timeoutMs: 300_000 });
  out.id = sbx.sandboxId;
  const dec = new TextDecoder();
  const enc = new TextEncoder();
  let text = "";
  const until = async (needle) => {
    const end = Date.now() + 15_000;
    while (Date.now() < end && !text.includes(needle)) await new Promise((r) => setTimeout(r, 50));
    return text.includes(needle);
  };
  try {
    const t = await sbx.pty.create({ cols: 100, rows: 30, onData: (d) => { text += dec.decode(d); } });
    await sbx.pty.sendInput(t.pid, enc.encode("stty size; tty; echo term=$TERM\n"));
    // (The terminal echoes the line typed: wait for what the commands printed.)
    out.first = await until("term=xterm");
    out.size1 = /\b30 100\b/.test(text);
    out.isTty = /\/dev\/pts\/\d+/.test(text);
    out.term = /term=xterm-256color/.test(text);
    await sbx.pty.resize(t.pid, { cols: 120, rows: 40 });
    await sbx.pty.sendInput(t.pid, enc.encode("stty size\n"));
    out.size2 = await until("40 120");
    await sbx.pty.sendInput(t.pid, enc.encode("exit 7\n"));
    out.end = await attempt(() => t.wait());
    out.resizeGone = await attempt(() => sbx.pty.resize(t.pid, { cols: 80, rows: 24 }));
    out.badSize = await attempt(() => sbx.pty.create({ cols: 0, rows: 30 }));
  } finally {
    await sbx.kill();
  }
}

const scenarios = { lifecycle, refusals, expiry, commands, files, processes, pty };
const name = process.argv[2];
if (!scenarios[name]) {
  console.error(`unknown scenario ${name}; one of ${Object.keys(scenarios).join(", ")}`);
  process.exit(2);
}
try {
  await scenarios[name]();
} catch (e) {
  out.uncaught = { error: e.constructor.name, message: String(e.message), stack: String(e.stack) };
}
console.log(JSON.stringify(out));
