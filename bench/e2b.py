#!/usr/bin/env python3
"""The E2B front's cost: the same command's round trip through E2B's data plane
(process.Process/Start, a Connect stream, as E2B's SDK sends it) and through sbx's own
exec, in one sandbox, alternating so that the machine's drift weighs on both alike. Each
call is on a kept-alive connection and ends when its answer has been read whole. Prints
a Markdown table of medians and p90s, and the front's ratio to sbx's own exec.

    sudo python3 bench/e2b.py [--runs 200] [--cmd true]

Needs root, a built tree (SBX_BUILD_DIR or ./build) and the default image's cached
tarball (scripts/setup.sh makes it): E2B's SDK runs every command with /bin/bash -l -c,
and so do both sides here.
"""
import argparse
import http.client
import json
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, os.path.join(ROOT, "sdk", "python"))
from conftest import Daemon  # noqa: E402


def envelope(msg):
    body = json.dumps(msg).encode()
    return b"\x00" + len(body).to_bytes(4, "big") + body


def frames(data):
    """The Connect envelopes of a whole stream: [(flags, message)]."""
    out, i = [], 0
    while i + 5 <= len(data):
        n = int.from_bytes(data[i + 1:i + 5], "big")
        out.append((data[i], json.loads(data[i + 5:i + 5 + n])))
        i += 5 + n
    return out


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--cmd", default="true")
    args = ap.parse_args()
    d = Daemon("bench-e2b", extra_args=["--default-image", "default"])
    try:
        d.cli("image", "build", "default", timeout=1800)
        status, sb = d.raw("POST", "/v2/sandboxes", body={"templateID": "default", "timeout": 3600},
                           headers={"X-API-KEY": d.key}, auth=False)
        assert status == 201, sb
        sid, token = sb["sandboxID"], sb["envdAccessToken"]
        argv = ["/bin/bash", "-l", "-c", args.cmd]
        own = http.client.HTTPConnection("127.0.0.1", d.port, timeout=60)
        front = http.client.HTTPConnection("127.0.0.1", d.port, timeout=60)
        own_body = json.dumps({"cmd": argv})
        own_h = {"Authorization": "Bearer " + d.key, "Content-Type": "application/json"}
        front_body = envelope({"process": {"cmd": argv[0], "args": argv[1:]}, "stdin": False})
        front_h = {"E2b-Sandbox-Id": sid, "X-Access-Token": token, "Content-Type": "application/connect+json",
                   "Connect-Protocol-Version": "1"}

        def via_own():
            own.request("POST", f"/v1/sandboxes/{sid}/exec", body=own_body, headers=own_h)
            r = own.getresponse()
            body = r.read()
            assert r.status == 200 and json.loads(body)["exit_code"] == 0, body

        def via_front():
            front.request("POST", "/process.Process/Start", body=front_body, headers=front_h)
            r = front.getresponse()
            got = frames(r.read())
            assert r.status == 200 and got[-1] == (2, {}), got
            assert got[-2][1]["event"]["end"]["exitCode"] == 0, got

        for f in (via_own, via_front):  # warm both paths
            for _ in range(5):
                f()
        times = {"own": [], "front": []}
        for i in range(args.runs):
            order = (("own", via_own), ("front", via_front)) if i % 2 == 0 else (("front", via_front), ("own", via_own))
            for name, f in order:
                t = time.perf_counter()
                f()
                times[name].append((time.perf_counter() - t) * 1000)
        own_med, front_med = statistics.median(times["own"]), statistics.median(times["front"])
        print(f"`{' '.join(argv)}`, {args.runs} round trips each, alternating, one sandbox (default image)\n")
        print("| path | median ms | p90 ms |")
        print("|---|---|---|")
        print(f"| sbx's exec (`POST /v1/sandboxes/{{id}}/exec`) | {own_med:.2f} | {pct(times['own'], 0.9):.2f} |")
        print(f"| E2B front (`process.Process/Start`) | {front_med:.2f} | {pct(times['front'], 0.9):.2f} |")
        print(f"\nfront / own, medians: {front_med / own_med:.3f}")
    finally:
        d.destroy()


if __name__ == "__main__":
    main()
