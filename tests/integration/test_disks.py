"""Persistent disks and serverless calls: each call is a fresh sandbox with the disk at
/mnt/disk; only what it writes there outlives the call."""
import os
import signal
import socket
import threading
import time

import pytest

import sbx
from conftest import ISOLATION


def test_only_the_disk_outlives_a_call(client):
    disk = client.disks.create(name="ws-basic", size_mb=64)
    try:
        assert disk.id.startswith("dk-") and disk.data["size_mb"] == 64
        r = disk.exec("pwd; echo kept > /mnt/disk/kept; echo lost > /root/lost; echo $SBX_SANDBOX_ID", image="busybox")
        assert r.exit_code == 0 and r.stdout.startswith("/mnt/disk\n")
        first_sandbox = r.stdout.split()[1]
        assert r.timing.queue_ms > 0 and r.timing.execute_ms > 0
        assert r.cost_usd == pytest.approx(0.05 / 1000)
        r = disk.exec("cat /mnt/disk/kept; ls /root; echo $SBX_SANDBOX_ID", image="busybox")
        assert r.stdout.split("\n")[0] == "kept" and "lost" not in r.stdout
        assert first_sandbox not in r.stdout  # a fresh sandbox per call
        # By name too, and through argv.
        assert client.disks.get("ws-basic").exec(["cat", "kept"], image="busybox").stdout == "kept\n"
        assert client.disks.get(disk.id).data["used_bytes"] > 0
    finally:
        disk.delete()
    with pytest.raises(sbx.NotFoundError):
        client.disks.get(disk.id)


def test_parallel_calls_share_the_disk(client):
    disk = client.disks.create(size_mb=64)
    try:
        errors = []

        def call(i):
            try:
                r = disk.exec(f"echo {i} > /mnt/disk/part-{i}; cat /mnt/disk/part-{i}", image="busybox")
                assert r.stdout == f"{i}\n"
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=call, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert not errors, errors
        assert disk.exec("ls /mnt/disk | sort | tr '\\n' ' '", image="busybox").stdout == \
            "part-0 part-1 part-2 part-3 part-4 part-5 "
    finally:
        disk.delete()


def test_disk_attached_to_a_long_lived_sandbox(client, daemon):
    disk = client.disks.create(size_mb=64)
    try:
        with client.create(image="busybox", disks=[{"id": disk.id, "mount_path": "/project/data"}]) as sb:
            sb.exec("echo from-session > /project/data/shared", check=True)
            assert disk.exec("cat shared", image="busybox").stdout == "from-session\n"
            disk.exec("echo from-call > shared2", image="busybox", check=True)
            assert sb.exec("cat /project/data/shared2").stdout == "from-call\n"
            status, body = daemon.raw("DELETE", f"/v1/disks/{disk.id}")
            assert status == 409 and body["error"]["code"] == "conflict"
        # Deletable once no sandbox uses it.
    finally:
        disk.delete()


def test_timeout_is_504_with_partial_output_and_leaves_nothing(fresh_daemon):
    d = fresh_daemon
    c = d.client()
    disk = c.disks.create(size_mb=32)
    with pytest.raises(sbx.ExecTimeoutError) as e:
        disk.exec("echo partial; echo err >&2; sleep 1000 & sleep 1000", timeout_seconds=1, image="busybox")
    assert e.value.status == 504 and e.value.message == "Exec timed out"
    assert e.value.result.stdout == "partial\n" and e.value.result.stderr == "err\n"
    d.wait_clean()
    status, body = d.raw("POST", f"/v1/disks/{disk.id}/exec", body={"cmd": "true", "timeout_seconds": 301})
    assert status == 400
    disk.delete()


def test_full_disk_is_enospc_inside_and_nothing_else(client):
    small = client.disks.create(size_mb=16)
    other = client.disks.create(size_mb=16)
    try:
        r = small.exec("dd if=/dev/zero of=big bs=1M count=40; echo rc=$?", image="busybox")
        assert "No space left on device" in r.stderr and "rc=1" in r.stdout
        assert other.exec("echo fine > f && cat f", image="busybox").stdout == "fine\n"
        # Space comes back when the file goes.
        assert small.exec("rm big && echo x > y && cat y", image="busybox").stdout == "x\n"
    finally:
        small.delete()
        other.delete()


def test_planted_files_gain_nothing_in_the_next_call(client):
    disk = client.disks.create(size_mb=32)
    try:
        # A FIFO too, but for microVMs: Debian 12's QEMU serves no special file over 9p.
        fifo = "" if ISOLATION == "microvm" else "; mkfifo fifo"
        disk.exec("cp /bin/busybox id && chmod 4755 id; ln -s / rootlink" + fifo, image="busybox", check=True)
        r = disk.exec("grep ' /mnt/disk ' /proc/self/mounts; cat rootlink/etc/hostname 2>&1; "
                      "su -s /bin/sh nobody -c './id -u; grep CapEff /proc/self/status'",
                      image="busybox")
        mount_line = r.stdout.splitlines()[0]
        if ISOLATION == "container":  # gVisor's /proc/mounts does not show its binds' flags
            assert "nosuid" in mount_line and "nodev" in mount_line
        # The symlink resolves inside the call's own sandbox, never on the host.
        assert socket.gethostname() not in r.stdout
        # Run by a user, the planted setuid-root id stays that user's, with no capabilities.
        assert "\n65534\n" in r.stdout and "CapEff:\t0000000000000000" in r.stdout, r.stdout
    finally:
        disk.delete()


