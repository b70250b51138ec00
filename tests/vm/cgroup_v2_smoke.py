#!/usr/bin/env python3
"""sbxd on a cgroup-v2-only host: the smoke suite that scripts/vm/cgroup-v2-smoke.sh runs inside
a QEMU guest booted with cgroup_no_v1=all. It runs as root in the guest, starts sbxd itself
(so that it can kill -9 and restart it), drives it with the `sbx` CLI and reads the kernel's
cgroup files to check that each limit holds. Every check that fails is reported and the
suite goes on where it can; the exit status is 1 if any failed.

    cgroup_v2_smoke.py --bin DIR --data DIR --out DIR

DIR of --bin holds sbxd, sbx and sbx-agent; --data is sbxd's data dir (on ext4: overlayfs in
a user namespace needs user xattrs on the upper dir); --out gets sbxd.log and results.json.
Under TCG, CPU time is approximate: the CPU check asserts throttling, not usage."""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
import traceback
import urllib.request

CG = "/sys/fs/cgroup"
PORT = 7070
UID_BASE = 100000  # sbxd's default --uid-base
MB = 1 << 20


class Failed(Exception):
    pass


def check(cond, why):
    if not cond:
        raise Failed(why)


def read(path: str) -> str:
    with open(path) as f:
        return f.read()


def kv(path: str) -> dict:
    """A flat-keyed cgroup file (memory.events, cpu.stat, cgroup.events) as a dict of ints."""
    out = {}
    for line in read(path).splitlines():
        k, _, v = line.partition(" ")
        try:
            out[k] = int(v)
        except ValueError:
            pass
    return out


def wait_for(what: str, fn, timeout=30.0, step=0.1):
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        try:
            last = fn()
            if last:
                return last
        except (OSError, ValueError, Failed) as e:
            last = e
        time.sleep(step)
    raise Failed(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})")


class Sbxd:
    def __init__(self, bin_dir: str, data: str, log_path: str):
        self.bin, self.data, self.log_path = bin_dir, data, log_path
        self.proc: subprocess.Popen | None = None
        self.url = f"http://127.0.0.1:{PORT}"
        self.key = ""
        self.created: list[str] = []

    @property
    def instance(self) -> str:
        return hashlib.sha256(os.path.realpath(self.data).encode()).hexdigest()[:8]

    @property
    def parent_cgroup(self) -> str:
        return f"{CG}/sbx-{self.instance}"

    def cgroup(self, sid: str) -> str:
        return f"{self.parent_cgroup}/{sid}"

    def start(self, *extra):
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [f"{self.bin}/sbxd", "--listen", f"127.0.0.1:{PORT}", "--socket", f"{self.data}/sbxd.sock",
             "--data-dir", self.data, "--default-image", "busybox", "--criu", "none", *extra],
            stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        log.close()
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise Failed(f"sbxd exited with {self.proc.returncode}: {self.log_tail()}")
            if os.path.exists(f"{self.data}/api-key"):
                self.key = read(f"{self.data}/api-key").strip()
                if self.sbx("health", check=False, timeout=10).returncode == 0:
                    return
            time.sleep(0.1)
        raise Failed("sbxd did not answer in 60 s: " + self.log_tail())

    def stop(self, sig=signal.SIGTERM, timeout=60):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=timeout)
        self.proc = None

    def log_tail(self, n=3000) -> str:
        try:
            return read(self.log_path)[-n:]
        except OSError:
            return ""

    def sbx(self, *args, check=True, timeout=180, json_out=False):
        env = dict(os.environ, SBX_URL=self.url, SBX_API_KEY=self.key)
        argv = [f"{self.bin}/sbx", *(["--json"] if json_out else []), *args]
        p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
        if check and p.returncode != 0:
            raise Failed(f"sbx {' '.join(args)} exited {p.returncode}: {p.stderr.strip()} {p.stdout.strip()}"[:2000])
        return p

    def create(self, *args) -> str:
        sid = self.sbx("create", "--ttl", "1800", "--no-env", *args).stdout.strip()
        check(sid.startswith("sb-"), f"create printed {sid!r}")
        self.created.append(sid)
        return sid

    def exec(self, sid, *cmd, check=True, timeout=120):
        return self.sbx("exec", sid, "--timeout", str(timeout), "--", *cmd, check=check, timeout=timeout + 60)

    def get(self, sid) -> dict:
        return json.loads(self.sbx("get", sid, json_out=True).stdout)

    def ls(self) -> list:
        return json.loads(self.sbx("ls", json_out=True).stdout)

    def metric(self, name: str) -> float:
        req = urllib.request.Request(self.url + "/metrics", headers={"Authorization": "Bearer " + self.key})
        with urllib.request.urlopen(req, timeout=30) as r:
            for line in r.read().decode().splitlines():
                if line.startswith(name + " "):
                    return float(line.split()[1])
        raise Failed(f"no metric {name}")


