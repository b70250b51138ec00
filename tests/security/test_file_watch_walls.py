"""A file watch resolves its folder inside the sandbox as every file operation does: no
magic links, no host folder through a link, and a recursive watch never follows links."""
import os
import queue
import threading
import time


def collect(watch, q):
    try:
        for ev in watch:
            q.put(ev)
    except Exception:
        pass


def events_within(q, seconds):
    out, deadline = [], time.time() + seconds
    while time.time() < deadline:
        try:
            out.append(q.get(timeout=max(0.01, deadline - time.time())))
        except queue.Empty:
            break
    return out


def test_watch_stays_inside_the_sandbox(daemon, client, tmp_path):
    host_dir = tmp_path / "watched"
    host_dir.mkdir()
    with client.create(image="busybox") as sb:
        sb.exec(f"mkdir -p /t {host_dir} /w && ln -s /proc/self/root /t/proc_root && ln -s {host_dir} /t/hostdir"
                " && ln -s / /w/everything", check=True)
        for path in ("/t/proc_root", "/proc/1/root", "/proc/self/fd/0"):
            status, body = daemon.raw("GET", f"/v1/sandboxes/{sb.id}/files/watch?path={path}")
            assert status in (400, 403, 404), (path, status, body)
        # A link to a host path names the sandbox's own folder of that name.
        q = queue.Queue()
        w = sb.files.watch("/t/hostdir")
        threading.Thread(target=collect, args=(w, q), daemon=True).start()
        (host_dir / "from-host").write_text("x")
        sb.exec(f"touch {host_dir}/from-sandbox", check=True)
        seen = events_within(q, 2)
        w.close()
        paths = [e["path"] for e in seen]
        assert "/t/hostdir/from-sandbox" in paths and not [p for p in paths if "from-host" in p], seen
        # A recursive watch does not follow a link to / into the rest of the sandbox.
        q = queue.Queue()
        w = sb.files.watch("/w", recursive=True)
        threading.Thread(target=collect, args=(w, q), daemon=True).start()
        sb.exec("mkdir -p /elsewhere && touch /elsewhere/f /w/inside", check=True)
        seen = events_within(q, 2)
        w.close()
        assert [e["path"] for e in seen if e["type"] == "create"] == ["/w/inside"], seen
