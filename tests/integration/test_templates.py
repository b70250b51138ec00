"""Named snapshots, create from a snapshot, and fork."""
import os
import stat
import threading
import time

import pytest

import sbx
from conftest import ISOLATION


# A named pipe made on gVisor lives in its kernel only (runsc keeps no host file for it),
# so a snapshot there cannot hold one (docs/API.md, "Differences").
FIFO = "" if ISOLATION == "gvisor" else "mkfifo /project/fifo && "
# Every file's kind, mode, owner, size and time to the second; not the files that each
# sandbox gets anew when it starts (its resolver, its names).
LISTING = ("cd / && ls -lnR --full-time project opaque etc usr | grep -v -e ' resolv.conf$' -e ' hosts$' "
           "-e ' hostname$'; md5sum /project/big")


def test_snapshot_captures_exactly_what_the_sandbox_had(client, daemon):
    with client.create(image="busybox") as src:
        src.exec(
            "mkdir -p /project/sub && echo data > /project/file && chmod 640 /project/file && "
            "ln -s file /project/link && chmod 1750 /project/sub && " + FIFO +
            "echo big > /project/big && head -c 3000000 /dev/urandom >> /project/big && "
            "ln /project/file /project/hard && rm /etc/passwd && rm -r /usr/sbin && "
            "mkdir /opaque && touch /opaque/keep", check=True)
        before = src.exec(LISTING).stdout
        snap = src.snapshot("snap-exact")
        assert snap.data["type"] == "snapshot.named.created" and snap.name == "snap-exact"
        assert snap.size_bytes >= 3000000
        assert snap.parent is None
        # The source was only frozen for the copy: it runs on, and its later writes are its own.
        assert client.get(src.id).state == "running"
        src.exec("echo later > /project/later", check=True)
        try:
            with client.create(from_="snap-exact") as c:
                assert c.data["image"] == "busybox"
                after = c.exec(LISTING).stdout
                assert after == before
                r = c.exec("test -e /etc/passwd; echo $?; test -e /usr/sbin; echo $?; ls /project")
                assert r.stdout.split("\n")[:2] == ["1", "1"]  # deletions stay deleted (whiteouts)
                assert "later" not in r.stdout
                fifo = "" if ISOLATION == "gvisor" else "/project/fifo"
                assert c.exec(f"cat /project/link; stat -c '%a %u:%g %F' /project/file /project/sub {fifo}; "
                              "stat -c %h /project/hard").stdout == \
                    "data\n640 0:0 regular file\n1750 0:0 directory\n" + ("644 0:0 fifo\n" if fifo else "") + "2\n"
        finally:
            client.api.delete_named_snapshot("snap-exact")


def test_snapshots_stack_and_list_and_delete(client):
    with client.create(image="busybox") as a:
        a.exec("echo one > /root/one", check=True)
        a.snapshot("stack-1")
    try:
        with client.create(from_="stack-1") as b:
            b.exec("echo two > /root/two; rm /root/one", check=True)
            s2 = b.snapshot("stack-2")
            assert s2.parent == "stack-1" and s2.data["layers"] == 3
        with client.create(from_="stack-2") as c:
            assert c.exec("ls /root").stdout == "two\n"
        names = [s.name for s in client.snapshots.list()]
        assert "stack-1" in names and "stack-2" in names
        assert client.snapshots.get("stack-2").data["source"]
    finally:
        assert client.api.delete_named_snapshot("stack-2").type == "snapshot.named.deleted"
        client.api.delete_named_snapshot("stack-1")
    with pytest.raises(sbx.NotFoundError):
        client.snapshots.get("stack-1")
    with pytest.raises(sbx.NotFoundError):
        client.create(from_="stack-1")


def test_deleting_a_snapshot_in_use_is_safe(client, daemon):
    with client.create(image="busybox") as a:
        a.exec("echo kept > /root/kept", check=True)
        a.snapshot("in-use")
    with client.create(from_="in-use") as b:
        client.api.delete_named_snapshot("in-use")
        assert b.exec("cat /root/kept").stdout == "kept\n"
        b.stop()
        b.start()
        assert b.exec("cat /root/kept").stdout == "kept\n"
    # Once the last user is gone, its layers go too: what remains belongs to snapshots.
    # (The collection runs at the end of the teardown, after its row and folder went.)
    daemon.wait_clean()
    deadline = time.time() + 30
    while True:
        layers = os.listdir(os.path.join(daemon.data, "layers"))
        kept = sum(s.data["layers"] - 1 for s in client.snapshots.list())
        if len(layers) <= kept or time.time() > deadline:
            break
        time.sleep(0.1)
    assert len(layers) <= kept, layers