# --- what the kernel holds: for the re-adoption and leak checks -----------------------------
def sandbox_cgroups(d: Sbxd) -> list[str]:
    out = []
    for parent in [p for p in os.listdir(CG) if p.startswith("sbx-")]:
        for n in os.listdir(f"{CG}/{parent}"):
            if os.path.isdir(f"{CG}/{parent}/{n}"):
                out.append(f"{parent}/{n}")
    return out


def sandbox_processes() -> list[str]:
    """Processes of sandboxes (uids of sbxd's range) and any sbx-agent or sbxd."""
    out = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            status = read(f"/proc/{p}/status")
            name = status.split("\n", 1)[0].split(":", 1)[1].strip()
            uid = int(next(l for l in status.splitlines() if l.startswith("Uid:")).split()[1])
        except (OSError, StopIteration, IndexError, ValueError):
            continue
        if UID_BASE <= uid < UID_BASE + 2 * 65536 or name.startswith(("sbx-agent", "sbxd")):
            out.append(f"{p}({name}, uid {uid})")
    return out


def data_mounts(d: Sbxd) -> list[str]:
    return [l.strip() for l in read("/proc/self/mountinfo").splitlines()
            if d.data in l and l.split()[4] != f"{d.data}/cgroup-favor"]


def procs(cg: str) -> list[int]:
    return [int(x) for x in read(f"{cg}/cgroup.procs").split()]


# A client of the in-sandbox API socket that first moves itself into a cgroup ("-": none):
# sbxd knows who calls on that socket by the caller's cgroup alone. Prints each answer's
# status, or "closed" for a connection closed unanswered.
API_CLIENT = r'''
import os, socket, sys
cg, sock, paths = sys.argv[1], sys.argv[2], sys.argv[3:]
if cg != "-":
    with open(cg + "/cgroup.procs", "w") as f:
        f.write(str(os.getpid()))
out = []
for p in paths:
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(30)
    s.connect(sock)
    data = b""
    try:
        s.sendall(f"GET {p} HTTP/1.1\r\nHost: sbx\r\nConnection: close\r\n\r\n".encode())
        while True:
            b = s.recv(65536)
            if not b:
                break
            data += b
    except (ConnectionResetError, BrokenPipeError):
        pass
    s.close()
    out.append(data.split(b" ", 2)[1].decode() if data else "closed")
print(" ".join(out))
'''


def peer_pidfd_support() -> str:
    """Whether this kernel answers getsockopt(SO_PEERPIDFD) (Linux 6.5+), which sbxd uses to
    pin the process on the other end of the in-sandbox API socket."""
    import errno
    import socket
    a, b = socket.socketpair(socket.AF_UNIX)
    try:
        a.getsockopt(socket.SOL_SOCKET, 77, 4)
        return "the kernel has SO_PEERPIDFD"
    except OSError as e:
        return f"getsockopt(SO_PEERPIDFD) fails here: {errno.errorcode.get(e.errno, e.errno)} (Linux {os.uname().release})"
    finally:
        a.close()
        b.close()


