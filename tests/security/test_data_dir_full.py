"""The host's data disk fills up (a small tmpfs as the data dir): new work answers 503
`unavailable`, what exists keeps working, SQLite stays intact, and everything works
again once space is freed, without a restart."""
import errno
import os
import sqlite3
import subprocess
import tempfile

import pytest

from conftest import Daemon


@pytest.fixture()
def small_data_dir():
    base = tempfile.mkdtemp(prefix="sbx-full-", dir="/var/tmp")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m,mode=0711", "tmpfs", base], check=True)
    try:
        yield base
    finally:
        # Daemon.destroy unmounts what is mounted under its data dir, this tmpfs included.
        subprocess.run(["umount", "-l", base], check=False, stderr=subprocess.DEVNULL)
        if os.path.isdir(base):
            os.rmdir(base)


def fill(path):
    """Writes zeros to `path` until the file system is full; returns the bytes written."""
    n = 0
    with open(path, "wb", buffering=0) as f:
        chunk = b"\0" * (1 << 20)
        while True:
            try:
                n += f.write(chunk)
            except OSError as e:
                assert e.errno == errno.ENOSPC
                break
        while True:  # the last partial megabyte
            try:
                n += f.write(b"\0" * 4096)
            except OSError:
                return n


def integrity_ok(data):
    db = sqlite3.connect(f"file:{data}/sbxd.db?mode=ro", uri=True)
    try:
        return db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        db.close()


def ids(d):
    return sorted((s["id"], s["state"]) for s in d.sandboxes())


@pytest.mark.parametrize("reserve_mb", ["16", "0"])
def test_full_data_dir_refuses_new_work_and_recovers(small_data_dir, reserve_mb):
    d = Daemon("full", extra_args=["--min-free-mb", reserve_mb], data_dir=small_data_dir)
    filler = os.path.join(small_data_dir, "filler")
    try:
        c = d.client()
        keep = c.create(image="busybox", name="keep")
        keep.exec("echo kept > /root/k", check=True)
        before = ids(d)
        assert fill(filler) > 0
        # With a reserve, sbxd refuses before it writes; without one, the write itself
        # fails (SQLite's or the file system's): either way 503 and nothing changes.
        for method, path, body in (("POST", "/v1/sandboxes", {"image": "busybox"}),
                                   ("POST", f"/v1/sandboxes/{keep.id}/snapshot", {"name": "full-snap"}),
                                   ("POST", f"/v1/sandboxes/{keep.id}/fork", {}),
                                   ("POST", "/v1/disks", {"size_mb": 16})):
            status, resp = d.raw(method, path, body=body)
            assert status == 503, (path, status, resp)
            assert resp["error"]["code"] == "unavailable"
            assert "full" in resp["error"]["message"] or "space" in resp["error"]["message"], resp
        assert ids(d) == before
        status, resp = d.raw("GET", "/v1/snapshots")
        assert status == 200 and resp["snapshots"] == []
        # What exists keeps working.
        assert keep.exec("cat /root/k").stdout == "kept\n"
        assert d.raw("GET", "/v1/health", auth=False)[0] == 200
        assert integrity_ok(small_data_dir)
        # Space back: new work succeeds at once, no restart.
        os.remove(filler)
        sb = c.create(image="busybox")
        assert sb.exec("echo fresh").stdout == "fresh\n"
        snap = keep.snapshot("after-full")
        assert snap.name == "after-full"
        sb.delete()
        snap.delete()
        assert integrity_ok(small_data_dir)
    finally:
        if os.path.exists(filler):
            os.remove(filler)
        d.destroy()