def test_disks_survive_daemon_restarts(fresh_daemon):
    d = fresh_daemon
    disk = d.client().disks.create(name="durable", size_mb=32)
    disk.exec("echo durable > f", image="busybox", check=True)
    d.stop(signal.SIGKILL)
    d.start()
    c = d.client()
    assert c.disks.get("durable").exec("cat f", image="busybox").stdout == "durable\n"
    d.stop()
    d.start()
    c = d.client()
    assert c.disks.get("durable").exec("cat f", image="busybox").stdout == "durable\n"
    c.disks.get("durable").delete()


@pytest.mark.parametrize("body", [
    '{"size_mb": 0}', '{"size_mb": -1}', '{"size_mb": 99999999999}', '{"size_mb": "10"}',
    '{"name": "Bad Name"}', '{"name": "../x"}', '{"extra": 1}', "{bad",
])
def test_bad_disk_create(daemon, body):
    before = daemon.raw("GET", "/v1/disks")[1]["disks"]
    status, resp = daemon.raw("POST", "/v1/disks", body=body, headers={"Content-Type": "application/json"})
    assert status == 400, resp
    assert daemon.raw("GET", "/v1/disks")[1]["disks"] == before


def test_bad_disk_attachments(client, daemon):
    disk = client.disks.create(size_mb=16)
    try:
        for mounts in ([{"id": disk.id, "mount_path": "relative"}], [{"id": disk.id, "mount_path": "/proc/x"}],
                       [{"id": disk.id, "mount_path": "/a/../b"}], [{"id": disk.id, "mount_path": "/"}],
                       [{"id": disk.id, "mount_path": "/x/"}], [{"id": "../etc"}], "nope",
                       [{"id": disk.id, "mount_path": "/a"}, {"id": disk.id, "mount_path": "/a"}]):
            status, _ = daemon.raw("POST", "/v1/sandboxes", body={"image": "busybox", "disks": mounts})
            assert status == 400, mounts
        status, _ = daemon.raw("POST", "/v1/sandboxes", body={"image": "busybox", "disks": [{"id": "dk-0000000000000000"}]})
        assert status == 404
        status, _ = daemon.raw("POST", "/v1/disks/dk-0000000000000000/exec", body={"cmd": "true"})
        assert status == 404
    finally:
        disk.delete()


def test_disk_files_api_is_confined_to_the_disk(client, daemon):
    disk = client.disks.create(size_mb=32)
    try:
        disk.write_file("dir/sub/hello.txt", "from the api\n")
        assert disk.exec("cat dir/sub/hello.txt; stat -c '%u %a' dir/sub/hello.txt", image="busybox").stdout == \
            "from the api\n0 644\n"
        disk.exec("echo from-call > made; ln -s /etc/hostname abs; ln -s ../../.. up; "
                  "ln -s /proc/self/root/etc magic", image="busybox", check=True)
        # A named pipe on the disk's host folder (one made on gVisor lives in its kernel only).
        disk.exec("mkfifo fifo", image="busybox", isolation="container", check=True)
        assert disk.read_file("made") == b"from-call\n"
        assert disk.read_file("/dir/../made") == b"from-call\n"
        # One shape with sandbox.files: text by default, bytes on request.
        assert disk.files.read("made") == "from-call\n" and disk.files.read_bytes("made") == b"from-call\n"
        disk.files.write("bin", b"\x00\xff")
        assert disk.files.read_bytes("bin") == b"\x00\xff"
        # Symlinks, absolute paths and ".." resolve inside the disk, never on the host.
        for path in ("abs", "up/etc/hostname", "../../../../etc/hostname", "/etc/passwd", "magic/passwd"):
            with pytest.raises(sbx.ApiError) as e:
                disk.read_file(path)
            assert e.value.status in (400, 403, 404), (path, e.value)
        # A fifo never hangs the daemon.
        with pytest.raises(sbx.InvalidRequestError):
            disk.read_file("fifo")
        # Writing through a planted symlink replaces the link, not its target.
        disk.write_file("abs", "replaced\n")
        assert disk.read_file("abs") == b"replaced\n"
        assert os.path.exists("/etc/hostname") and open("/etc/hostname").read() != "replaced\n"
        with pytest.raises(sbx.InvalidRequestError):
            disk.write_file("a/../../x", "no")
        status, _ = daemon.raw("GET", f"/v1/disks/{disk.id}/files")
        assert status == 400
        with pytest.raises(sbx.NotFoundError):
            disk.read_file("missing")
    finally:
        disk.delete()


def test_disk_files_api_respects_the_size_limit(client):
    disk = client.disks.create(size_mb=16)
    try:
        with pytest.raises(sbx.ApiError) as e:
            disk.write_file("big", b"\0" * (30 << 20))
        # ENOSPC on the disk is the disk's quota: 429 quota_exceeded, with the cause.
        assert e.value.status == 429 and "No space left" in e.value.message
        assert "big" not in disk.exec("ls", image="busybox").stdout  # no partial file under the name
    finally:
        disk.delete()


def test_string_commands_run_with_bash_where_the_image_has_it(client):
    disk = client.disks.create(size_mb=16)
    try:
        assert disk.exec('echo "${BASH_VERSION:+bash}"', image="default").stdout == "bash\n"
        assert disk.exec('echo "${BASH_VERSION:-sh}"', image="busybox").stdout == "sh\n"
    finally:
        disk.delete()
