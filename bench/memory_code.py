#!/usr/bin/env python3
"""The seed's tool call (`print(sympy.factorint(2**64 - 1))`) on a wall with memory
templates (the microVM wall; --isolation gvisor or container for the others):

  (c) a fresh sandbox per call from a files template (sympy installed): start, run, delete;
  (e) a fresh sandbox per call from a memory template whose code context imported sympy:
      create (the memory loads), one `run_code` cell, delete; without a pool, then with
      `--pool-size 2` and think time between calls (`--gap-ms`);
  (f) the same cell in the session sandbox's warm context;
  and the host's floor: the same script in the host's python3, where it has sympy
  (Debian's python3-sympy; another build than the sandbox's wheel).

On the gVisor and container walls it also prints the restore alone (runsc's, CRIU's, from
sbxd's log) against the whole create from the memory template, without a pool.

Needs root, a built tree (SBX_BUILD_DIR or ./build), the wall (QEMU and the guest kernel,
SBX_MICROVM_KERNEL; runsc; or CRIU that checkpoints here), and the default image's cached tarball (`sbx image build
default`). Installing sympy in the session VM takes a few minutes under TCG.

Usage: bench/memory_code.py [--isolation microvm|gvisor|container] [--runs N] [--gap-ms MS] [--accel tcg|kvm]
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, os.path.join(ROOT, "sdk", "python"))

from conftest import Daemon  # noqa: E402
from microvm import accelerator, ms  # noqa: E402

CALL = "print(sympy.factorint(2**64 - 1))"
WANT = "{3: 1, 5: 1, 17: 1, 257: 1, 641: 1, 65537: 1, 6700417: 1}\n"
WARM = "import sys, glob\nsys.path[:0] = glob.glob('/home/user/v/lib/python3*/site-packages')\nimport sympy"
SCRIPT = "~/v/bin/python -c 'import sympy; print(sympy.factorint(2**64 - 1))'"


def cell(d, sid, code, want=WANT):
    status, out = d.raw("POST", f"/v1/sandboxes/{sid}/code", body={"code": code}, timeout=600)
    assert status == 200 and out["error"] is None, out
    if want is not None:
        assert "".join(out["logs"]["stdout"]) == want, out
    return out


def cgroup_memory(d, sid):
    """A sandbox's memory as its cgroup counts it (cgroup v1 or v2), or None."""
    for parent in (f"sbx-{d.instance}", f"sbx-{d.instance}-gvisor", f"sbx-{d.instance}-microvm"):
        for f in (f"/sys/fs/cgroup/memory/{parent}/{sid}/memory.usage_in_bytes",
                  f"/sys/fs/cgroup/{parent}/{sid}/memory.current"):
            if os.path.exists(f):
                with open(f) as fh:
                    return int(fh.read())
    return None


