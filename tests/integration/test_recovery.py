"""Daemon restarts (clean and kill -9) keep running sandboxes usable; cycles leak nothing."""
import signal
import time


def test_kill9_then_restart_keeps_running_sandboxes(fresh_daemon):
    d = fresh_daemon
    c = d.client()
    sb = c.create(image="busybox", name="survives")
    sb.exec("echo before > /root/f; sleep 1000 > /dev/null 2>&1 &", check=True)
    stopped = c.create(image="busybox")
    stopped.stop()
    d.stop(signal.SIGKILL)
    assert d.processes(), "the sandbox must outlive its daemon"
    d.start()
    c = d.client()
    got = c.get(sb.id)
    assert got.state == "running"
    assert got.exec("cat /root/f").stdout == "before\n"
    assert "sleep 1000" in got.exec("ps -o args").stdout
    assert c.get(stopped.id).state == "stopped"
    # Still fully managed: delete cleans everything.
    d.delete_all()
    d.wait_clean()


def test_restart_cleans_orphans(fresh_daemon):
    d = fresh_daemon
    c = d.client()
    sb = c.create(image="busybox")
    d.stop(signal.SIGKILL)
    # A sandbox whose processes died while sbxd was down is marked error, with a reason.
    import os, time
    for pid in d.processes():
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass  # gone already: killing the init ends the rest of its namespace
    deadline = time.time() + 10
    while d.processes() and time.time() < deadline:
        time.sleep(0.05)
    # A directory and a cgroup nobody owns.
    os.makedirs(os.path.join(d.data, "sandboxes", "sb-orphan00000000", "upper"))
    os.makedirs(f"/sys/fs/cgroup/pids/sbx-{d.instance}/sb-orphan11111111")
    d.start()
    c = d.client()
    got = c.get(sb.id)
    assert got.state == "error" and got.data["error"]
    assert "sb-orphan00000000" not in d.sandbox_dirs()
    assert "sb-orphan11111111" not in d.cgroups()
    got.start()
    assert got.exec("echo back").stdout == "back\n"


def daemon_resources(d):
    """fds, threads and RSS (kB) of the sbxd process."""
    import os
    pid = d.proc.pid
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    status = open(f"/proc/{pid}/status").read()
    field = lambda k: int(next(l.split()[1] for l in status.splitlines() if l.startswith(k + ":")))
    return fds, field("Threads"), field("VmRSS")


def test_1000_create_exec_delete_cycles_leave_nothing(fresh_daemon):
    """The CI subset of the 10,000-cycle run (bench/cycles.py runs the full one)."""
    d = fresh_daemon
    c = d.client()
    for i in range(50):  # warm-up: allocator arenas, thread pools, SQLite's cache
        sb = c.create(image="busybox")
        sb.exec("true")
        sb.delete()
    d.wait_clean(timeout=60)
    fds0, threads0, rss0 = daemon_resources(d)
    for i in range(1000):
        sb = c.create(image="busybox")
        assert sb.exec(["echo", str(i)]).stdout == f"{i}\n"
        sb.delete()
    d.wait_clean(timeout=60)
    assert not d.sandbox_mounts()
    fds1, threads1, rss1 = daemon_resources(d)
    assert fds1 <= fds0 + 4, (fds0, fds1)
    assert threads1 <= threads0 + 2, (threads0, threads1)
    assert rss1 <= rss0 + 16 * 1024, (rss0, rss1)  # kB: no per-sandbox growth
    # Rows: no sandbox row is left; usage keeps one closed billing period per sandbox.
    import sqlite3
    db = sqlite3.connect(f"file:{d.data}/sbxd.db?mode=ro", uri=True)
    assert db.execute("SELECT COUNT(*) FROM sandboxes").fetchone()[0] == 0
    assert db.execute("SELECT COUNT(*) FROM usage_periods WHERE end_ms = 0").fetchone()[0] == 0
    assert db.execute("SELECT COUNT(*) FROM usage_periods").fetchone()[0] == 1050


def test_load_burst_and_concurrent_clients(fresh_daemon):
    """The CI-sized load run (bench/load.py runs 50 clients for 60 s): 20 concurrent
    creates all complete, and 50 clients for 10 s get no answer but 2xx, 429 or 503."""
    import os
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
    import load
    d = fresh_daemon
    single, total, statuses = load.burst(d.url, d.key, 20)
    assert statuses == [201] * 20, statuses
    print(f"\n20 concurrent creates: {total:.0f} ms, one alone {single:.1f} ms")
    r = load.run_load(d.url, d.key, clients=50, seconds=10)
    assert not r["errors"], r["errors"][:5]
    assert r["cycles"] > 50, r["cycles"]
    for op in ("create", "exec", "delete"):
        xs = r["calls"][op]
        print(f"{op}: n={len(xs)} p50={load.pct(xs, 0.5):.1f} ms p99={load.pct(xs, 0.99):.1f} ms")
    # Still answers, and everything goes.
    assert d.raw("GET", "/v1/health", auth=False)[0] == 200
    d.wait_clean(timeout=120)


def test_a_sandbox_whose_wall_this_sbxd_lacks_is_kept_as_it_is(fresh_daemon):
    """Started once without gVisor, sbxd neither adopts a gVisor sandbox as a container nor
    marks it failed: it stays listed as it was, calls on it are refused naming the wall,
    and an sbxd with the wall again has it whole, its process still running."""
    d = fresh_daemon
    c = d.client()
    sb = c.create(image="busybox", isolation="gvisor")
    sb.exec("sleep 1000 > /dev/null 2>&1 &", check=True)
    before = sb.exec("pidof sleep").stdout
    d.stop()
    d.extra_args = [*d.extra_args, "--runsc", "none"]
    d.start()
    got = d.raw("GET", f"/v1/sandboxes/{sb.id}")[1]
    assert got["state"] == "running" and got["isolation"] == "gvisor", got
    status, body = d.raw("POST", f"/v1/sandboxes/{sb.id}/exec", body={"cmd": ["true"]})
    assert status == 409 and "isolation gvisor" in body["error"]["message"], body
    time.sleep(1.5)  # a policy tick does not mark it failed either
    assert d.raw("GET", f"/v1/sandboxes/{sb.id}")[1]["state"] == "running"
    d.stop()
    d.extra_args = d.extra_args[:-2]
    d.start()
    again = d.client().get(sb.id)
    assert again.state == "running" and again.exec("pidof sleep").stdout == before