def wait_deleted(d: Sbxd, sid: str):
    wait_for(f"{sid} to be deleted",
             lambda: sid not in [s["id"] for s in d.ls()] and not os.path.exists(d.cgroup(sid))
             and not os.path.exists(f"{d.data}/sandboxes/{sid}"), timeout=60)


# --- the checks ------------------------------------------------------------------------------
class Suite:
    def __init__(self, d: Sbxd):
        self.d = d
        self.results: list[dict] = []
        self.main = ""      # the long-lived sandbox: exec, pause, snapshot, fork, re-adoption
        self.paused = ""    # kept paused across the daemon's kill -9
        self.note = f"kept-{os.getpid()}-{int(time.time())}"

    def run(self, name, fn):
        t = time.time()
        try:
            detail = fn() or ""
            ok = True
        except Failed as e:
            ok, detail = False, str(e)
        except Exception as e:  # a bug in the suite or an unexpected answer: a failure too
            ok, detail = False, f"{type(e).__name__}: {e}\n{traceback.format_exc()}"
        secs = time.time() - t
        # What a failed check left: deleted, so that the next checks start clean.
        left = [x for x in self.d.created if x not in (self.main, self.paused)]
        self.d.created = [x for x in self.d.created if x in (self.main, self.paused)]
        if not ok and left and self.d.proc is not None and self.d.proc.poll() is None:
            for x in left:
                self.d.sbx("rm", x, check=False)
        n = len(self.results) + 1
        print(f"{'ok' if ok else 'not ok'} {n} - {name} ({secs:.1f} s){': ' + detail if detail else ''}", flush=True)
        self.results.append({"name": name, "ok": ok, "seconds": round(secs, 2), "detail": detail})
        return ok

    def host_is_v2_only(self):
        mounts = [l.split() for l in read("/proc/mounts").splitlines()]
        check(any(m[1] == CG and m[2] == "cgroup2" for m in mounts), f"{CG} is not cgroup2")
        v1 = [m[1] for m in mounts if m[2] == "cgroup"]
        check(not v1, f"cgroup v1 hierarchies are mounted: {v1}")
        enabled = [l.split()[0] for l in read("/proc/cgroups").splitlines()[1:]]
        check("cgroup_no_v1=all" in read("/proc/cmdline"), "the kernel was not booted with cgroup_no_v1=all")
        ctl = read(f"{CG}/cgroup.controllers").split()
        for c in ("cpu", "memory", "pids"):
            check(c in ctl, f"no {c} controller in {CG}/cgroup.controllers ({ctl})")
        check(not os.path.exists(f"{CG}/memory/memory.limit_in_bytes"), "a v1 memory hierarchy is visible")
        return f"kernel {os.uname().release}, {os.cpu_count()} CPUs, controllers {' '.join(ctl)}; /proc/cgroups lists {len(enabled)}"

    def start_daemon(self):
        self.d.start()
        return f"instance {self.d.instance}"

    def create(self):
        self.main = self.d.create("--type", "small")
        cg = self.d.cgroup(self.main)
        check(os.path.isdir(cg), f"no cgroup {cg} (sbxd did not use the v2 hierarchy)")
        check(read(f"{cg}/memory.max").strip() == str(4096 * MB), f"memory.max {read(cg + '/memory.max').strip()}")
        check(read(f"{cg}/pids.max").strip() == "1024", f"pids.max {read(cg + '/pids.max').strip()}")
        check(read(f"{cg}/cpu.max").split() == ["200000", "100000"], f"cpu.max {read(cg + '/cpu.max').strip()}")
        members = procs(cg)
        check(members, "the sandbox's cgroup holds no process")
        init = min(members)
        lines = read(f"/proc/{init}/cgroup").splitlines()
        v2 = [l for l in lines if l.startswith("0::")]
        check(v2 == [f"0::/sbx-{self.d.instance}/{self.main}"], f"the init's /proc/PID/cgroup is {lines!r}")
        check(self.d.get(self.main)["state"] == "running", "not running")
        # sbxd's favordynmods hierarchy (a named v1 one with no controller) shows here too.
        others = [l for l in lines if not l.startswith("0::")]
        return (f"{self.main}: memory.max, pids.max, cpu.max set; init {init} in {v2[0][3:]}"
                + (f"; also in {others}" if others else ""))

    def exec_(self):
        r = self.d.exec(self.main, "sh", "-c", "echo hello; grep ^0:: /proc/self/cgroup; id -u")
        check(r.stdout.split() == ["hello", "0::/", "0"], f"output {r.stdout!r}")
        r = self.d.exec(self.main, "sh", "-c", "exit 7", check=False)
        check(r.returncode == 7, f"exit status {r.returncode}, not 7")
        return "output, cgroup namespace root (0::/) and exit status"

    def memory_limit(self):
        sid = self.d.create("--type", "small", "--memory-mb", "64")
        cg = self.d.cgroup(sid)
        check(read(f"{cg}/memory.max").strip() == str(64 * MB), f"memory.max {read(cg + '/memory.max').strip()}")
        # Within the limit: a 16 MiB buffer is fine.
        self.d.exec(sid, "dd", "if=/dev/zero", "of=/dev/null", "bs=16M", "count=2")
        check(kv(f"{cg}/memory.events").get("oom_kill", 0) == 0, "an OOM kill below the limit")
        # Past it: busybox dd allocates its 256 MiB block and fills it from /dev/zero.
        r = self.d.exec(sid, "dd", "if=/dev/zero", "of=/dev/null", "bs=256M", "count=1", check=False)
        ev = kv(f"{cg}/memory.events")
        check(r.returncode == 137, f"dd past the limit exited {r.returncode} (stderr {r.stderr.strip()!r}), not 137 (SIGKILL)")
        check(ev.get("oom_kill", 0) >= 1, f"memory.events shows no OOM kill: {ev}")
        peak = int(read(f"{cg}/memory.peak")) if os.path.exists(f"{cg}/memory.peak") else None
        check(peak is None or peak <= 64 * MB, f"memory.peak {peak} above the limit")
        # The sandbox outlives its OOM kill (its agent is not the victim).
        r = self.d.exec(sid, "echo", "still-here")
        check(r.stdout.strip() == "still-here", f"after the OOM kill: {r.stdout!r}")
        self.d.sbx("rm", sid)
        wait_deleted(self.d, sid)
        return f"dd of 256 MiB killed (137), memory.events oom_kill={ev.get('oom_kill')} max={ev.get('max')}" + \
            (f", memory.peak {peak // 1024} KiB" if peak else "")

    def pids_limit(self):
        sid = self.d.create("--type", "small", "--pids", "32")
        cg = self.d.cgroup(sid)
        check(read(f"{cg}/pids.max").strip() == "32", f"pids.max {read(cg + '/pids.max').strip()}")
        # 100 background sleeps: without the limit they would all start.
        r = self.d.exec(sid, "sh", "-c",
                        "i=0; while [ $i -lt 100 ]; do sleep 600 >/dev/null 2>&1 & i=$((i+1)); done; echo done",
                        check=False, timeout=120)
        current = int(read(f"{cg}/pids.current"))
        ev = kv(f"{cg}/pids.events")
        members = procs(cg)
        check(ev.get("max", 0) >= 1, f"pids.events shows no refused fork: {ev} (exec: {r.returncode} {r.stderr.strip()[:300]!r})")
        check(current <= 32 and len(members) <= 32, f"pids.current {current}, {len(members)} processes: above the limit")
        check(len(members) >= 16, f"only {len(members)} processes: the flood did not run")
        self.d.sbx("rm", sid)
        wait_deleted(self.d, sid)
        return f"{len(members)} processes at pids.max 32, pids.events max={ev['max']}; deleted while full"

    def cpu_limit(self):
        check((os.cpu_count() or 1) >= 2, "the guest has one vCPU: a 1-CPU limit cannot throttle there")
        sid = self.d.create("--type", "small", "--cpus", "1")
        cg = self.d.cgroup(sid)
        check(read(f"{cg}/cpu.max").split() == ["100000", "100000"], f"cpu.max {read(cg + '/cpu.max').strip()}")
        before = kv(f"{cg}/cpu.stat")
        # Two busy loops for 3 s: two CPUs of demand against a quota of one.
        self.d.exec(sid, "sh", "-c",
                    "for i in 1 2; do timeout 3 sh -c 'while :; do :; done' & done; wait; true", timeout=120)
        st = kv(f"{cg}/cpu.stat")
        throttled = st.get("nr_throttled", 0) - before.get("nr_throttled", 0)
        check(st.get("nr_periods", 0) > 0, f"cpu.stat shows no period: {st}")
        check(throttled > 0 and st.get("throttled_usec", 0) > 0, f"not throttled: {st}")
        self.d.sbx("rm", sid)
        wait_deleted(self.d, sid)
        return (f"nr_periods={st['nr_periods']} nr_throttled={st['nr_throttled']} "
                f"throttled_usec={st['throttled_usec']} usage_usec={st.get('usage_usec')} (usage is approximate under TCG)")

    def count_file(self):
        return f"{self.d.data}/sandboxes/{self.main}/upper/root/count"

    def count(self) -> int:
        return int(read(self.count_file()).strip() or 0)

    def pause_resume(self):
        # Started by an exec and detached from it: it outlives the exec and a restart of
        # sbxd (a process started with `sbx spawn` does not outlive the restart, by design).
        self.d.exec(self.main, "sh", "-c",
                    "(n=0; while :; do n=$((n+1)); echo $n > /root/count.t; mv /root/count.t /root/count;"
                    " sleep 0.2; done) </dev/null >/dev/null 2>&1 &")
        wait_for("the counter to run", lambda: os.path.exists(self.count_file()) and self.count() >= 3)
        cg = self.d.cgroup(self.main)
        self.d.sbx("pause", self.main)
        check(self.d.get(self.main)["state"] == "paused", "state is not paused")
        check(kv(f"{cg}/cgroup.events").get("frozen") == 1, f"cgroup.events: {read(cg + '/cgroup.events')!r}")
        a = self.count()
        time.sleep(2)
        b = self.count()
        check(a == b, f"the counter ran while paused: {a} -> {b}")
        self.d.sbx("resume", self.main)
        check(self.d.get(self.main)["state"] == "running", "state is not running after resume")
        check(kv(f"{cg}/cgroup.events").get("frozen") == 0, f"cgroup.events: {read(cg + '/cgroup.events')!r}")
        c = wait_for("the counter to go on", lambda: self.count() if self.count() >= b + 3 else 0, timeout=20)
        return f"frozen 1: the counter stood at {a} for 2 s; thawed: it went on to {c}"

    def snapshot(self):
        self.d.exec(self.main, "sh", "-c", f"echo {self.note} > /root/note")
        self.d.sbx("snapshot", self.main, "smoke-tpl")
        sid = self.d.create("--from", "smoke-tpl")
        self.reads_note_then_delete(sid, "the sandbox made from the template")
        return f"template smoke-tpl; {sid} made from it reads the note"

    def reads_note_then_delete(self, sid, what):
        """Checks that `sid` reads the note written before the capture and has its cgroup,
        then deletes it."""
        r = self.d.exec(sid, "cat", "/root/note")
        check(r.stdout.strip() == self.note, f"{what} reads {r.stdout!r}")
        check(os.path.isdir(self.d.cgroup(sid)), f"no cgroup for {what}")
        self.d.sbx("rm", sid)
        wait_deleted(self.d, sid)

    def fork(self):
        ids = json.loads(self.d.sbx("fork", self.main, json_out=True).stdout)
        check(len(ids) == 1, f"fork answered {ids}")
        sid = ids[0]["id"]
        self.reads_note_then_delete(sid, "the fork")
        return f"{sid} reads the note"

    def sandbox_api(self):
        other = self.d.create("--type", "small")
        sock = f"{self.d.data}/sandbox-api/api.sock"
        paths = [f"/v1/sandboxes/{self.main}", f"/v1/sandboxes/{other}"]
        mine = subprocess.run([sys.executable, "-c", API_CLIENT, self.d.cgroup(self.main), sock, *paths],
                              capture_output=True, text=True, timeout=120)
        if mine.stdout.split() != ["200", "403"]:
            raise Failed(f"a caller in {self.main}'s cgroup got {mine.stdout.strip()!r} "
                         f"{mine.stderr.strip()[-500:]!r}, not 200 403; {peer_pidfd_support()}")
        nobody = subprocess.run([sys.executable, "-c", API_CLIENT, "-", sock, paths[0]],
                                capture_output=True, text=True, timeout=120)
        check(nobody.stdout.split() == ["closed"], f"a caller in no sandbox's cgroup got {nobody.stdout.strip()!r}")
        self.d.sbx("rm", other)
        wait_deleted(self.d, other)
        return "a caller in the sandbox's cgroup reads its own sandbox (200), not another (403); one in none is not served"

    def stop_start(self):
        sid = self.d.create("--type", "small", "--memory-mb", "128")
        cg = self.d.cgroup(sid)
        self.d.exec(sid, "sh", "-c", "echo on-disk > /root/file")
        self.d.sbx("pause", sid)
        members = procs(cg)
        self.d.sbx("stop", sid)  # a paused (frozen) sandbox can be stopped
        st = self.d.get(sid)["state"]
        check(st == "stopped", f"state {st} after stop")
        check(not os.path.exists(cg), "the stopped sandbox's cgroup is still there")
        alive = [p for p in members if os.path.exists(f"/proc/{p}")]
        check(not alive, f"processes of the stopped sandbox survive: {alive}")
        self.d.sbx("start", sid)
        check(read(f"{cg}/memory.max").strip() == str(128 * MB), "memory.max not set again at start")
        check(kv(f"{cg}/cgroup.events").get("frozen") == 0, "started frozen")
        r = self.d.exec(sid, "cat", "/root/file")
        check(r.stdout.strip() == "on-disk", f"after start: {r.stdout!r}")
        self.d.sbx("rm", sid)
        wait_deleted(self.d, sid)
        return f"{sid} stopped while paused ({len(members)} processes and its cgroup gone), started again with its files"

    def pool_claim(self):
        # A claim from the warm pool changes the limits of a running sandbox's cgroup.
        before = set(sandbox_cgroups(self.d))
        keep = {x for x in (self.main, self.paused) if x}
        self.d.stop()
        self.d.start("--pool-size", "1")
        try:
            first = self.d.create("--type", "small")  # teaches the pool the busybox image
            wait_for("a sandbox in the warm pool", lambda: self.d.metric("sbx_pool_ready") >= 1, timeout=90, step=0.5)
            claims = self.d.metric("sbx_pool_claims_total")
            sid = self.d.create("--type", "small", "--memory-mb", "64", "--pids", "24", "--cpus", "1")
            check(self.d.metric("sbx_pool_claims_total") == claims + 1, "the create was not served from the pool")
            cg = self.d.cgroup(sid)
            check(read(f"{cg}/memory.max").strip() == str(64 * MB), f"memory.max {read(cg + '/memory.max').strip()}")
            check(read(f"{cg}/pids.max").strip() == "24", f"pids.max {read(cg + '/pids.max').strip()}")
            check(read(f"{cg}/cpu.max").split() == ["100000", "100000"], f"cpu.max {read(cg + '/cpu.max').strip()}")
            r = self.d.exec(sid, "dd", "if=/dev/zero", "of=/dev/null", "bs=256M", "count=1", check=False)
            ev = kv(f"{cg}/memory.events")
            check(r.returncode == 137 and ev.get("oom_kill", 0) >= 1,
                  f"past the lowered limit dd exited {r.returncode}; memory.events {ev}")
            for x in (first, sid):
                self.d.sbx("rm", x)
                wait_deleted(self.d, x)
        finally:
            # Without a pool again: recovery removes the pooled sandbox that still waits
            # (its row, its cgroup and its folder).
            self.d.stop()
            self.d.start()
        try:
            wait_for("the pooled sandbox to be removed",
                     lambda: set(sandbox_cgroups(self.d)) == before
                     and set(os.listdir(f"{self.d.data}/sandboxes")) == keep, timeout=60)
        except Failed as e:
            errors = [l for l in self.d.log_tail(20000).splitlines() if l.startswith("E ")]
            raise Failed(f"{e}; cgroups {sandbox_cgroups(self.d)}, folders {os.listdir(self.d.data + '/sandboxes')}, "
                         f"sbxd's errors: {errors[-5:]}")
        return "claimed sandbox: memory.max 64 MiB, pids.max 24, cpu.max 1 CPU written to its live cgroup; OOM kill at the new limit"

    def delete(self):
        sid = self.d.create("--type", "small")
        cg = self.d.cgroup(sid)
        members = procs(cg)
        self.d.sbx("rm", sid)
        wait_deleted(self.d, sid)
        alive = [p for p in members if os.path.exists(f"/proc/{p}")]
        check(not alive, f"processes of the deleted sandbox survive: {alive}")
        return f"{sid}: row, cgroup, folder and {len(members)} processes gone"

    def restart_kill9(self):
        # A sandbox that stays paused across the restart.
        self.paused = self.d.create("--type", "small")
        self.d.sbx("pause", self.paused)
        token = f"alive-{os.getpid()}-{time.time()}"
        self.d.exec(self.main, "sh", "-c", f"echo {token} > /tmp/alive")
        cg_main, cg_paused = self.d.cgroup(self.main), self.d.cgroup(self.paused)
        members = procs(cg_main)
        init = min(members)
        old = self.d.proc.pid
        self.d.stop(signal.SIGKILL)
        check(not os.path.exists(f"/proc/{old}") or read(f"/proc/{old}/status").find("State:\tZ") >= 0,
              "sbxd survived kill -9")
        check(os.path.exists(f"/proc/{init}"), "the sandbox's init died with sbxd")
        check(kv(f"{cg_paused}/cgroup.events").get("frozen") == 1, "the paused sandbox thawed when sbxd died")
        count = self.count()
        self.d.start()
        r = self.d.exec(self.main, "cat", "/tmp/alive")
        check(r.stdout.strip() == token, f"after the restart /tmp/alive reads {r.stdout!r}: not the same sandbox")
        check(min(procs(cg_main)) == init, f"the init is now {min(procs(cg_main))}, was {init}")
        check(self.d.get(self.main)["state"] == "running", "the re-adopted sandbox is not running")
        wait_for("the counter to go on after the restart", lambda: self.count() > count, timeout=20)
        st = self.d.get(self.paused)["state"]
        check(st == "paused", f"the paused sandbox is {st} after the restart")
        check(kv(f"{cg_paused}/cgroup.events").get("frozen") == 1, "the paused sandbox is not frozen after the restart")
        self.d.sbx("resume", self.paused)
        check(kv(f"{cg_paused}/cgroup.events").get("frozen") == 0, "resume after the restart did not thaw it")
        r = self.d.exec(self.paused, "echo", "thawed")
        check(r.stdout.strip() == "thawed", f"the resumed sandbox answers {r.stdout!r}")
        return f"sbxd {old} killed; the new one re-adopted {self.main} (init {init}, /tmp kept) and the paused {self.paused}"

    def no_leftovers(self):
        # The long-lived sandbox is deleted while paused (frozen).
        frozen = None
        if self.main:
            frozen = (self.d.sbx("pause", self.main, check=False).returncode == 0
                      and kv(f"{self.d.cgroup(self.main)}/cgroup.events").get("frozen") == 1)
        for s in self.d.ls():
            self.d.sbx("rm", s["id"], check=False)
        self.d.sbx("template", "rm", "smoke-tpl", check=False)
        try:
            wait_for("every sandbox to be deleted",
                     lambda: not self.d.ls() and not os.listdir(f"{self.d.data}/sandboxes"), timeout=60)
        except Failed as e:
            raise Failed(f"{e}: listed {[x['id'] for x in self.d.ls()]}, folders {os.listdir(self.d.data + '/sandboxes')}")
        parent = self.d.parent_cgroup
        self.d.stop(signal.SIGTERM)
        time.sleep(0.5)
        cgs = sandbox_cgroups(self.d)
        ps = sandbox_processes()
        mounts = data_mounts(self.d)
        overlays = [l for l in read("/proc/self/mountinfo").splitlines() if " - overlay " in l]
        check(not cgs, f"sandbox cgroups left: {cgs}")
        check(not ps, f"processes left: {ps}")
        check(not mounts, f"mounts under the data dir left: {mounts}")
        check(not overlays, f"overlay mounts left: {overlays}")
        kept = os.path.isdir(parent)
        if kept:
            check(not procs(parent), f"processes in {parent}")
        check(frozen is not False, "the last sandbox could not be paused before its delete")
        favor = [l.split()[4] for l in read("/proc/self/mountinfo").splitlines()
                 if l.split()[4] == f"{self.d.data}/cgroup-favor"]
        return ("no sandbox cgroup, process, overlay or data-dir mount"
                + (" (the last sandbox deleted while frozen)" if frozen else "") + "; "
                + (f"the empty parent {parent[len(CG) + 1:]} stays" if kept else "no parent cgroup")
                + ("; sbxd's favordynmods mount stays (kept by design)" if favor else ""))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    os.makedirs(a.data, exist_ok=True)
    d = Sbxd(os.path.abspath(a.bin), os.path.realpath(a.data), os.path.join(a.out, "sbxd.log"))
    s = Suite(d)
    t0 = time.time()
    plan = [("the host is cgroup v2 only", s.host_is_v2_only), ("sbxd starts", s.start_daemon),
            ("create", s.create), ("exec", s.exec_), ("memory limit (OOM kill)", s.memory_limit),
            ("pids limit", s.pids_limit), ("cpu limit (throttling)", s.cpu_limit),
            ("pause (freeze) and resume (thaw)", s.pause_resume), ("snapshot and create from it", s.snapshot),
            ("fork", s.fork), ("in-sandbox API knows its caller by cgroup", s.sandbox_api),
            ("stop (while paused) and start", s.stop_start), ("delete", s.delete),
            ("sbxd kill -9 and restart re-adopts", s.restart_kill9),
            ("limits changed on a live cgroup (warm-pool claim)", s.pool_claim),
            ("no leftovers after deleting all and stopping sbxd", s.no_leftovers)]
    print(f"1..{len(plan)}", flush=True)
    # Without the host check or a daemon, nothing else can say anything; the checks on the
    # long-lived sandbox need the one from "create".
    uses_main = (s.exec_, s.pause_resume, s.snapshot, s.fork, s.sandbox_api, s.restart_kill9)
    for i, (name, fn) in enumerate(plan):
        why = ""
        if i >= 2 and fn != s.no_leftovers and (d.proc is None or d.proc.poll() is not None):
            why = "sbxd is not running"
        elif fn in uses_main and not s.main:
            why = "no sandbox from create"
        if why:
            s.results.append({"name": name, "ok": False, "seconds": 0, "detail": why})
            print(f"not ok {len(s.results)} - {name}: {why}", flush=True)
            continue
        if not s.run(name, fn) and i < 2:
            break
    if d.proc is not None and d.proc.poll() is None:
        d.stop()
    failed = [r for r in s.results if not r["ok"]]
    total = time.time() - t0
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump({"results": s.results, "seconds": round(total, 1), "kernel": os.uname().release,
                   "passed": len(s.results) - len(failed), "failed": len(failed)}, f, indent=1)
    print(f"# {len(s.results) - len(failed)} passed, {len(failed)} failed, of {len(plan)}; suite {total:.0f} s", flush=True)
    if failed:
        print("# the end of sbxd's log:\n" + d.log_tail(), flush=True)
    sys.exit(1 if failed or len(s.results) < len(plan) else 0)


if __name__ == "__main__":
    main()
