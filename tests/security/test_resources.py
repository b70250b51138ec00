"""Resource attacks stay inside their sandbox; the daemon keeps answering others."""
import threading
import os
import socket
import time

import pytest


@pytest.mark.container_wall("on gVisor a fork bomb meets the host's limit on the sentry's threads and stubs, and the sandbox ends whole")
def test_fork_bomb_stops_at_the_pids_limit(daemon):
    c = daemon.client()
    with c.create(image="busybox", resources={"pids": 64}) as bomb, c.create(image="busybox") as other:
        # A script, so every process of the bomb is named "bomb".
        bomb.exec("printf '#!/bin/sh\\nb() { b | b & }; b; sleep 60\\n' > /bin/bomb; chmod +x /bin/bomb", check=True)
        result = {}

        def run():
            result["r"] = bomb.exec(["/bin/bomb"], timeout_seconds=5)

        t = threading.Thread(target=run)
        t.start()
        time.sleep(1)
        # Meanwhile another sandbox is served.
        t0 = time.time()
        assert other.exec("echo alive", timeout_seconds=10).stdout == "alive\n"
        assert time.time() - t0 < 5
        t.join(timeout=60)
        r = result["r"]
        assert r.timed_out
        assert "can't fork" in r.stderr or "Resource temporarily unavailable" in r.stderr
        # The timeout killed the bomb's whole tree: its sandbox works again.
        assert bomb.exec("echo ok").stdout == "ok\n"
        assert bomb.exec("ps -o comm | grep -c '^bomb' || true").stdout.strip() == "0"


@pytest.mark.container_wall("on gVisor the host's OOM killer ends the sentry: the sandbox ends whole")
def test_memory_bomb_is_killed_by_its_own_limit(daemon):
    c = daemon.client()
    with c.create(image="default", resources={"memory_mb": 64}) as sb:
        r = sb.exec(["python3", "-c", "a = bytearray(512 * 1024 * 1024); print('allocated')"], timeout_seconds=60)
        assert r.exit_code == 137 and r.signal == 9
        assert "allocated" not in r.stdout
        # The sandbox survives (the agent is not the victim) and stays usable.
        assert sb.exec("echo fine").stdout == "fine\n"


def test_timed_out_exec_leaves_no_descendant(daemon):
    with daemon.client().create(image="busybox") as sb:
        r = sb.exec("echo partial; echo err >&2; sleep 1000 & (setsid sleep 1001 &); sleep 1002",
                    timeout_seconds=1)
        assert r.timed_out and r.exit_code == 124
        assert r.stdout == "partial\n" and r.stderr == "err\n"
        ps = sb.exec("ps -o comm,args").stdout
        assert "sleep" not in ps, ps


def test_background_process_outlives_a_normal_exec(daemon):
    with daemon.client().create(image="busybox") as sb:
        sb.exec("sleep 1000 > /dev/null 2>&1 &", check=True)
        assert "sleep 1000" in sb.exec("ps -o args").stdout


@pytest.mark.container_wall("on gVisor systrap's stub processes show on the host")
def test_500_orphans_are_reaped_while_others_are_served(daemon):
    """500 children orphaned at once (their parents exit at once) are reparented to the
    sandbox's init and reaped there: no zombie is left, nothing of them shows on the host,
    and another sandbox is served meanwhile."""
    c = daemon.client()
    with c.create(image="busybox") as sb, c.create(image="busybox") as other:
        host_before = len(os.listdir("/proc"))
        # Long sleeps: starting 500 takes seconds where fork is slow (about 6 s on a PVM
        # guest); they end together below, by a signal.
        sb.exec("for i in $(seq 500); do (sleep 600 >/dev/null 2>&1 &) ; done", check=True, timeout_seconds=120)
        # They all live now, as orphans of the sandbox's init.
        n = int(sb.exec("ps -o ppid,comm | grep -c '^ *1 sleep'").stdout.strip() or 0)
        assert n >= 500, n
        sb.exec("kill $(pidof sleep)", check=True)  # all at once
        t0 = time.time()
        assert other.exec("echo served", timeout_seconds=10).stdout == "served\n"
        assert time.time() - t0 < 5
        deadline = time.time() + 10
        while True:
            ps = sb.exec("ps -o stat,comm").stdout
            if (" Z" not in ps and "\nZ" not in ps and "sleep" not in ps) or time.time() > deadline:
                break
            time.sleep(0.2)
        assert " Z" not in ps and "\nZ" not in ps and "sleep" not in ps, ps
        assert len(os.listdir("/proc")) < host_before + 100  # none of them lingers on the host


def sbxd_rss_kb(d):
    with open(f"/proc/{d.proc.pid}/status") as f:
        return int(next(l.split()[1] for l in f if l.startswith("VmRSS:")))


