"""kill -9 of sbxd at named points inside create, snapshot, fork, delete, pause, exec and
serverless calls (the SBX_FAULT_POINT switch): after a restart every sandbox is running
and usable or cleanly failed, no snapshot is half-written, no disk is lost, and the
kernel's objects match what the DB says. Every point is walked twice: with captures that
copy files, and on a store (btrfs subvolumes and snapshots)."""
import os
import signal
import time

import pytest

import sbx
from conftest import CRIU, Daemon, require_hibernate


def crash_at(d, point):
    """Restarts the daemon armed to die at `point`."""
    d.stop()
    os.environ["SBX_FAULT_POINT"] = point
    try:
        d.start()
    finally:
        del os.environ["SBX_FAULT_POINT"]


def restart_after_crash(d):
    d.proc.wait(timeout=30)
    assert d.proc.returncode == -signal.SIGKILL, d.log()
    d.proc = None
    d.start()


def crash_while_a_copy_starts(d, wall, point):
    """sbxd dies at `point` while a copy of a memory template of `wall` starts: after a
    restart the copy is an error row whose delete leaves nothing (no VMM or sentry, cgroup
    or folder), the template's source runs on, and the template still makes whole copies,
    each under its own name."""
    c = d.client()
    src = c.create(image="busybox", isolation=wall)
    src.exec(["sh", "-c", "while true; do echo alive > /tmp/s; sleep 0.2; done >/dev/null 2>&1 &"], check=True)
    src.snapshot("crash-mem", memory=True)
    crash_at(d, point)
    try:
        d.client().create(from_="crash-mem", isolation=wall)
        pytest.fail(f"the copy started though sbxd was to die at {point}: {d.log()}")
    except sbx.SbxError:
        pass
    restart_after_crash(d)
    c = d.client()
    rows = {s["id"]: s for s in d.sandboxes()}
    assert rows[src.id]["state"] == "running"
    for sid, s in rows.items():
        if sid != src.id:
            assert s["state"] == "error" and s["error"], s
            d.raw("DELETE", f"/v1/sandboxes/{sid}")
    deadline = time.time() + 30
    while time.time() < deadline and (d.cgroups() != {src.id} or d.sandbox_dirs() != {src.id}):
        time.sleep(0.1)
    assert d.cgroups() == {src.id} and d.sandbox_dirs() == {src.id}
    assert c.get(src.id).exec("cat /tmp/s").stdout == "alive\n"
    cp = c.create(from_="crash-mem", isolation=wall)
    assert cp.exec("rm /tmp/s; sleep 0.5; cat /tmp/s").stdout == "alive\n"
    assert cp.exec("hostname").stdout.strip() == cp.id
    for sb in (cp, src):
        sb.delete()
    c.api.request("DELETE", "/v1/snapshots/crash-mem")
    d.wait_clean()


def pid_namespaces(d):
    """The distinct pid namespaces that processes in the daemon's uid range live in."""
    ns = set()
    for pid in d.processes():
        try:
            ns.add(os.readlink(f"/proc/{pid}/ns/pid"))
        except OSError:
            pass  # gone meanwhile
    return ns


def inits(d):
    """Host pids of the processes in the daemon's uid range that are pid 1 of their pid
    namespace: each running sandbox's init."""
    out = set()
    for pid in d.processes():
        try:
            with open(f"/proc/{pid}/status") as f:
                ns_pids = next((l.split()[1:] for l in f if l.startswith("NSpid:")), [])
        except OSError:
            continue  # gone meanwhile
        if ns_pids and ns_pids[-1] == "1":
            out.add(pid)
    return out


