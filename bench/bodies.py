#!/usr/bin/env python3
"""What one request body costs sbxd's memory: its peak (VmHWM) grown by the largest JSON
bodies each caller may send, each case against a fresh sbxd of its own (as root; no
network, no store), beside the body's own size.

    sudo python3 bench/bodies.py [--build build]

Cases: the admin's 64 MiB of one string, the admin's 64 MiB shaped as the most values the
parse budget takes (100,000), the admin's 64 MiB of 32 million values (refused by the
budget before a document is built), and E2B's access token with its 1 MiB of JSON.
"""
import argparse
import http.client
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def hwm_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


class Sbxd:
    def __init__(self, build):
        self.data = tempfile.mkdtemp(prefix="sbx-bench-bodies-", dir="/var/tmp")
        os.chmod(self.data, 0o711)
        self.port = free_port()
        self.proc = subprocess.Popen(
            [os.path.join(build, "sbxd"), "--listen", f"127.0.0.1:{self.port}", "--data-dir", self.data,
             "--socket", os.path.join(self.data, "sbxd.sock"), "--default-network", "none", "--store-mb", "0",
             "--default-image", "busybox", "--runsc", "none", "--qemu", "none", "--criu", "none",
             "--uid-base", str(1500000000 + (os.getpid() % 1000) * 65536)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(600):
            try:
                if self.call("GET", "/v1/health", auth=False)[0] == 200:
                    break
            except OSError:
                time.sleep(0.05)
        with open(os.path.join(self.data, "api-key")) as f:
            self.key = f.read().strip()

    def call(self, method, path, body=None, headers=None, auth=True):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=300)
        h = dict(headers or {})
        if auth:
            h["Authorization"] = "Bearer " + self.key
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        data = r.read()
        c.close()
        return r.status, data

    def stop(self):
        for sb in json.loads(self.call("GET", "/v1/sandboxes")[1]).get("sandboxes", []):
            self.call("DELETE", f"/v1/sandboxes/{sb['id']}")
        time.sleep(1)
        self.proc.terminate()
        self.proc.wait(timeout=30)
        subprocess.run(["umount", "-l", os.path.join(self.data, "cgroup-favor")], capture_output=True)
        shutil.rmtree(self.data, ignore_errors=True)


def case(build, name, send):
    d = Sbxd(build)
    try:
        status, sb = d.call("POST", "/v1/sandboxes", body=json.dumps({"image": "busybox"}),
                            headers={"Content-Type": "application/json"})
        sid = json.loads(sb)["id"]
        token = json.loads(d.call("GET", f"/sandboxes/{sid}", headers={"X-API-KEY": d.key}, auth=False)[1])[
            "envdAccessToken"]
        before = hwm_kib(d.proc.pid)
        size, status, took = send(d, sid, token)
        after = hwm_kib(d.proc.pid)
        print(f"{name:58s} {size / 1048576:8.1f} MiB  -> {status}  peak +{(after - before) / 1024:7.1f} MiB"
              f"  ({took * 1000:6.0f} ms)")
    finally:
        d.stop()


def admin(body):
    def send(d, sid, token):
        t = time.perf_counter()
        status, _ = d.call("PUT", "/v1/secrets/BENCH_BODY", body=body, headers={"Content-Type": "application/json"})
        return len(body), status, time.perf_counter() - t
    return send


def token(body):
    def send(d, sid, tok):
        t = time.perf_counter()
        status, _ = d.call("POST", "/process.Process/SendSignal", body=body, auth=False,
                           headers={"E2b-Sandbox-Id": sid, "X-Access-Token": tok, "Content-Type": "application/json"})
        return len(body), status, time.perf_counter() - t
    return send


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(os.path.dirname(__file__), "..", "build"))
    a = ap.parse_args()
    mib64 = 64 << 20
    one_string = ('{"value": "' + "x" * (mib64 - 16) + '"}').encode()
    values = 99_990
    budget = ('{"value": [' + ",".join(["0"] * values) + "]").encode()
    budget += b" " * (mib64 - len(budget) - 1) + b"}"
    many = b"[" + b"0," * (mib64 // 2 - 2) + b"0]"
    small = ('{"pad": "' + "y" * ((1 << 20) - 16) + '"}').encode()
    print("case                                                           body         answer  sbxd's peak grew by")
    case(a.build, "admin: one 64 MiB string", admin(one_string))
    case(a.build, f"admin: 64 MiB holding {values:,} values (the budget's most)", admin(budget))
    case(a.build, "admin: 64 MiB of 32 million values (over the budget)", admin(many))
    case(a.build, "E2B access token: 1 MiB (its limit)", token(small))


if __name__ == "__main__":
    main()