def read_slowly(d, request, seconds, rss0):
    """Sends a raw request on a small-buffered socket and reads its answer 1 KiB every
    20 ms for `seconds`; returns the socket, the bytes read and sbxd's peak RSS (kB)."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", d.port))
    s.sendall(request)
    peak, got = rss0, 0
    deadline = time.time() + seconds
    while time.time() < deadline:
        got += len(s.recv(1024))
        peak = max(peak, sbxd_rss_kb(d))
        time.sleep(0.02)
    return s, got, peak


def test_a_slow_reader_of_a_flood_keeps_the_daemon_small(fresh_daemon):
    """`yes` streamed to a client that reads 1 KiB every 20 ms: backpressure reaches the
    command, so sbxd's memory stays flat; others are served meanwhile."""
    import json
    import socket
    d = fresh_daemon
    c = d.client()
    sb = c.create(image="busybox")
    other = c.create(image="busybox")
    rss0 = sbxd_rss_kb(d)
    body = json.dumps({"cmd": "yes flood", "timeout_seconds": 20}).encode()
    s, got, peak = read_slowly(d, f"POST /v1/sandboxes/{sb.id}/exec HTTP/1.1\r\nHost: x\r\n"
                                  f"Authorization: Bearer {d.key}\r\nAccept: application/x-ndjson\r\n"
                                  f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body,
                               6, rss0)
    assert got > 0
    assert other.exec("echo served", timeout_seconds=10).stdout == "served\n"
    assert peak - rss0 < 32 * 1024, (rss0, peak)  # kB
    s.close()  # the client goes; the command is killed at its timeout at the latest
    assert sb.exec("echo after", timeout_seconds=30).stdout == "after\n"
    sb.delete()
    other.delete()


def test_a_background_flood_with_a_slow_follower_keeps_the_daemon_small(fresh_daemon):
    """`yes` as a background process: its ring holds 1 MiB whatever it writes, a follower
    that reads slowly gets gaps instead of growing sbxd, and others are served meanwhile."""
    d = fresh_daemon
    c = d.client()
    sb = c.create(image="busybox")
    other = c.create(image="busybox")
    p = sb.processes.start("yes flood")
    time.sleep(0.3)
    rss0 = sbxd_rss_kb(d)
    s, got, peak = read_slowly(d, f"GET /v1/sandboxes/{sb.id}/processes/{p.pid}/output?follow=true HTTP/1.1\r\n"
                                  f"Host: x\r\nAuthorization: Bearer {d.key}\r\n\r\n".encode(), 5, rss0)
    assert got > 0
    assert other.exec("echo served", timeout_seconds=10).stdout == "served\n"
    assert peak - rss0 < 32 * 1024, (rss0, peak)  # kB
    s.close()
    assert p.info()["next_seq"] > 100  # it kept running, and its output kept flowing
    p.kill()
    assert p.wait(timeout=30)["signal"] == 9
    sb.delete()
    other.delete()


def test_a_buffered_flood_is_capped(fresh_daemon):
    d = fresh_daemon
    with d.client().create(image="busybox") as sb:
        rss0 = sbxd_rss_kb(d)
        r = sb.exec("yes flood | head -c 100000000; echo done >&2", timeout_seconds=60)
        assert r.exit_code == 0 and r.stdout_truncated and not r.stderr_truncated
        assert len(r.stdout) == 16 << 20 and r.stderr == "done\n"
        # The answer held at most the cap (16 MiB) once, plus its JSON copy.
        assert sbxd_rss_kb(d) - rss0 < 96 * 1024


def test_dev_shm_and_tmp_fills_stop_at_their_size(daemon):
    c = daemon.client()
    with c.create(image="busybox", resources={"memory_mb": 256}) as sb, c.create(image="busybox") as other:
        r = sb.exec("dd if=/dev/zero of=/dev/shm/fill bs=1M count=1024 2>&1; df -k /dev/shm | tail -1")
        assert "No space left" in r.stdout, r.stdout
        # /tmp is a tmpfs of half the sandbox's memory: it fills, and the memory limit holds.
        r = sb.exec("dd if=/dev/zero of=/tmp/fill bs=1M count=1024 2>&1; true", timeout_seconds=60)
        assert "No space left" in r.stdout or r.exit_code in (0, 137), r.stdout
        assert other.exec("echo fine").stdout == "fine\n"
        assert daemon.raw("GET", "/v1/health", auth=False)[0] == 200
        sb.exec("rm -f /dev/shm/fill /tmp/fill")
        assert sb.exec("echo usable").stdout == "usable\n"


