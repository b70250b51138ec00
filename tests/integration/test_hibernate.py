"""Pause with mode "hibernate": the sandbox's processes are checkpointed to disk (CRIU on
the container wall, QEMU's save of the whole VM on the microVM wall; memory freed, nothing
left running) and restored on resume with the same pids, open files, working directories
and memory; across daemon restarts too. The microVM leg runs the wall-neutral tests here;
test_microvm.py has its own cycle test."""
import os
import signal
import threading
import time

import pytest

import sbx
from conftest import CRIU, ISOLATION, Daemon, criu_checkpoints, require_hibernate

# A python process holding state in memory (a random secret, a hit count, a 64 MiB buffer)
# and a listening socket; each connection gets "secret hits pid cwd".
SERVER = r'''
import os, socket, secrets, sys
os.chdir("/srv/work")
secret = secrets.token_hex(8)
ballast = bytearray(os.urandom(1 << 20)) * 64
hits = 0
log = open("/srv/work/server.log", "a")   # an open file across checkpoints
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 8123))
s.listen(8)
open("/srv/work/ready", "w").close()
while True:
    c, _ = s.accept()
    hits += 1
    log.write(f"hit {hits}\n"); log.flush()
    c.sendall(f"{secret} {hits} {os.getpid()} {os.getcwd()} {len(ballast)}".encode())
    c.close()
'''

ASK = ("import socket; c = socket.create_connection(('127.0.0.1', 8123)); "
       "print(c.recv(200).decode())")


def memory_rss(d: Daemon, sid: str) -> int:
    """Resident memory charged to the sandbox's cgroup (v1 memory.stat), in bytes (0 without
    a cgroup: the gVisor wall's hibernated sandbox has none)."""
    path = f"/sys/fs/cgroup/memory/{d.cgroup_parent}/{sid}/memory.stat"
    if ISOLATION == "gvisor" and not os.path.exists(path):
        return 0
    # gVisor's sentry keeps the sandbox's memory in a memory file: shared memory.
    keys = ("total_rss", "total_shmem") if ISOLATION == "gvisor" else ("total_rss",)
    with open(path) as f:
        got = {k: int(v) for k, v in (line.split() for line in f) if k in keys}
    assert set(got) == set(keys), got
    return sum(got.values())


def cgroup_pids(d: Daemon, sid: str):
    path = f"/sys/fs/cgroup/pids/{d.cgroup_parent}/{sid}/cgroup.procs"
    if ISOLATION == "gvisor" and not os.path.exists(path):
        return []
    with open(path) as f:
        return f.read().split()


def start_server(sb):
    sb.exec(["mkdir", "-p", "/srv/work"])
    sb.files.write("/srv/server.py", SERVER)
    sb.exec(["sh", "-c", "nohup python3 /srv/server.py >/dev/null 2>&1 &"])
    # A second process: a shell counting in the background (on a tmpfs file, replaced
    # whole each time so that a reader never sees it empty).
    sb.exec(["sh", "-c", "(i=0; while true; do i=$((i+1)); echo $i > /tmp/count.t; mv /tmp/count.t /tmp/count; sleep 0.1; done) "
                         ">/dev/null 2>&1 &"])
    for _ in range(100):
        if sb.exec(["test", "-e", "/srv/work/ready"]).exit_code == 0:
            break
        time.sleep(0.1)
    else:
        raise AssertionError("the server did not start")


def ask(sb):
    out = sb.exec(["python3", "-c", ASK]).stdout.split()
    return out[0], int(out[1]), int(out[2]), out[3], int(out[4])


