#!/usr/bin/env python3
"""What networking costs, on this machine only: two sbxd daemons of its own (one with a
warm pool) and the lab network of tests/netlab.py (an "internet" namespace reached through
the host's routing table). Prints Markdown tables:

- create: network mode "none" (loopback only) against "outbound" (a veth link, the
  sandbox's rules in the firewall), cold and from the warm pool, alternating so that the
  machine's drift weighs on both alike;
- TCP connection setup and throughput each way, sandbox <-> lab server, against the same
  client code on the host <-> the same server (the floor, measured in the same run), on
  the wall `--isolation` names; and an upload held to the small type's limit;
- memory: the kernel's (slab and per-CPU) per sandbox with a link against without.

    sudo python3 bench/network.py [--runs 20] [--mb 256] [--subnet6 auto|none]
                                  [--isolation container|gvisor|microvm]

(`--subnet6 none`: both daemons give sandboxes IPv4 only; two runs, one each way, show
what IPv6 adds to a link.)

Needs root, a built tree (SBX_BUILD_DIR or ./build) and the default image's cached
tarball (scripts/setup.sh makes it).
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, os.path.join(ROOT, "sdk", "python"))
import netlab  # noqa: E402
from conftest import Daemon  # noqa: E402

CLIENT = r"""
import socket, statistics, sys, time
mode, host, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
if mode == "connect":
    times = []
    for _ in range(n):
        t = time.perf_counter()
        socket.create_connection((host, 9000), timeout=5).close()
        times.append(time.perf_counter() - t)
    print(statistics.median(times) * 1e6)
elif mode == "up":
    s = socket.create_connection((host, 9000), timeout=30)
    chunk = b"x" * (1 << 20)
    t = time.perf_counter()
    for _ in range(n):
        s.sendall(chunk)
    s.shutdown(socket.SHUT_WR)
    got = int(s.recv(64))
    assert got == n << 20, got
    print(n / (time.perf_counter() - t))
else:
    s = socket.create_connection((host, 9001), timeout=30)
    buf = bytearray(1 << 20)
    t = time.perf_counter()
    s.sendall(b"%d\n" % (n << 20))
    total = 0
    while True:
        k = s.recv_into(buf)
        if not k:
            break
        total += k
    assert total == n << 20, total
    print(n / (time.perf_counter() - t))
"""


def median(xs):
    return statistics.median(xs)


def time_creates(c, runs, gap):
    out = {"none": [], "outbound": []}
    for i in range(runs):
        for mode in (("none", "outbound") if i % 2 == 0 else ("outbound", "none")):
            if gap:
                time.sleep(gap)
            t = time.perf_counter()
            sb = c.create(image="busybox", network=mode, ttl_seconds=600)
            out[mode].append((time.perf_counter() - t) * 1000)
            sb.delete()
    return out


def kernel_kb():
    """The kernel's own memory that links and namespaces take: slab and per-CPU."""
    info = dict(l.split(":") for l in open("/proc/meminfo"))
    return sum(int(info[k].split()[0]) for k in ("Slab", "Percpu"))


