#!/usr/bin/env python3
"""What the microVM wall costs on this machine, against the container wall measured in the
same run (the floor). One sbxd of its own; prints Markdown tables:

- create to ready: a microVM's cold boot (QEMU, the guest kernel, the agent as PID 1) and a
  container's, alternating so that the machine's drift weighs on both alike;
- exec round trip (`true`, HTTP keep-alive) on each wall;
- memory per idle VM: its cgroup's (QEMU and the guest's touched pages) after it settles,
  against an idle container's;
- a memory template of one VM (a process running in it): the snapshot, then creates from
  it (each loads the template's memory) against the cold boot, and each copy's memory;
  creates from a template whose disk is smaller than the copies' (each grows its disk);
- hibernate and resume of one VM (QEMU saves its devices' state, sbxd copies the RAM the
  guest touched; a resume loads them), the resume against the cold boot, and the size of
  the saved VM on disk;
- N VMs at once: created in parallel, time until all answer, then their total memory.

It prints the accelerator the VMs used (health's microvm_accel). Under TCG (this kind of
machine: its KVM boots no stock guest) a boot is emulated instruction by instruction; on a
host whose KVM runs guests (--accel kvm, or auto) the same measurements show that path.

    sudo python3 bench/microvm.py [--runs 10] [--many 20] [--image busybox] [--accel tcg|kvm|auto]

Needs root, a built tree (SBX_BUILD_DIR or ./build), QEMU and the guest kernel
(scripts/install-microvm.sh).
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


def ms(t0):
    return (time.perf_counter() - t0) * 1000


def accelerator(c):
    """The accelerator sbxd settled on (its probe runs in the background at start)."""
    deadline = time.time() + 30
    while not c.health().get("microvm_accel") and time.time() < deadline:
        time.sleep(0.2)
    return c.health().get("microvm_accel")


def row(name, xs, unit="ms", floor=None):
    xs = sorted(xs)
    med = statistics.median(xs)
    p90 = xs[min(len(xs) - 1, int(len(xs) * 0.9))]
    ratio = f"{med / floor:.1f}x" if floor else ""
    return f"| {name} | {len(xs)} | {med:.1f} | {xs[0]:.1f} | {p90:.1f} | {ratio} |"


def memory_of(daemon, sid, wall):
    parent = f"sbx-{daemon.instance}" + ("-microvm" if wall == "microvm" else "")
    for path in (f"/sys/fs/cgroup/memory/{parent}/{sid}/memory.usage_in_bytes",
                 f"/sys/fs/cgroup/{parent}/{sid}/memory.current"):
        if os.path.exists(path):
            with open(path) as f:
                return int(f.read()) / (1 << 20)
    return float("nan")


def disk_rows(c, a):
    """A disk in each wall: a container binds it, a VM has it shared over 9p by QEMU."""
    disk = c.disks.create(size_mb=512)
    try:
        work = {
            "write 64 MiB and fsync": "dd if=/dev/zero of={d}/big bs=1M count=64 conv=fsync 2>/dev/null",
            "read 64 MiB": "cat {d}/big > /dev/null",
            "create 300 small files": "mkdir {d}/many && cd {d}/many && for i in $(seq 300); do echo $i > f$i; done",
            "list and remove them": "ls -l {d}/many > /dev/null && rm -r {d}/many",
        }
        # The VM's own root (its disk over virtio-blk, under the overlay) is the floor
        # that says what 9p costs, apart from what emulation costs.
        places = {"container": "/data", "microvm": "/data", "microvm-own": "/root/own"}
        took = {w: {k: [] for k in work} for w in places}
        calls = {"container": [], "microvm": []}
        for wall in ("container", "microvm"):
            with c.create(image=a.image, isolation=wall, disks=[{"id": disk.id, "mount_path": "/data"}]) as sb:
                sb.exec(["mkdir", "-p", "/root/own"], check=True)
                for _ in range(a.disk_runs):
                    for place in [p for p in places if p.startswith(wall)]:
                        for k, cmd in work.items():
                            t = time.perf_counter()
                            sb.exec(["sh", "-c", cmd.format(d=places[place])], check=True)
                            took[place][k].append(ms(t))
                        sb.exec(["rm", "-f", places[place] + "/big"], check=True)
            for _ in range(a.disk_runs):
                t = time.perf_counter()
                disk.exec(["true"], image=a.image, isolation=wall)
                calls[wall].append(ms(t))
        print("\n| a disk (ms) | runs | median | min | p90 | vs the floor above |")
        print("|---|---|---|---|---|---|")
        for k in work:
            print(row(f"{k}, container's disk", took["container"][k]))
            print(row(f"{k}, microVM's own root (virtio-blk)", took["microvm-own"][k]))
            print(row(f"{k}, microVM's disk (9p), vs its own root", took["microvm"][k],
                      floor=statistics.median(took["microvm-own"][k])))
        print(row("serverless call on the disk (`true`), container", calls["container"]))
        print(row("serverless call on the disk (`true`), microVM", calls["microvm"],
                  floor=statistics.median(calls["container"])))
    finally:
        disk.delete()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--many", type=int, default=20)
    ap.add_argument("--image", default="busybox")
    ap.add_argument("--accel", default="tcg")
    ap.add_argument("--disk-runs", type=int, default=3)
    ap.add_argument("--only-disks", action="store_true", help="the disk rows alone")
    a = ap.parse_args()
    d = Daemon("bench-microvm", extra_args=["--microvm-accel", a.accel])
    try:
        c = d.client()
        accel = accelerator(c)
        print(f"accelerator: {accel}; machine: {os.cpu_count()} CPUs; image {a.image}\n")
        # The layer's image is built at the first microVM create: not measured.
        c.create(image=a.image, isolation="microvm").delete()
        if a.only_disks:
            disk_rows(c, a)
            return
        create = {"container": [], "microvm": []}
        sbs = {"container": [], "microvm": []}
        for _ in range(a.runs):
            for wall in ("container", "microvm"):
                t = time.perf_counter()
                sb = c.create(image=a.image, isolation=wall)
                create[wall].append(ms(t))
                sbs[wall].append(sb)
        execs = {}
        for wall in ("container", "microvm"):
            sb = sbs[wall][0]
            sb.exec(["true"])
            xs = []
            for _ in range(a.runs * 5):
                t = time.perf_counter()
                sb.exec(["true"])
                xs.append(ms(t))
            execs[wall] = xs
        # Hibernate and resume cycles of one VM (a counter running in it).
        vm = sbs["microvm"][0]
        vm.exec(["sh", "-c", "(while true; do date +%s%N > /tmp/t; sleep 0.1; done) >/dev/null 2>&1 &"])
        # A memory template of it, and creates from it (each checked: the counter runs).
        name = f"bench-mem-{vm.id}"
        t = time.perf_counter()
        vm.snapshot(name, memory=True)
        snap_ms = ms(t)
        from_mem, copies = [], []
        for _ in range(a.runs):
            t = time.perf_counter()
            cp = c.create(from_=name, isolation="microvm")
            from_mem.append(ms(t))
            assert cp.exec(["cat", "/tmp/t"]).exit_code == 0
            copies.append(cp)
        # A template of a VM with a smaller disk than its copies': each copy's load then
        # grows its disk (QEMU's block_resize, the guest's online resize).
        small = c.create(image=a.image, isolation="microvm", resources={"disk_mb": 1024})
        small.snapshot(f"{name}-small", memory=True)
        small.delete()
        grown = []
        for _ in range(a.runs):
            t = time.perf_counter()
            cp = c.create(from_=f"{name}-small", isolation="microvm")
            grown.append(ms(t))
            cp.delete()
        c.api.request("DELETE", f"/v1/snapshots/{name}-small")
        time.sleep(5)
        copy_mem = [memory_of(d, s.id, "microvm") for s in copies]
        for s in copies:
            s.delete()
        c.api.request("DELETE", f"/v1/snapshots/{name}")
        # Forks with memory: one capture and one load per fork (count 1 each).
        forks = []
        for _ in range(a.runs):
            t = time.perf_counter()
            f = vm.fork(memory=True)
            forks.append(ms(t))
            assert f.exec(["cat", "/tmp/t"]).exit_code == 0
            f.delete()
        hib, res, saved = [], [], []
        for _ in range(a.runs):
            t = time.perf_counter()
            vm.pause(mode="hibernate")
            hib.append(ms(t))
            folder = os.path.join(d.data, "hibernated", vm.id)
            saved.append(sum(os.stat(os.path.join(folder, f)).st_blocks * 512 for f in os.listdir(folder)) / (1 << 20))
            t = time.perf_counter()
            vm.resume()
            res.append(ms(t))
            vm.exec(["cat", "/tmp/t"])
        time.sleep(5)  # idle: the guests settle
        mem = {w: [memory_of(d, s.id, w) for s in sbs[w]] for w in sbs}
        for w in sbs:
            for s in sbs[w]:
                s.delete()
        print("| what | runs | median | min | p90 | vs container |")
        print("|---|---|---|---|---|---|")
        print(row("create to ready, container (ms)", create["container"]))
        print(row(f"create to ready, microVM cold boot ({accel}) (ms)", create["microvm"],
                  floor=statistics.median(create["container"])))
        print(row("exec `true` round trip, container (ms)", execs["container"]))
        print(row(f"exec `true` round trip, microVM ({accel}) (ms)", execs["microvm"],
                  floor=statistics.median(execs["container"])))
        print(row(f"memory template of a microVM ({accel}), the snapshot (ms)", [snap_ms]))
        print(row(f"create from a memory template ({accel}), vs a cold boot (ms)", from_mem,
                  floor=statistics.median(create["microvm"])))
        print(row(f"create from a memory template with a 1 GiB disk, the copy's disk grown ({accel}), "
                  "vs the same disk (ms)", grown, floor=statistics.median(from_mem)))
        print(row("memory of an idle copy of a memory template, its cgroup (MiB)", copy_mem))
        print(row(f"fork with memory, count 1 ({accel}), vs a cold boot (ms)", forks,
                  floor=statistics.median(create["microvm"])))
        print(row(f"hibernate a microVM ({accel}) (ms)", hib))
        print(row(f"resume a hibernated microVM ({accel}), vs its cold boot (ms)", res,
                  floor=statistics.median(create["microvm"])))
        print(row("a hibernated microVM on disk (MiB)", saved))
        print(row("memory of an idle sandbox, container (MiB)", mem["container"]))
        print(row(f"memory of an idle VM, its cgroup (MiB)", mem["microvm"],
                  floor=statistics.median(mem["container"])))
        disk_rows(c, a)
        # N at once.
        t = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(a.many) as pool:
            many = list(pool.map(lambda _: c.create(image=a.image, isolation="microvm"), range(a.many)))
        all_ready = ms(t)
        ok = sum(1 for s in many if s.exec(["true"]).exit_code == 0)
        time.sleep(5)
        total = sum(memory_of(d, s.id, "microvm") for s in many)
        host = subprocess.run(["free", "-m"], capture_output=True, text=True).stdout.split("\n")[1].split()
        print(f"\n{a.many} microVMs created at once: all ready in {all_ready / 1000:.1f} s, {ok} answered an exec; "
              f"their cgroups hold {total:.0f} MiB ({total / a.many:.0f} MiB each); host used {host[2]} MiB of {host[1]}")
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda s: s.delete(), many))
    finally:
        d.destroy()


if __name__ == "__main__":
    main()
