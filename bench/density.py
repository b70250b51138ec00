#!/usr/bin/env python3
"""Density: many idle busybox sandboxes with the network on (`outbound`), on one sbxd of its
own on this machine. At each step of `--step` more sandboxes it measures, with medians:

- create to ready of one more sandbox (and its delete), against create with none there;
- `GET /v1/sandboxes` (the whole list) and `GET /metrics`;
- the host's nftables ruleset, in lines, and sbxd's resident memory.

After deleting them all it checks that nothing is left (no row, folder, cgroup or
process) and prints the ruleset's size against its size with none. A Markdown table.

    sudo python3 bench/density.py [--count 5000] [--step 500] [--runs 20]

The issue's targets: create at the full count within 1.2x of create at 0, the list and
/metrics under 50 ms. Needs root and a built tree (SBX_BUILD_DIR or ./build).
"""
import argparse
import concurrent.futures
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, os.path.join(ROOT, "sdk", "python"))
from conftest import Daemon  # noqa: E402


def ms_of(fn, runs):
    out = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1000)
    return statistics.median(out)


def ruleset_lines():
    r = subprocess.run(["nft", "list", "ruleset"], capture_output=True, text=True)
    return len(r.stdout.splitlines())


def rss_mb(d):
    with open(f"/proc/{d.proc.pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=5000)
    ap.add_argument("--step", type=int, default=500)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--parallel", type=int, default=8, help="creates in flight while filling")
    a = ap.parse_args()
    d = Daemon("density", extra_args=["--default-network", "outbound", "--max-sandboxes", "0",
                                      "--max-connections", "16384"])
    try:
        c = d.client()
        body = {"image": "busybox", "network": {"mode": "outbound"}, "ttl_seconds": 86400, "type": "small"}

        def one_cycle():
            sb = c.create(**{"image": "busybox", "network": "outbound", "ttl_seconds": 600})
            sb.delete()

        def get_list():
            status, _ = d.raw("GET", "/v1/sandboxes", timeout=600)
            assert status == 200

        def get_metrics():
            status, _ = d.raw("GET", "/metrics", timeout=600)
            assert status == 200

        rows = []
        made = []
        base_create = None
        while True:
            create = ms_of(one_cycle, a.runs)
            if base_create is None:
                base_create = create
            rows.append((len(made), create, create / base_create, ms_of(get_list, 5), ms_of(get_metrics, 5),
                         ruleset_lines(), rss_mb(d)))
            print("| %d | %.1f | %.2f | %.1f | %.1f | %d | %.0f |" % rows[-1], file=sys.stderr, flush=True)
            if len(made) >= a.count:
                break
            want = min(a.step, a.count - len(made))
            with concurrent.futures.ThreadPoolExecutor(a.parallel) as pool:
                made += list(pool.map(lambda _: d.raw("POST", "/v1/sandboxes", body=body, timeout=600)[1]["id"],
                                      range(want)))
        print("| sandboxes | create+delete ms | x at 0 | GET /v1/sandboxes ms | GET /metrics ms | nft lines | sbxd RSS MB |")
        print("|--:|--:|--:|--:|--:|--:|--:|")
        for r in rows:
            print("| %d | %.1f | %.2f | %.1f | %.1f | %d | %.0f |" % r)
        t = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(a.parallel) as pool:
            list(pool.map(lambda sid: d.raw("DELETE", f"/v1/sandboxes/{sid}", timeout=600), made))
        d.wait_clean(timeout=3600)  # no row, folder, cgroup or process left
        print(f"\ndeleted {len(made)} in {time.perf_counter() - t:.0f} s; nothing left (rows, folders, cgroups, "
              f"processes); nft lines {ruleset_lines()} (at 0: {rows[0][5]})")
    finally:
        d.destroy()


if __name__ == "__main__":
    main()