def memory_per_sandbox(c, mode, count):
    samples = []
    for _ in range(3):
        before = kernel_kb()
        made = [c.create(image="busybox", network=mode, ttl_seconds=600) for _ in range(count)]
        time.sleep(1)
        samples.append((kernel_kb() - before) / count)
        for sb in made:
            sb.delete()
        time.sleep(2)
    return median(samples)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--mb", type=int, default=256)
    ap.add_argument("--count", type=int, default=20, help="sandboxes for the memory row")
    ap.add_argument("--subnet6", default="auto", help="the daemons' --net-subnet6 (none: IPv4 only)")
    ap.add_argument("--isolation", default="container", help="the wall of the throughput rows' sandboxes")
    a = ap.parse_args()
    lab = netlab.Lab().start()
    subnet = f"10.254.{os.getpid() % 250}.0/24"
    common = ["--net-subnet", subnet, "--dns-upstream", netlab.DNS, "--default-network", "outbound",
              "--net-subnet6", a.subnet6]
    d = Daemon("netbench", extra_args=common)
    dp = None
    try:
        d.cli("image", "build", "default", timeout=1800)
        c = d.client()
        time_creates(c, 2, 0)  # warm-up
        cold = time_creates(c, a.runs, 0)
        d_pool_subnet = f"10.254.{(os.getpid() + 1) % 250}.0/24"
        dp = Daemon("netbenchpool", extra_args=["--net-subnet", d_pool_subnet, "--dns-upstream", netlab.DNS,
                                                "--default-network", "outbound", "--net-subnet6", a.subnet6,
                                                "--pool-size", "2"])
        cp = dp.client()
        time_creates(cp, 2, 1.0)
        pooled = time_creates(cp, a.runs, 1.0)

        print(f"## create (ms, median of {a.runs}, busybox image)\n")
        print("| | none | outbound | added |")
        print("|---|---|---|---|")
        for name, rows in (("cold", cold), ("warm pool", pooled)):
            n, o = median(rows["none"]), median(rows["outbound"])
            print(f"| {name} | {n:.2f} | {o:.2f} | {o - n:+.2f} |")

        # The large type's limit (10 Gbit/s) is above what this path carries: the link's own cost.
        sb = c.create(image="default", type="large", ttl_seconds=1800, isolation=a.isolation)
        rows = []
        for mode, n, unit in (("connect", 300, "µs"), ("up", a.mb, "MB/s"), ("down", a.mb, "MB/s")):
            host_runs, sb_runs = [], []
            for _ in range(3):
                host_runs.append(float(subprocess.run([sys.executable, "-c", CLIENT, mode, netlab.WEB, str(n)],
                                                      capture_output=True, text=True, check=True).stdout))
                r = sb.exec(["python3", "-c", CLIENT, mode, netlab.WEB, str(n)], timeout_seconds=300)
                assert r.exit_code == 0, r.stderr
                sb_runs.append(float(r.stdout))
            rows.append((mode, unit, median(host_runs), median(sb_runs)))
        sb.refresh()
        net = sb.network
        sb.delete()
        # The small type's 1000 Mbit/s (119 MiB/s): a second's burst passes at full speed
        # (on gVisor the stream is paced from its first byte), then the stream holds the
        # rate, without stalls.
        sb = c.create(image="default", type="small", ttl_seconds=1800, isolation=a.isolation)
        limited = []
        for _ in range(3):
            r = sb.exec(["python3", "-c", CLIENT, "up", netlab.WEB, "768"], timeout_seconds=300)
            assert r.exit_code == 0, r.stderr
            limited.append(float(r.stdout))
        sb.delete()
        print(f"\n## sandbox (type large, {a.isolation}) <-> lab server, against the host <-> the same server "
              "(median of 3)\n")
        print("| | host (floor) | sandbox | ratio |")
        print("|---|---|---|---|")
        names = {"connect": "TCP connect (µs)", "up": "upload (MB/s)", "down": "download (MB/s)"}
        for mode, unit, h, s in rows:
            print(f"| {names[mode]} | {h:.0f} | {s:.0f} | {s / h:.2f} |")
        print(f"\n(the sandbox's counters after these: tx {net['tx_bytes'] >> 20} MiB, rx {net['rx_bytes'] >> 20} MiB)")
        print(f"\nupload of 768 MiB, type small (limit 1000 Mbit/s, 119 MiB/s): "
              f"{median(limited):.0f} MiB/s (median of 3)")

        none_mb = memory_per_sandbox(c, "none", a.count)
        out_mb = memory_per_sandbox(c, "outbound", a.count)
        print(f"\n## kernel memory (slab and per-CPU) per sandbox, {a.count} at once, busybox, KiB (median of 3)\n")
        print("| none | outbound | added by the link and its rules |")
        print("|---|---|---|")
        print(f"| {none_mb:.0f} | {out_mb:.0f} | {out_mb - none_mb:+.0f} |")
    finally:
        if dp:
            dp.destroy()
        d.destroy()
        lab.stop()


if __name__ == "__main__":
    main()
