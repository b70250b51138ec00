"""files.watch: inotify in the sandbox's agent, NDJSON events through sbxd, in the SDKs."""
import os
import queue
import threading
import time

import pytest

import sbx


def inotify_fds(d, sid):
    """inotify instances held by the sandbox's processes, seen from the host."""
    n = 0
    with open(f"/sys/fs/cgroup/pids/{d.cgroup_parent}/{sid}/cgroup.procs") as f:
        for pid in f.read().split():
            try:
                for fd in os.listdir(f"/proc/{pid}/fd"):
                    n += os.readlink(f"/proc/{pid}/fd/{fd}") == "anon_inode:inotify"
            except OSError:
                pass  # gone meanwhile
    return n


class Events:
    """Reads a watch on a thread, so that the test can wait for an event with a deadline."""

    def __init__(self, watch):
        self.watch = watch
        self.q = queue.Queue()
        self.seen = []
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self):
        try:
            for ev in self.watch:
                self.q.put(ev)
        except Exception as e:  # a closed watch
            self.q.put({"type": "closed", "error": str(e)})
        self.q.put(None)

    def expect(self, **want):
        deadline = time.time() + 15
        while time.time() < deadline:
            try:
                ev = self.q.get(timeout=max(0.01, deadline - time.time()))
            except queue.Empty:
                break
            if ev is None:
                break
            self.seen.append(ev)
            if all(ev.get(k) == v for k, v in want.items()):
                return ev
        raise AssertionError(f"no event {want} in {self.seen}")

    def ended(self):
        deadline = time.time() + 15
        while time.time() < deadline:
            ev = self.q.get(timeout=15)
            if ev is None:
                return True
            self.seen.append(ev)
        return False


def test_recursive_watch(daemon, client):
    with client.create(image="busybox") as sb:
        sb.exec("mkdir -p /w/sub", check=True)
        w = sb.files.watch("/w", recursive=True)
        ev = Events(w)
        sb.exec("echo a > /w/a.txt", check=True)
        ev.expect(type="create", path="/w/a.txt", is_dir=False)
        ev.expect(type="write", path="/w/a.txt")
        sb.exec("mkdir /w/new", check=True)
        ev.expect(type="create", path="/w/new", is_dir=True)
        sb.exec("echo b > /w/new/b.txt", check=True)  # a folder made after the watch began
        ev.expect(type="create", path="/w/new/b.txt")
        sb.exec("echo again >> /w/a.txt", check=True)  # a later write of the same file is news again
        ev.expect(type="write", path="/w/a.txt")
        sb.exec("mv /w/a.txt /w/sub/c.txt", check=True)
        ev.expect(type="rename", path="/w/a.txt", to="/w/sub/c.txt")
        sb.exec("mv /w/sub /w/sub2 && echo x >> /w/sub2/c.txt", check=True)  # its watch follows the name
        ev.expect(type="rename", path="/w/sub", to="/w/sub2", is_dir=True)
        ev.expect(type="write", path="/w/sub2/c.txt")
        sb.exec("mv /w/new /root/gone && echo y > /root/gone/z && rm /w/sub2/c.txt", check=True)  # same filesystem
        ev.expect(type="rename", path="/w/new", to=None)  # moved out: no longer watched
        ev.expect(type="remove", path="/w/sub2/c.txt")
        assert not [e for e in ev.seen if "gone" in e.get("path", "")]
        sb.exec("rm -rf /w", check=True)  # the folder goes: the stream ends
        ev.expect(type="remove", path="/w")
        assert ev.ended()
        w.close()


def test_plain_watch_errors_and_close(daemon, client):
    with client.create(image="busybox") as sb:
        sb.exec("mkdir -p /w/sub && touch /w/file", check=True)
        with sb.files.watch("/w") as w:
            ev = Events(w)
            sb.exec("echo deep > /w/sub/x && echo top > /w/y", check=True)
            ev.expect(type="create", path="/w/y")
            assert not [e for e in ev.seen if e.get("path") == "/w/sub/x"]  # not recursive
        # After close the agent's watch ends at once (its inotify instance goes with it):
        # the sandbox keeps working, and a new watch starts.
        deadline = time.time() + 5
        while inotify_fds(daemon, sb.id) != 0:
            assert time.time() < deadline, "the agent still watches after the client closed"
            time.sleep(0.1)
        with sb.files.watch("/w") as w2:
            ev2 = Events(w2)
            sb.exec("touch /w/z", check=True)
            ev2.expect(type="create", path="/w/z")
            assert inotify_fds(daemon, sb.id) == 1
        with pytest.raises(sbx.NotFoundError):
            sb.files.watch("/nope")
        with pytest.raises(sbx.ApiError) as e:
            sb.files.watch("/w/file")
        assert e.value.status == 400
        for q in ("", "?path=relative", "?path=/w&recursive=maybe"):
            status, _ = daemon.raw("GET", f"/v1/sandboxes/{sb.id}/files/watch{q}")
            assert status == 400, q
    # An admin route: a sandbox's own token cannot watch.
    with client.create(image="busybox") as sb:
        own = sb.exec("echo -n $SBX_TOKEN").stdout
        status, _ = daemon.raw("GET", f"/v1/sandboxes/{sb.id}/files/watch?path=/",
                               headers={"Authorization": "Bearer " + own}, auth=False)
        assert status == 403