def consistent(d):
    """Rows, dirs, cgroups and namespaces agree once teardowns settle: every directory has
    a row, every running row its directory, and exactly the running sandboxes hold cgroups,
    pid namespaces and inits (one each). (A sandbox that failed before its files existed is an
    error row without a directory.)"""
    deadline = time.time() + 30
    while time.time() < deadline:
        rows = {s["id"]: s for s in d.sandboxes()}
        running = {i for i, s in rows.items() if s["state"] == "running"}
        dirs = set(d.sandbox_dirs())
        if (dirs <= set(rows) and running <= dirs and d.cgroups() == running
                and len(pid_namespaces(d)) == len(running) and len(inits(d)) == len(running)):
            return rows
        time.sleep(0.1)
    raise AssertionError(f"rows={list(rows)} dirs={d.sandbox_dirs()} cgroups={d.cgroups()} "
                         f"pid namespaces={len(pid_namespaces(d))} inits={sorted(inits(d))}\n" + d.describe_processes() + "\nlog: " + d.log())


@pytest.fixture(params=[False, True], ids=["copy", "store"])
def copy_or_store_daemon(request):
    """A daemon whose captures copy files, or one on a store (btrfs snapshots)."""
    d = Daemon("crash", extra_args=(["--store-mb", "1024"] if request.param else []) + ["--criu", CRIU])
    try:
        yield d
    finally:
        d.destroy()


@pytest.mark.parametrize("point", ["snapshot.frozen", "snapshot.copied", "snapshot.renamed", "snapshot.recorded"])
def test_crash_during_snapshot_leaves_whole_snapshot_or_none(copy_or_store_daemon, point):
    d = copy_or_store_daemon
    c = d.client()
    sb = c.create(image="busybox")
    sb.exec("head -c 5000000 /dev/urandom > /root/blob; md5sum /root/blob > /root/sum", check=True)
    before = inits(d)
    assert len(before) == 1, d.describe_processes()
    crash_at(d, point)
    c = d.client()
    with pytest.raises(sbx.SbxError):
        c.get(sb.id).snapshot("crashy")
    restart_after_crash(d)
    c = d.client()
    # The source is running again, thawed, with its files.
    src = c.get(sb.id)
    assert src.state == "running"
    assert src.exec("md5sum -c /root/sum", timeout_seconds=10).exit_code == 0
    names = [s.name for s in c.snapshots.list()]
    if point == "snapshot.recorded":
        assert names == ["crashy"]
        with c.create(from_="crashy") as copy:
            assert copy.exec("md5sum -c /root/sum").exit_code == 0
    else:
        assert names == []
    # No temporary or unnamed layer outlives the restart's collection.
    layers = os.listdir(os.path.join(d.data, "layers"))
    assert not [l for l in layers if l.startswith("tmp-")]
    assert len(layers) == len(names)
    consistent(d)
    # Re-adopted, not started again: the same init, and no other.
    assert inits(d) == before, d.describe_processes()


@pytest.mark.parametrize("point", ["create.row_inserted", "create.started"])
def test_crash_during_create_fails_cleanly(copy_or_store_daemon, point):
    d = copy_or_store_daemon
    crash_at(d, point)
    with pytest.raises(sbx.SbxError):
        d.client().create(image="busybox")
    restart_after_crash(d)
    rows = consistent(d)
    for s in rows.values():
        assert s["state"] == "error" and s["error"]
        # A failed sandbox can be deleted, leaving nothing.
        d.raw("DELETE", f"/v1/sandboxes/{s['id']}")
    d.wait_clean()


def test_crash_after_delete_is_marked_finishes_the_delete(copy_or_store_daemon):
    d = copy_or_store_daemon
    sb = d.client().create(image="busybox")
    crash_at(d, "delete.marked")
    with pytest.raises(sbx.SbxError):
        d.client().get(sb.id).delete()
    restart_after_crash(d)
    d.wait_clean()


def test_crash_during_fork_leaves_source_usable(copy_or_store_daemon):
    d = copy_or_store_daemon
    sb = d.client().create(image="busybox")
    sb.exec("echo x > /root/x", check=True)
    before = inits(d)
    crash_at(d, "fork.captured")
    with pytest.raises(sbx.SbxError):
        d.client().get(sb.id).fork(count=2)
    restart_after_crash(d)
    c = d.client()
    assert c.get(sb.id).exec("cat /root/x").stdout == "x\n"
    rows = consistent(d)
    assert list(rows) == [sb.id]
    assert inits(d) == before, d.describe_processes()
    assert os.listdir(os.path.join(d.data, "layers")) == []


