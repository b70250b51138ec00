#!/usr/bin/env python3
"""The E2B front's cost: the same call's round trip through E2B's data plane (as E2B's SDK
sends it) and through sbx's own API, in one sandbox, alternating so that the machine's
drift weighs on both alike: a command (process.Process/Start, a Connect stream, against
sbx's exec), a file write (POST /files, octet-stream, against PUT .../files) and a file
read (GET /files against GET .../files). Each call is on a kept-alive connection and ends
when its answer has been read whole. Prints a Markdown table of medians and p90s, and the
front's ratio to sbx's own API for each.

    sudo python3 bench/e2b.py [--runs 200] [--cmd true] [--file-kib 64]

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
    ap.add_argument("--file-kib", type=int, default=64)
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

        data = bytes(range(256)) * (args.file_kib * 4)
        front_files = {"E2b-Sandbox-Id": sid, "X-Access-Token": token}

        def write_own():
            own.request("PUT", f"/v1/sandboxes/{sid}/files?path=/tmp/bench-own", body=data,
                        headers=dict(own_h, **{"Content-Type": "application/octet-stream"}))
            r = own.getresponse()
            body = r.read()
            assert r.status == 200, body

        def write_front():
            front.request("POST", "/files?path=/tmp/bench-front", body=data,
                          headers=dict(front_files, **{"Content-Type": "application/octet-stream"}))
            r = front.getresponse()
            body = r.read()
            assert r.status == 200, body

        def read_own():
            own.request("GET", f"/v1/sandboxes/{sid}/files?path=/tmp/bench-own", headers=own_h)
            r = own.getresponse()
            assert r.status == 200 and r.read() == data

        def read_front():
            front.request("GET", "/files?path=/tmp/bench-front", headers=front_files)
            r = front.getresponse()
            assert r.status == 200 and r.read() == data

        def race(via_own, via_front):
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
            return times

        rows = [("command `" + " ".join(argv) + "`", "`POST /v1/sandboxes/{id}/exec`", "`process.Process/Start`",
                 race(via_own, via_front)),
                (f"write {args.file_kib} KiB", "`PUT .../files`", "`POST /files` (octet-stream)", race(write_own, write_front)),
                (f"read {args.file_kib} KiB", "`GET .../files`", "`GET /files`", race(read_own, read_front))]
        print(f"{args.runs} round trips each, alternating, one sandbox (default image)\n")
        print("| call | sbx's API | median ms | p90 ms | E2B front | median ms | p90 ms | front / own (medians) |")
        print("|---|---|---|---|---|---|---|---|")
        for what, own_route, front_route, t in rows:
            om, fm = statistics.median(t["own"]), statistics.median(t["front"])
            print(f"| {what} | {own_route} | {om:.2f} | {pct(t['own'], 0.9):.2f} | {front_route} | {fm:.2f} | "
                  f"{pct(t['front'], 0.9):.2f} | {fm / om:.3f} |")
    finally:
        d.destroy()


if __name__ == "__main__":
    main()
