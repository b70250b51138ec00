#!/usr/bin/env python3
"""Load on a running sbxd: N concurrent clients, each creating a sandbox, running a
command in it and deleting it, again and again for S seconds. Prints the count of
each answer and p50/p99 of each call. Any answer other than 2xx, 429 or 503 is an
error (exit code 1).

    python3 bench/load.py --url http://127.0.0.1:7070 --key KEY --clients 50 --seconds 60
Also `--burst 20`: 20 creates at once, timed against one create alone.
"""
import argparse
import collections
import http.client
import json
import statistics
import sys
import threading
import time
import urllib.parse


def pct(xs, q):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


class Conn:
    def __init__(self, url, key):
        u = urllib.parse.urlparse(url)
        self.host, self.port = u.hostname, u.port
        self.h = {"Authorization": "Bearer " + key, "Content-Type": "application/json"}
        self.c = http.client.HTTPConnection(self.host, self.port, timeout=120)

    def call(self, method, path, body=None):
        t = time.perf_counter()
        try:
            self.c.request(method, path, body=None if body is None else json.dumps(body), headers=self.h)
            r = self.c.getresponse()
            data = r.read()
            status = r.status
        except (OSError, http.client.HTTPException) as e:
            # No answer: status -1, and what went wrong (with how long it took) as the body.
            self.c.close()
            self.c = http.client.HTTPConnection(self.host, self.port, timeout=120)
            ms = (time.perf_counter() - t) * 1000
            return -1, f"{type(e).__name__}: {e} after {ms:.0f} ms", ms
        try:
            parsed = json.loads(data)
        except ValueError:
            parsed = None
        return status, parsed, (time.perf_counter() - t) * 1000


def run_load(url, key, clients=50, seconds=60, image="busybox"):
    """Returns {"calls": {op: [ms...]}, "statuses": Counter, "errors": [...], "cycles": n}."""
    lat = collections.defaultdict(list)
    statuses = collections.Counter()
    errors = []
    cycles = [0]
    lock = threading.Lock()
    stop_at = time.time() + seconds

    def worker(i):
        c = Conn(url, key)
        while time.time() < stop_at:
            st, body, ms = c.call("POST", "/v1/sandboxes", {"image": image, "no_env": True, "ttl_seconds": 600})
            with lock:
                statuses[("create", st)] += 1
                if st == 201:
                    lat["create"].append(ms)
                elif st not in (429, 503):
                    errors.append(("create", st, body))
            if st != 201:
                time.sleep(0.05)
                continue
            sid = body["id"]
            st, body, ms = c.call("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": ["echo", str(i)]})
            with lock:
                statuses[("exec", st)] += 1
                if st == 200 and body.get("stdout") == f"{i}\n":
                    lat["exec"].append(ms)
                elif st not in (429, 503):
                    errors.append(("exec", st, body))
            st, body, ms = c.call("DELETE", f"/v1/sandboxes/{sid}")
            with lock:
                statuses[("delete", st)] += 1
                if st == 200:
                    lat["delete"].append(ms)
                    cycles[0] += 1
                else:
                    errors.append(("delete", st, body))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {"calls": dict(lat), "statuses": statuses, "errors": errors, "cycles": cycles[0]}


def burst(url, key, n=20, image="busybox"):
    """n creates at once: (ms of one create alone, ms until all n answered, statuses)."""
    c = Conn(url, key)
    st, body, single = c.call("POST", "/v1/sandboxes", {"image": image, "no_env": True})
    assert st == 201, body
    c.call("DELETE", f"/v1/sandboxes/{body['id']}")
    ids, statuses = [], []
    lock = threading.Lock()

    def one():
        st, body, _ = Conn(url, key).call("POST", "/v1/sandboxes", {"image": image, "no_env": True})
        with lock:
            statuses.append(st)
            if st == 201:
                ids.append(body["id"])

    t0 = time.perf_counter()
    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    total = (time.perf_counter() - t0) * 1000
    for sid in ids:
        c.call("DELETE", f"/v1/sandboxes/{sid}")
    return single, total, statuses


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", default="http://127.0.0.1:7070")
    ap.add_argument("--key", required=True)
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--burst", type=int, default=20)
    ap.add_argument("--image", default="busybox")
    a = ap.parse_args()
    single, total, st = burst(a.url, a.key, a.burst, a.image)
    print(f"{a.burst} concurrent creates: all answered in {total:.1f} ms; one alone {single:.1f} ms "
          f"({total / single:.1f}x); statuses {collections.Counter(st)}")
    r = run_load(a.url, a.key, a.clients, a.seconds, a.image)
    print(f"{a.clients} clients for {a.seconds:.0f} s: {r['cycles']} create+exec+delete cycles "
          f"({r['cycles'] / a.seconds:.1f}/s)")
    print("| call | n | p50 ms | p99 ms | max ms |\n|---|--:|--:|--:|--:|")
    for op in ("create", "exec", "delete"):
        xs = r["calls"].get(op, [])
        print(f"| {op} | {len(xs)} | {pct(xs, 0.5):.1f} | {pct(xs, 0.99):.1f} | {max(xs) if xs else float('nan'):.1f} |")
    print("answers:", dict(r["statuses"]))
    if r["errors"]:
        print("errors:", r["errors"][:10])
        sys.exit(1)


if __name__ == "__main__":
    main()