def test_crash_during_pause_leaves_the_sandbox_running(copy_or_store_daemon):
    """Frozen, but killed before the pause was recorded: the restart thaws it (the DB
    says running) and it works."""
    d = copy_or_store_daemon
    sb = d.client().create(image="busybox")
    sb.exec("echo p > /root/p", check=True)
    before = inits(d)
    crash_at(d, "pause.done")
    with pytest.raises(sbx.SbxError):
        d.client().get(sb.id).pause()
    restart_after_crash(d)
    got = d.client().get(sb.id)
    assert got.state == "running"
    assert got.exec("cat /root/p").stdout == "p\n"
    consistent(d)
    assert inits(d) == before, d.describe_processes()


def test_crash_after_a_checkpoint_keeps_it(copy_or_store_daemon):
    """Killed once CRIU saved the sandbox, before the pause was recorded: the restart finds
    the whole checkpoint and the sandbox hibernated, and a resume brings its processes back."""
    d = copy_or_store_daemon
    require_hibernate(d)
    sb = d.client().create(image="busybox")
    loop = "echo $$ > /tmp/pid; n=0; while true; do n=$((n+1)); echo $n > /tmp/n.t; mv /tmp/n.t /tmp/n; sleep 0.1; done"
    sb.exec(["sh", "-c", f"sh -c '{loop}' >/dev/null 2>&1 &"], check=True)
    time.sleep(0.3)
    pid = sb.exec(["cat", "/tmp/pid"]).stdout.strip()
    crash_at(d, "pause.done")
    with pytest.raises(sbx.SbxError):
        d.client().get(sb.id).pause(mode="hibernate")
    restart_after_crash(d)
    got = d.client().get(sb.id)
    assert got.state == "paused" and got.data["pause_mode"] == "hibernate"
    assert got.resume().state == "running"
    assert got.exec(["cat", "/tmp/pid"]).stdout.strip() == pid
    n1 = int(got.exec(["cat", "/tmp/n"]).stdout)
    time.sleep(0.3)
    assert int(got.exec(["cat", "/tmp/n"]).stdout) > n1
    consistent(d)


def test_crash_during_exec_leaves_the_sandbox_usable(copy_or_store_daemon):
    d = copy_or_store_daemon
    sb = d.client().create(image="busybox")
    crash_at(d, "exec.started")
    with pytest.raises(sbx.SbxError):
        d.client().get(sb.id).exec("echo lost")
    restart_after_crash(d)
    got = d.client().get(sb.id)
    assert got.state == "running"
    assert got.exec("echo back").stdout == "back\n"
    rows = consistent(d)
    assert list(rows) == [sb.id]


def test_crash_during_a_serverless_call_loses_no_disk(copy_or_store_daemon):
    """The call's sandbox goes at the restart; the disk and its files stay."""
    d = copy_or_store_daemon
    c = d.client()
    disk = c.disks.create(size_mb=64)
    assert disk.exec("echo kept > kept.txt").exit_code == 0
    crash_at(d, "disk_exec.created")
    with pytest.raises(sbx.SbxError):
        d.client().disks.get(disk.id).exec("echo lost > lost.txt")
    restart_after_crash(d)
    c = d.client()
    deadline = time.time() + 30
    while time.time() < deadline and (d.sandboxes() or d.sandbox_dirs() or d.cgroups()):
        time.sleep(0.1)
    assert d.sandboxes() == [] and not d.sandbox_dirs() and not d.cgroups()
    disk = c.disks.get(disk.id)
    r = disk.exec("cat kept.txt; ls")
    assert r.stdout.startswith("kept\n") and "lost.txt" not in r.stdout
    disk.delete()