def fresh(d, c, body, gap_ms, run):
    """One call in a fresh sandbox: (create, run, delete, total) in ms."""
    if gap_ms:
        time.sleep(gap_ms / 1000)
    t = time.perf_counter()
    sb = c.create(**body)
    created = ms(t)
    t1 = time.perf_counter()
    run(sb)
    ran = ms(t1)
    t2 = time.perf_counter()
    sb.delete()
    return created, ran, ms(t2), ms(t)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--gap-ms", type=int, default=3000)
    ap.add_argument("--accel", default="tcg")
    ap.add_argument("--isolation", default="microvm", choices=["microvm", "gvisor", "container"])
    a = ap.parse_args()
    wall = a.isolation
    d = Daemon("bench-vm-code", extra_args=["--microvm-accel", a.accel])
    rows = []
    try:
        c = d.client()
        accel = accelerator(c) if wall == "microvm" else {"gvisor": "none (gVisor, systrap)", "container": "none"}[wall]
        print(f"wall: {wall}; accelerator: {accel}; machine: {os.cpu_count()} CPUs; gap {a.gap_ms} ms before each fresh call\n")
        d.cli("image", "build", "default", timeout=1800)
        sess = c.create(image="default", isolation=wall)
        r = sess.exec(f"python3 -m venv ~/v && ~/v/bin/pip install -q sympy && {SCRIPT}", timeout_seconds=1800)
        assert r.exit_code == 0 and r.stdout == WANT, (r.stdout, r.stderr)
        files, mem = f"bench-files-{sess.id}", f"bench-mem-{sess.id}"
        sess.snapshot(files)
        cell(d, sess.id, WARM, want=None)
        f = []
        for _ in range(a.runs):
            t = time.perf_counter()
            cell(d, sess.id, CALL)
            f.append(ms(t))
        t = time.perf_counter()
        sess.snapshot(mem, memory=True)
        mem_snap = ms(t)

        def script(sb):
            r = sb.exec(SCRIPT, timeout_seconds=600)
            assert r.stdout == WANT, (r.stdout, r.stderr)
        cc = [fresh(d, c, {"from_": files, "isolation": wall}, 0, script) for _ in range(max(2, a.runs // 2))]
        e = [fresh(d, c, {"from_": mem, "isolation": wall}, 0, lambda sb: cell(d, sb.id, CALL))
             for _ in range(a.runs)]
        # The same daemon again with a pool of 2 (the session sandbox is adopted, the templates kept).
        d.proc.terminate()
        d.proc.wait(timeout=60)
        d.extra_args += ["--pool-size", "2"]
        d.start()
        c = d.client()
        fresh(d, c, {"from_": mem, "isolation": wall}, 0, lambda sb: cell(d, sb.id, CALL))  # teaches the pool
        deadline = time.time() + 300
        while d.metric("sbx_pool_ready") < 2 and time.time() < deadline:
            time.sleep(0.2)
        claims = d.metric("sbx_pool_claims_total")
        ep = [fresh(d, c, {"from_": mem, "isolation": wall}, a.gap_ms, lambda sb: cell(d, sb.id, CALL))
              for _ in range(a.runs)]
        served = d.metric("sbx_pool_claims_total") - claims
        # The memory of pooled copies as they wait (their cgroups), read once the pool refilled.
        deadline = time.time() + 300
        while d.metric("sbx_pool_ready") < 2 and time.time() < deadline:
            time.sleep(0.2)
        listed = {x["id"] for x in d.sandboxes()}
        pooled_mem = [m / 2**20 for m in (cgroup_memory(d, sid) for sid in d.cgroups() - listed) if m]

        host = []
        if subprocess.run(["python3", "-c", "import sympy"], capture_output=True).returncode == 0:
            for _ in range(a.runs):
                t = time.perf_counter()
                r = subprocess.run(["python3", "-c", "import sympy; print(sympy.factorint(2**64 - 1))"],
                                   capture_output=True, text=True)
                assert r.stdout == WANT, r
                host.append(ms(t))

        def med(xs, i=None):
            return statistics.median([x[i] for x in xs] if i is not None else xs)
        print("| pattern (ms per call) | runs | create | run | delete | total (median) |")
        print("|---|---|---|---|---|---|")
        if host:
            print(f"| host floor: python3 imports sympy (Debian's) | {len(host)} | - | {med(host):.0f} | - | {med(host):.0f} |")
        else:
            print("| host floor: not measured (the host's python3 has no sympy: apt-get install python3-sympy) | | | | | |")
        print(f"| (c) fresh sandbox from a files template, python imports sympy | {len(cc)} | {med(cc, 0):.0f} | "
              f"{med(cc, 1):.0f} | {med(cc, 2):.0f} | {med(cc, 3):.0f} |")
        print(f"| (e) fresh sandbox from a memory template, warm context, no pool | {len(e)} | {med(e, 0):.0f} | "
              f"{med(e, 1):.0f} | {med(e, 2):.0f} | {med(e, 3):.0f} |")
        print(f"| (e) the same, --pool-size 2, {a.gap_ms} ms think time ({served:.0f} of {len(ep)} from the pool) | "
              f"{len(ep)} | {med(ep, 0):.0f} | {med(ep, 1):.0f} | {med(ep, 2):.0f} | {med(ep, 3):.0f} |")
        if pooled_mem:
            print(f"| memory of a pooled sandbox as it waits (its cgroup; median of {len(pooled_mem)}) | | | | | "
                  f"{statistics.median(pooled_mem):.0f} MiB |")
        print(f"| (f) session sandbox, run_code in the warm context | {len(f)} | - | {med(f):.0f} | - | {med(f):.0f} |")
        log = d.log()
        restores = [int(m) for m in re.findall(r"restored from its template's memory in (\d+) ms", log)]
        criu = [int(m) for m in re.findall(r"restored from its template's memory in \d+ ms \(CRIU ran (\d+) ms\)", log)]
        if restores and wall != "microvm":
            print(f"\nthe restore alone (sbxd's log: {'runsc' if wall == 'gvisor' else 'CRIU'}'s restore and the "
                  f"agent's answer), median of {len(restores)}: {statistics.median(restores):.0f} ms; a create from "
                  f"the memory template without a pool: {med(e, 0):.0f} ms ({med(e, 0) / statistics.median(restores):.2f}x)")
        if criu:
            print(f"the `criu restore` process alone, median of {len(criu)}: {statistics.median(criu):.0f} ms; "
                  f"the create against it: {med(e, 0) / statistics.median(criu):.2f}x")
        print(f"\nmemory template of the session sandbox: {mem_snap:.0f} ms; "
              f"(e) without a pool / (c): {med(e, 3) / med(cc, 3):.2f}; with a pool / (c): {med(ep, 3) / med(cc, 3):.3f}")
        sess.delete()
        for n in (files, mem):
            c.api.request("DELETE", f"/v1/snapshots/{n}")
    finally:
        d.destroy()


if __name__ == "__main__":
    main()