def test_snapshot_names_and_bad_input(client, daemon):
    with client.create(image="busybox", name="snap-src") as a:
        a.snapshot("taken")
        try:
            with pytest.raises(sbx.ConflictError):
                a.snapshot("taken")
            for bad in ("", "Bad", "../x", "a" * 64):
                status, body = daemon.raw("POST", f"/v1/sandboxes/{a.id}/snapshot", body={"name": bad})
                assert status == 400, (bad, body)
            status, _ = daemon.raw("POST", f"/v1/sandboxes/{a.id}/snapshot", body={"name": "x", "extra": 1})
            assert status == 400
            status, _ = daemon.raw("POST", "/v1/sandboxes/sb-0000000000000000/snapshot", body={"name": "y"})
            assert status == 404
            status, _ = daemon.raw("POST", "/v1/sandboxes", body={"from": "taken", "image": "busybox"})
            assert status == 400
            assert [s.name for s in client.snapshots.list()].count("taken") == 1
        finally:
            client.api.delete_named_snapshot("taken")
    status, body = daemon.raw("DELETE", "/v1/snapshots/taken")
    assert status == 404


def test_create_from_snapshot_may_override_type_env_ttl(client):
    with client.create(image="busybox", env={"A": "1"}) as a:
        a.snapshot("override")
    try:
        with client.create(from_="override", type="default", env={"B": "2"}, ttl_seconds=120,
                           resources={"memory_mb": 256}) as b:
            assert b.data["type"] == "default" and b.data["ttl_seconds"] == 120
            assert b.data["resources"]["memory_mb"] == 256
            # The env is the new sandbox's own, not the source's.
            assert b.exec('echo "[$A][$B]"').stdout == "[][2]\n"
    finally:
        client.api.delete_named_snapshot("override")


def test_forks_see_the_source_not_each_other(client):
    with client.create(image="busybox", env={"K": "v"}) as src:
        src.exec("echo base > /root/base; sleep 1000 > /dev/null 2>&1 &", check=True)
        forks = src.fork(count=3)
        try:
            assert len(forks) == 3 and len({f.id for f in forks}) == 3
            for i, f in enumerate(forks):
                assert f.state == "running"
                assert f.data["metadata"]["forked_from"] == src.id
                f.exec(f"echo {i} > /root/mine", check=True)
            for i, f in enumerate(forks):
                assert f.exec("cat /root/base /root/mine; echo $K").stdout == f"base\n{i}\nv\n"
            src.exec("echo changed > /root/base", check=True)
            assert forks[0].exec("cat /root/base").stdout == "base\n"
            assert src.exec("test -e /root/mine; echo $?").stdout == "1\n"
            one = src.fork()
            assert isinstance(one, sbx.Sandbox)
            one.delete()
        finally:
            for f in forks:
                f.delete()


def test_snapshot_fork_delete_racing_on_one_sandbox(client, daemon):
    sb = client.create(image="busybox")
    sb.exec("head -c 20000000 /dev/zero > /root/blob", check=True)
    results = {}

    def run(key, fn):
        try:
            results[key] = ("ok", fn())
        except sbx.ApiError as e:
            results[key] = ("error", e.status)

    threads = [threading.Thread(target=run, args=("snap", lambda: sb.snapshot("racing"))),
               threading.Thread(target=run, args=("fork", lambda: sb.fork(count=2))),
               threading.Thread(target=run, args=("delete", sb.delete))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    # Each gets a defined answer: success, or not_found/conflict if the delete came first.
    for key, (kind, val) in results.items():
        assert kind == "ok" or val in (404, 409), (key, kind, val)
    if results["fork"][0] == "ok":
        for f in results["fork"][1]:
            f.delete()
    if results["snap"][0] == "ok":
        with client.create(from_="racing") as c:
            assert c.exec("wc -c < /root/blob").stdout.strip() == "20000000"
        client.api.delete_named_snapshot("racing")
    daemon.wait_clean()