@pytest.mark.not_on("microvm", "it reads the container wall's cgroups (test_microvm.py cycles a VM)")
@pytest.mark.parametrize("mode", ["hibernate", "freeze"])
def test_ten_cycles_keep_files_processes_and_memory(daemon, mode):
    if mode == "hibernate":
        require_hibernate(daemon)
    c = daemon.client()
    sb = c.create(image="default", user="root")
    try:
        start_server(sb)
        secret, hits, pid, cwd, size = ask(sb)
        assert cwd == "/srv/work" and size == 64 << 20
        count = int(sb.exec(["cat", "/tmp/count"]).stdout)
        for i in range(10):
            sb.files.write(f"/root/cycle-{i}", f"root {i}")
            sb.exec(["sh", "-c", f"echo tmp {i} > /tmp/cycle-{i}"])
            p = sb.pause(mode=mode)
            assert p.state == "paused" and p.data["pause_mode"] == mode
            if mode == "hibernate":
                # Nothing runs and nothing is resident: the memory is on disk.
                assert cgroup_pids(daemon, sb.id) == []
                assert memory_rss(daemon, sb.id) < (4 << 20)
                saved = os.path.join(daemon.data, "hibernated", sb.id)
                st = os.stat(saved)
                # Root's; CRIU's restore reads it as the sandbox's group too, runsc's as root.
                assert st.st_uid == 0 and st.st_mode & 0o007 == 0
                if ISOLATION == "container":
                    assert st.st_mode & 0o777 == 0o750 and st.st_gid == daemon.uid_base
            else:
                assert memory_rss(daemon, sb.id) > (64 << 20)
            assert sb.pause(mode=mode).state == "paused"  # idempotent
            assert sb.resume().state == "running"
            assert sb.resume().state == "running"
            for j in range(i + 1):
                assert sb.files.read(f"/root/cycle-{j}") == f"root {j}"
                assert sb.exec(["cat", f"/tmp/cycle-{j}"]).stdout == f"tmp {j}\n"
            s2, h2, p2, cwd2, size2 = ask(sb)
            assert (s2, h2, p2, cwd2, size2) == (secret, hits + 1, pid, cwd, size)
            hits = h2
            time.sleep(0.3)
            now = int(sb.exec(["cat", "/tmp/count"]).stdout)
            assert now > count, "the counting process stopped"
            count = now
        assert sb.exec(["cat", "/srv/work/server.log"]).stdout.count("hit") == hits
        if mode == "hibernate":
            assert memory_rss(daemon, sb.id) > (64 << 20)
            assert not os.path.exists(os.path.join(daemon.data, "hibernated", sb.id))
            assert daemon.metric("sbx_hibernate_seconds_count") >= 10
            assert daemon.metric("sbx_restore_seconds_count") >= 10
    finally:
        sb.delete()


def test_exec_files_and_ports_resume_a_hibernated_sandbox(daemon):
    require_hibernate(daemon)
    c = daemon.client()
    sb = c.create(image="default", user="root")
    try:
        start_server(sb)
        secret, hits, pid, _, _ = ask(sb)
        sb.pause(mode="hibernate")
        assert ask(sb)[:3] == (secret, hits + 1, pid)  # the exec restored it
        sb.pause(mode="hibernate")
        sb.files.write("/root/after", "x")  # so does a file call
        assert sb.refresh().state == "running" and sb.files.read("/root/after") == "x"
        sb.pause(mode="hibernate")
        # The server answers raw bytes, not HTTP: the proxy reached the port (after the
        # restore) and says that the answer was not HTTP.
        status, body = daemon.raw("GET", f"/v1/sandboxes/{sb.id}/ports/8123/")
        assert status == 503 and "no valid HTTP answer" in body["error"]["message"], body
        assert sb.refresh().state == "running"
        assert ask(sb)[0] == secret
    finally:
        sb.delete()