def test_disk_fill_and_inode_flood_stop_at_the_sandbox_disk():
    """With a store (--store-mb), each sandbox's files live in a btrfs subvolume limited to
    its disk_mb: a disk fill and a flood of empty files both stop there, other sandboxes
    keep writing, the host's disk does not move, and the sandbox works again once it
    deletes what it made."""
    from conftest import Daemon
    d = Daemon("store", extra_args=["--store-mb", "1024"])
    try:
        d.cli("image", "build", "default", timeout=1800)  # from the cache
        host_free = os.statvfs(d.data).f_bavail * os.statvfs(d.data).f_frsize
        c = d.client()
        with c.create(image="default", user="root", resources={"disk_mb": 64}) as sb, c.create(image="busybox") as other:
            r = sb.exec("dd if=/dev/zero of=/root/fill bs=1M count=200 2>&1; echo rc=$?", timeout_seconds=120)
            assert "quota exceeded" in r.stdout.lower() and "rc=0" not in r.stdout, r.stdout
            assert int(sb.exec("stat -c %s /root/fill").stdout) <= 64 << 20
            assert other.exec("echo ok > /root/x && cat /root/x").stdout == "ok\n"
            sb.exec("rm /root/fill")
            assert sb.exec("echo again > /root/z && cat /root/z").stdout == "again\n"
        with c.create(image="default", user="root", resources={"disk_mb": 16}) as sb, c.create(image="busybox") as other:
            flood = ("import os\nos.makedirs('/root/many')\ni = 0\ntry:\n"
                     "    while True:\n        open('/root/many/%d' % i, 'w').close()\n        i += 1\n"
                     "except OSError as e:\n    print(i, e.errno)\n")
            sb.files.write("/flood.py", flood)
            r = sb.exec("python3 /flood.py", timeout_seconds=300)
            made, errno = map(int, r.stdout.split())
            assert errno == 122 and made > 1000, r.stdout  # EDQUOT, after many files
            assert other.exec("echo still > /root/y && cat /root/y").stdout == "still\n"
            sb.exec("rm -rf /root/many", timeout_seconds=120)
            assert sb.exec("echo again > /root/z && cat /root/z").stdout == "again\n"
            # The files API meets the same limit (one upload fits, the second does not).
            status, body = d.raw("PUT", f"/v1/sandboxes/{sb.id}/files?path=/root/big", body=os.urandom(10 << 20))
            assert status == 200, body
            status, body = d.raw("PUT", f"/v1/sandboxes/{sb.id}/files?path=/root/big2", body=os.urandom(10 << 20))
            assert status == 413 and "no space left" in body["error"]["message"], body
            assert sb.exec("ls -a /root").stdout.count(".sbx-upload") == 0  # the partial file went
        # Snapshots, templates and forks work on the store (layers are reflinked copies).
        with c.create(image="busybox", resources={"disk_mb": 128}) as sb:
            sum1 = sb.exec("head -c 50000000 /dev/urandom > /root/data && md5sum /root/data").stdout.split()[0]
            sb.snapshot("store-snap")
            with c.create(from_="store-snap") as t, sb.fork() as f:
                assert t.exec("md5sum /root/data").stdout.split()[0] == sum1
                assert f.exec("md5sum /root/data").stdout.split()[0] == sum1
            c.api.delete_named_snapshot("store-snap")
        # The store was allocated up front: nothing the sandboxes did moved the host's disk.
        after = os.statvfs(d.data).f_bavail * os.statvfs(d.data).f_frsize
        assert host_free - after < 64 << 20, (host_free, after)
    finally:
        d.destroy()


def sbxd_hwm_kb(d):
    with open(f"/proc/{d.proc.pid}/status") as f:
        return int(next(l.split()[1] for l in f if l.startswith("VmHWM:")))


def test_an_exec_of_control_bytes_costs_the_daemon_about_its_raw_output(fresh_daemon):
    """16 MiB of control bytes on stdout and on stderr (96 MiB each as JSON escapes): sbxd
    keeps the raw bytes and writes the answer out in pieces, each stream capped at twice
    the output cap once encoded."""
    d = fresh_daemon
    with d.client().create(image="busybox") as sb:
        sb.exec("echo warm", check=True)
        base = sbxd_rss_kb(d)
        cmd = "head -c 16777216 /dev/zero | tr '\\0' '\\1'; head -c 16777216 /dev/zero | tr '\\0' '\\2' >&2"
        status, body = d.raw("POST", f"/v1/sandboxes/{sb.id}/exec", body={"cmd": cmd, "timeout_seconds": 120},
                             timeout=180)
        peak = sbxd_hwm_kb(d)
        grew_mb = (peak - base) / 1024
        print(f"sbxd grew {grew_mb:.1f} MB (rss {base / 1024:.1f} MB before)")
        assert status == 200, body
        cap = 16 << 20
        # Cut at a whole \u0001 within twice the cap, and marked so.
        assert body["stdout"] == "\x01" * (2 * cap // 6) and body["stdout_truncated"] is True
        assert body["stderr"] == "\x02" * (2 * cap // 6) and body["stderr_truncated"] is True
        assert grew_mb < 120, f"sbxd grew by {grew_mb:.0f} MB for 32 MiB of output"
        assert sb.exec("echo fine").stdout == "fine\n"
