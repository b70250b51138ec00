"""A command run as another user of the sandbox (`"user"` on exec and processes) holds that
user's ids and nothing more: no capability, no way back to root, no reach into root's
processes, and on the host it is the sandbox's mapped uid, never root."""
import os
import time

import pytest


@pytest.mark.container_wall("gVisor's /proc/PID/status has no CapAmb or NoNewPrivs lines")
def test_a_user_command_has_no_capabilities_and_no_way_back(daemon, client):
    with client.create(image="default") as sb:
        probe = r"""
import os
st = dict(l.split(":\t", 1) for l in open("/proc/self/status").read().splitlines() if ":\t" in l)
print(*(st[k].strip() for k in ("CapInh", "CapPrm", "CapEff", "CapAmb", "NoNewPrivs")))
for f in (lambda: os.setuid(0), lambda: os.setgid(0), lambda: os.setgroups([0]), lambda: os.chown("/tmp", 0, 0)):
    try:
        f()
        print("gained")
    except PermissionError:
        print("refused")
"""
        r = sb.exec(["python3", "-c", probe], user="user")
        assert r.exit_code == 0, r.stderr
        assert r.stdout.splitlines() == ["0000000000000000 0000000000000000 0000000000000000 0000000000000000 1",
                                         "refused", "refused", "refused", "refused"], r.stdout
        # A setuid-root program gives nothing back under no_new_privs (the default).
        r = sb.exec("su -c id root </dev/null", user="user")
        assert r.exit_code != 0 and "uid=0" not in r.stdout


@pytest.mark.container_wall("gVisor (2024-07) lets every user read every process's /proc/PID/environ (docs/API.md, Isolation (gvisor))")
def test_a_user_cannot_reach_roots_processes(daemon, client):
    with client.create(image="default") as sb:
        root = sb.processes.start(["sleep", "300"], env={"ROOTS_SECRET": "s3cret"}, user="root")
        assert root.data["user"] == "root"
        r = sb.exec(f"cat /proc/{root.pid}/environ; ls /proc/{root.pid}/fd; kill -9 {root.pid}", user="user")
        assert "s3cret" not in r.stdout
        assert r.stderr.count("ermission denied") >= 2 and "not permitted" in r.stderr, r.stderr
        assert sb.processes.get(root.pid).info()["state"] == "running"
        root.kill()


@pytest.mark.container_wall("on gVisor every process of the sandbox is served by the sentry: no host process is the user's")
def test_a_user_process_is_the_mapped_uid_on_the_host(daemon, client):
    with client.create(image="default") as sb:
        p = sb.processes.start(["sleep", "31337"], user="user")
        try:
            deadline = time.time() + 10
            uids = []
            while time.time() < deadline and not uids:
                for pid in os.listdir("/proc"):
                    if not pid.isdigit():
                        continue
                    try:
                        with open(f"/proc/{pid}/cmdline", "rb") as f:
                            if f.read() != b"sleep\x0031337\x00":
                                continue
                        with open(f"/proc/{pid}/status") as f:
                            uids = [l.split()[1:] for l in f if l.startswith(("Uid:", "Gid:"))]
                    except OSError:
                        continue
                time.sleep(0.05)
            assert uids, "the sandbox's process was not found on the host"
            # The sandbox's user namespace maps its uid 0 to the daemon's uid base.
            want = str(daemon.uid_base + 1000)
            assert uids == [[want] * 4, [want] * 4], uids
        finally:
            p.kill()


def test_a_templates_passwd_is_read_inside_its_layer(daemon, client, tmp_path):
    """A new sandbox's default user comes from its template's /etc/passwd, which its tenant
    wrote: sbxd reads it on the host inside that layer only. A symlink to a host file that
    names `user`, an /etc that is a symlink to a host folder, or a FIFO neither leads out
    nor hangs: the template has no `user`, so its sandboxes run as root."""
    host = tmp_path / "etc"
    host.mkdir()
    (host / "passwd").write_text("root:x:0:0::/root:/bin/sh\nuser:x:1000:1000::/home/user:/bin/sh\n")
    tricks = {
        "link": f"ln -sf {host}/passwd /etc/passwd",
        "etc-link": f"rm -rf /etc && ln -s {host} /etc",
        "fifo": "rm -f /etc/passwd && mkfifo /etc/passwd",
    }
    for name, trick in tricks.items():
        snap = f"passwd-{name}-{os.getpid()}"
        with client.create(image="busybox") as sb:
            r = sb.exec(trick)
            assert r.exit_code == 0, (name, r.stderr)
            sb.snapshot(snap)
        try:
            t0 = time.time()
            with client.create(from_=snap) as made:
                assert made.user == "root", name
                # (Not `id`: busybox's would read the FIFO and wait, as on any host.)
                r = made.exec("grep ^Uid: /proc/self/status")
                assert r.stdout.split() == ["Uid:", "0", "0", "0", "0"], (name, r.exit_code, r.stderr)
            assert time.time() - t0 < 60, name
            status, body = daemon.raw("POST", "/v1/sandboxes", body={"from": snap, "user": "user"})
            assert status == 400 and "not in the image" in body["error"]["message"], (name, body)
        finally:
            daemon.raw("DELETE", f"/v1/snapshots/{snap}")