def test_hibernate_refusals_change_nothing(daemon):
    require_hibernate(daemon)
    c = daemon.client()
    sb = c.create(image="busybox")
    try:
        # An exec in flight holds a connection from sbxd into the sandbox (a background
        # process does not: its agent keeps it, and sbxd lets go around the checkpoint).
        running = threading.Thread(target=lambda: sb.exec(["sleep", "2"]))
        running.start()
        time.sleep(0.5)
        status, body = daemon.raw("POST", f"/v1/sandboxes/{sb.id}/pause", body={"mode": "hibernate"})
        running.join()
        assert status == 409 and body["error"]["code"] == "conflict"
        assert "connections open" in body["error"]["message"]
        assert sb.refresh().state == "running"
        # Frozen, then asked to hibernate: resume first.
        sb.pause(mode="freeze")
        status, body = daemon.raw("POST", f"/v1/sandboxes/{sb.id}/pause", body={"mode": "hibernate"})
        assert status == 409 and "already paused with mode freeze" in body["error"]["message"]
        assert sb.refresh().data["pause_mode"] == "freeze"
        sb.resume()
        assert sb.pause(mode="hibernate").data["pause_mode"] == "hibernate"
        status, body = daemon.raw("POST", f"/v1/sandboxes/{sb.id}/pause", body={"mode": "freeze"})
        assert status == 409 and "already paused with mode hibernate" in body["error"]["message"]
        # A snapshot of a hibernated sandbox takes its files; a stop drops the checkpoint.
        sb.exec(["sh", "-c", "echo kept > /root/f"])
        sb.pause(mode="hibernate")
        sb.snapshot(f"hib-snap-{sb.id}")
        assert sb.refresh().data["pause_mode"] == "hibernate"
        other = c.create(from_=f"hib-snap-{sb.id}")
        assert other.exec(["cat", "/root/f"]).stdout == "kept\n"
        other.delete()
        c.api.delete_named_snapshot(f"hib-snap-{sb.id}")
        assert sb.stop().state == "stopped"
        assert not os.path.exists(os.path.join(daemon.data, "hibernated", sb.id))
        assert sb.start().exec(["cat", "/root/f"]).stdout == "kept\n"
    finally:
        sb.delete()


@pytest.mark.not_on("microvm", "CRIU is the container wall's")
@pytest.mark.not_on("gvisor", "CRIU is the container wall's")
def test_without_criu_hibernate_is_refused():
    d = Daemon("nocriu", extra_args=["--criu", "none"])
    try:
        assert "container" not in d.raw("GET", "/v1/health", auth=False)[1]["features"]["hibernate_isolation"]
        sb = d.client().create(image="busybox")
        status, body = d.raw("POST", f"/v1/sandboxes/{sb.id}/pause", body={"mode": "hibernate"})
        assert status == 400 and "needs CRIU" in body["error"]["message"]
        assert sb.refresh().state == "running"
        sb.delete()
    finally:
        d.destroy()


