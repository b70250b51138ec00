#!/usr/bin/env python3
"""10,000 create/exec/delete cycles against a running sbxd, then what the daemon holds
against its baseline after a warm-up: fds, threads, RSS, and (with --data-dir) sandbox
rows, directories, cgroups and mounts. Exit code 1 on a leak.

    python3 bench/cycles.py --url http://127.0.0.1:7070 --key KEY --pid SBXD_PID --data-dir /var/lib/sbx
"""
import argparse
import hashlib
import os
import sqlite3
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from load import Conn  # noqa: E402


def resources(pid):
    status = open(f"/proc/{pid}/status").read()
    field = lambda k: int(next(l.split()[1] for l in status.splitlines() if l.startswith(k + ":")))
    return {"fds": len(os.listdir(f"/proc/{pid}/fd")), "threads": field("Threads"), "rss_kb": field("VmRSS")}


def kernel_objects(data_dir):
    inst = hashlib.sha256(os.path.realpath(data_dir).encode()).hexdigest()[:8]
    cg = set()
    for ctl in ("memory", "pids", "cpu", "freezer", "cpuacct"):
        base = f"/sys/fs/cgroup/{ctl}/sbx-{inst}"
        if os.path.isdir(base):
            cg |= {n for n in os.listdir(base) if os.path.isdir(os.path.join(base, n))}
    dirs = set(os.listdir(os.path.join(data_dir, "sandboxes")))
    mounts = sum(1 for l in open("/proc/self/mountinfo") if os.path.join(data_dir, "sandboxes") in l)
    db = sqlite3.connect(f"file:{data_dir}/sbxd.db?mode=ro", uri=True)
    rows = db.execute("SELECT COUNT(*) FROM sandboxes").fetchone()[0]
    return {"cgroups": len(cg), "dirs": len(dirs), "mounts": mounts, "rows": rows}


def cycle(c, i):
    st, body, _ = c.call("POST", "/v1/sandboxes", {"image": "busybox", "no_env": True})
    assert st == 201, body
    sid = body["id"]
    st, body, _ = c.call("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": ["echo", str(i)]})
    assert st == 200 and body["stdout"] == f"{i}\n", body
    st, body, _ = c.call("DELETE", f"/v1/sandboxes/{sid}")
    assert st == 200, body


def settle(c, data_dir, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        st, body, _ = c.call("GET", "/v1/sandboxes")
        if st == 200 and not body["sandboxes"] and (not data_dir or not kernel_objects(data_dir)["dirs"]):
            return
        time.sleep(0.1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", default="http://127.0.0.1:7070")
    ap.add_argument("--key", required=True)
    ap.add_argument("--pid", type=int, required=True, help="sbxd's pid")
    ap.add_argument("--data-dir")
    ap.add_argument("--cycles", type=int, default=10000)
    a = ap.parse_args()
    c = Conn(a.url, a.key)
    for i in range(100):
        cycle(c, i)
    settle(c, a.data_dir)
    base = resources(a.pid)
    kbase = kernel_objects(a.data_dir) if a.data_dir else {}
    t0 = time.time()
    for i in range(a.cycles):
        cycle(c, i)
        if (i + 1) % 1000 == 0:
            print(f"{i + 1} cycles, {(time.time() - t0) / (i + 1) * 1000:.1f} ms each, {resources(a.pid)}", flush=True)
    settle(c, a.data_dir)
    after = resources(a.pid)
    kafter = kernel_objects(a.data_dir) if a.data_dir else {}
    print("baseline:", base, kbase)
    print("after:   ", after, kafter)
    leak = (after["fds"] > base["fds"] + 4 or after["threads"] > base["threads"] + 2
            or after["rss_kb"] > base["rss_kb"] + 32 * 1024 or any(kafter[k] > kbase[k] for k in kafter))
    print("LEAK" if leak else "no leak")
    sys.exit(1 if leak else 0)


if __name__ == "__main__":
    main()