@pytest.mark.not_on("microvm", "CRIU is the container wall's")
@pytest.mark.not_on("gvisor", "CRIU is the container wall's")
def test_sbxd_finds_criu_by_itself_only_if_criu_check_passes(tmp_path, monkeypatch):
    # Without --criu, sbxd takes the set-up's build from the cache folder...
    # (Only one that checkpoints a test process on this kernel: see require_hibernate.)
    d = Daemon("findcriu")
    try:
        works, _ = criu_checkpoints()
        assert ("container" in d.raw("GET", "/v1/health", auth=False)[1]["features"]["hibernate_isolation"]) is works
        assert ("hibernate: CRIU at " in d.log()) is works
    finally:
        d.destroy()
    # ...but not a CRIU whose `criu check` fails (as Debian 12's own does on newer
    # kernels): here a cache folder whose criu fails its check, and a PATH with no criu.
    bad = tmp_path / "cache" / "criu"
    bad.mkdir(parents=True)
    (bad / "criu").write_text("#!/bin/sh\n[ \"$1\" = check ] && { echo 'Looks bad.'; exit 1; }\nexit 0\n")
    (bad / "criu").chmod(0o755)
    monkeypatch.setenv("SBX_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    d = Daemon("badcriu")
    try:
        assert "container" not in d.raw("GET", "/v1/health", auth=False)[1]["features"]["hibernate_isolation"]
        assert "`criu check` failed" in d.log()
    finally:
        d.destroy()


def test_hibernated_sandbox_survives_kill9_of_sbxd_and_delete_leaves_nothing():
    d = Daemon("hib", extra_args=["--criu", CRIU])
    try:
        require_hibernate(d)
        c = d.client()
        sb = c.create(image="busybox")
        loop = "echo $$ > /tmp/pid; n=0; while true; do n=$((n+1)); echo $n > /tmp/n.t; mv /tmp/n.t /tmp/n; sleep 0.1; done"
        sb.exec(["sh", "-c", f"cd /tmp && echo kept > here && sh -c '{loop}' >/dev/null 2>&1 &"])
        time.sleep(0.3)
        pid = sb.exec(["cat", "/tmp/pid"]).stdout.strip()
        sb.pause(mode="hibernate")
        d.stop(sig=signal.SIGKILL)
        d.start()
        sb = c.get(sb.id)
        assert sb.state == "paused" and sb.data["pause_mode"] == "hibernate"
        assert sb.resume().state == "running"
        assert sb.exec(["cat", "/tmp/here"]).stdout == "kept\n"
        n1 = int(sb.exec(["cat", "/tmp/n"]).stdout)
        time.sleep(0.5)
        assert int(sb.exec(["cat", "/tmp/n"]).stdout) > n1
        # The same process, by pid, as before the checkpoint.
        assert sb.exec(["cat", f"/proc/{pid}/cmdline"]).stdout.startswith("sh\0-c\0echo $$")
        # Hibernated again, then deleted: the checkpoint, cgroup and files all go.
        sb.pause(mode="hibernate")
        assert os.listdir(os.path.join(d.data, "hibernated")) == [sb.id]
        sb.delete()
        d.wait_clean()
        assert os.listdir(os.path.join(d.data, "hibernated")) == []
    finally:
        d.destroy()


@pytest.mark.not_on("microvm", "QEMU cannot save a VM with a disk (test_microvm.py checks the 409)")
def test_a_mounted_disk_goes_through_hibernation(daemon):
    """A disk is a bind of a host mount: the checkpoint names it, the restore binds it
    again, and a process working on it goes on."""
    require_hibernate(daemon)
    c = daemon.client()
    disk = c.disks.create(size_mb=64)
    try:
        with c.create(image="busybox", disks=[{"id": disk.id, "mount_path": "/work/data"}]) as sb:
            loop = "cd /work/data; n=0; while true; do n=$((n+1)); echo $n > n.t; mv n.t n; sleep 0.1; done"
            sb.exec(["sh", "-c", f"sh -c '{loop}' >/dev/null 2>&1 &"], check=True)
            time.sleep(0.3)
            sb.pause(mode="hibernate")
            assert sb.resume().state == "running"
            n1 = int(sb.exec(["cat", "/work/data/n"]).stdout)
            time.sleep(0.3)
            assert int(sb.exec(["cat", "/work/data/n"]).stdout) > n1
            mounts = sb.exec(["cat", "/proc/self/mounts"]).stdout
            assert " /work/data " in mounts and " /run/sbx " in mounts
        assert int(disk.read_file("n")) > n1  # the same disk, seen from the host
    finally:
        disk.delete()


@pytest.mark.not_on("microvm", "it watches CRIU in the container wall's cgroup")
def test_delete_cancels_a_restore_in_flight():
    """A delete during a resume from hibernation kills the restore (CRIU runs in the
    sandbox's cgroup) instead of waiting for it: nothing is left, and the resume answers
    that the sandbox was deleted (or, if it won the race, the sandbox is gone after)."""
    import threading
    d = Daemon("cancel", extra_args=["--criu", CRIU])
    try:
        require_hibernate(d)
        c = d.client()
        sb = c.create(image="busybox", resources={"memory_mb": 2048})
        # ~300 MB of memory to restore: long enough for a delete to meet it.
        sb.exec("dd if=/dev/urandom of=/tmp/big bs=1M count=300 2>/dev/null", check=True, timeout_seconds=120)
        sb.pause(mode="hibernate")
        answer = {}

        def resume():
            answer["r"] = d.raw("POST", f"/v1/sandboxes/{sb.id}/resume", timeout=120)

        t = threading.Thread(target=resume)
        t.start()
        for _ in range(200):  # until the restore is under way (CRIU in the cgroup)
            try:
                with open(f"/sys/fs/cgroup/pids/{d.cgroup_parent}/{sb.id}/cgroup.procs") as f:
                    if f.read().split():
                        break
            except OSError:
                pass
            time.sleep(0.01)
        status, _ = d.raw("DELETE", f"/v1/sandboxes/{sb.id}")
        assert status in (200, 204)
        t0 = time.time()
        t.join(timeout=120)
        status, body = answer["r"]
        print(f"resume answered {status} {time.time() - t0:.2f} s after the delete")
        assert status in (200, 404), body
        if status == 404:
            assert "deleted" in body["error"]["message"]
        d.wait_clean(timeout=60)
        assert d.sandboxes() == []
    finally:
        d.destroy()
