"""The gVisor wall (isolation "gvisor"): what is true of it alone. The rest of the suite
runs on it too, as a reduced set with SBX_TEST_ISOLATION=gvisor (scripts/test.sh)."""
import os
import platform
import signal
import subprocess
import time


import pytest

import sbx
from conftest import RUNSC


def runsc_list(d):
    """The sandboxes runsc keeps a record of for this daemon."""
    out = subprocess.run([RUNSC, "--root", os.path.join(d.data, "runsc"), "list", "-quiet"],
                         capture_output=True, text=True)
    return set(out.stdout.split()) if out.returncode == 0 else set()


def test_the_sandbox_runs_on_gvisors_kernel(client, daemon):
    assert "gvisor" in daemon.client().health()["features"]["isolation"]
    with client.create(image="busybox", isolation="gvisor") as sb:
        assert sb.data["isolation"] == "gvisor"
        assert "gVisor" in sb.exec("dmesg").stdout
        # The host's kernel is not what the sandbox sees.
        host = platform.release()
        assert host not in sb.exec("uname -r").stdout
        assert host not in sb.exec("cat /proc/version").stdout
        # The sentry is a host process of the sandbox's own uid range, in its cgroup.
        assert sb.id in runsc_list(daemon)
        assert sb.id in daemon.cgroups()


def test_the_agents_socket_is_out_of_reach_of_the_sandboxs_code(client, daemon):
    """The agent listens on a host socket that runsc serves in a folder bound into the
    sandbox; that folder is covered, and nobody but the sandbox's root could pass its
    permissions, not even from a user and mount namespace of their own."""
    probe = (
        "import socket,struct,sys\n"
        "s=socket.socket(socket.AF_UNIX)\n"
        "s.settimeout(3)\n"
        "try:\n"
        "  s.connect('/run/sbx-ctl/a.sock'); s.sendall(struct.pack('<IB3x',0,9)); print('ANSWER', s.recv(100))\n"
        "except OSError as e: print('REFUSED', e.errno)\n"
    )
    with client.create(image="default", isolation="gvisor") as sb:
        sb.files.write("/tmp/probe.py", probe)
        # The same after a hibernate: the agent closed its socket for the checkpoint and
        # made it again, in the same covered folder.
        for restored in (False, True):
            if restored:
                sb.pause(mode="hibernate")
                assert sb.resume().state == "running"
            assert sb.exec("ls -A /run/sbx-ctl").stdout == ""
            for user in ("user", "root"):
                out = sb.exec("python3 /tmp/probe.py", user=user).stdout
                assert out.startswith("REFUSED"), (restored, user, out)
            # Unshared: a mount namespace of one's own, in a user namespace of one's own.
            out = sb.exec("python3 -c 'import os; os.unshare(os.CLONE_NEWUSER | os.CLONE_NEWNS); "
                          "exec(open(\"/tmp/probe.py\").read())'", user="user").stdout
            assert "ANSWER" not in out, (restored, out)


def test_templates_cross_walls_and_forks_keep_theirs(client, daemon):
    with client.create(image="busybox") as src:
        assert src.data["isolation"] == "container"
        src.exec("echo from-the-container > /root/note", check=True)
        src.snapshot("gv-cross-1")
    try:
        with client.create(from_="gv-cross-1", isolation="gvisor") as gv:
            assert gv.exec("cat /root/note").stdout == "from-the-container\n"
            gv.exec("echo from-gvisor >> /root/note; rm /bin/ls", check=True)
            gv.snapshot("gv-cross-2")
            fork = gv.fork()
            try:
                assert fork.data["isolation"] == "gvisor"
                assert fork.exec("cat /root/note").stdout == "from-the-container\nfrom-gvisor\n"
            finally:
                fork.delete()
        # Back on the container wall: the removal made on gVisor holds there too.
        with client.create(from_="gv-cross-2", isolation="container") as back:
            assert back.exec("cat /root/note").stdout == "from-the-container\nfrom-gvisor\n"
            assert back.exec("test -e /bin/ls").exit_code == 1
    finally:
        for n in ("gv-cross-1", "gv-cross-2"):
            try:
                client.snapshots.delete(n)
            except sbx.NotFoundError:
                pass


def test_pause_holds_the_user_space_kernel_still(client, daemon):
    with client.create(image="busybox", isolation="gvisor") as sb:
        sb.exec("(i=0; while :; do i=$((i+1)); echo $i > /tmp/n; sleep 0.05; done) >/dev/null 2>&1 &", check=True)
        time.sleep(0.3)
        sb.pause()
        freezer = f"/sys/fs/cgroup/freezer/sbx-{daemon.instance}-gvisor/{sb.id}/freezer.state"
        if os.path.exists(freezer):
            assert open(freezer).read().strip() == "FROZEN"
        time.sleep(0.5)
        sb.resume()
        a = int(sb.exec("cat /tmp/n").stdout)
        time.sleep(0.3)
        assert int(sb.exec("cat /tmp/n").stdout) > a


def test_a_sandbox_outlives_sbxd_and_delete_leaves_nothing(fresh_daemon):
    d = fresh_daemon
    c = d.client()
    sb = c.create(image="busybox", isolation="gvisor")
    sb.exec("echo kept > /root/f; sleep 1000 >/dev/null 2>&1 &", check=True)
    d.stop(signal.SIGKILL)
    assert d.processes(), "the sandbox's runsc must outlive its daemon"
    d.start()
    c = d.client()
    got = c.get(sb.id)
    assert got.state == "running"
    assert got.exec("cat /root/f").stdout == "kept\n"
    assert "sleep 1000" in got.exec("ps -o args").stdout
    got.stop()
    got.start()
    assert got.exec("cat /root/f").stdout == "kept\n"
    got.delete()
    d.wait_clean()
    assert not runsc_list(d)
    assert not d.sandbox_mounts()


HOLD = """
import os, socket, sys, time
kind = sys.argv[1]
if kind == "loopback":
    # A TCP connection on the sandbox's own loopback, held open; on /tmp/go it carries a
    # byte across and says so.
    l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen()
    c = socket.create_connection(l.getsockname()); a, _ = l.accept()
    open("/tmp/held", "w").write(kind)
    while not os.path.exists("/tmp/go"):
        time.sleep(0.05)
    c.sendall(b"x")
    open("/tmp/carried", "w").write(a.recv(1).decode())
else:
    # A connection to a host socket: the in-sandbox API's.
    c = socket.socket(socket.AF_UNIX); c.connect("/run/sbx/api.sock")
    open("/tmp/held", "w").write(kind)
time.sleep(600)
"""


def wait_for(sb, path, want, tries=100):
    for _ in range(tries):
        if sb.exec(["cat", path]).stdout == want:
            return
        time.sleep(0.1)
    raise AssertionError(f"{path} never said {want!r}")


def test_hibernate_refuses_what_gvisor_cannot_save_and_keeps_what_it_can(client, daemon):
    """gVisor's kernel cannot save a connection to a host socket: the hibernate answers 409
    saying so, and the sandbox runs on with its processes; once the holder is gone, it
    hibernates. A TCP connection on the sandbox's own loopback is saved and carries data
    after the resume. (A connection to a peer outside: test_network.py.)"""
    with client.create(image="default", isolation="gvisor") as sb:
        sb.files.write("/tmp/hold.py", HOLD)
        sb.exec(["sh", "-c", "python3 /tmp/hold.py host >/dev/null 2>&1 &"])
        wait_for(sb, "/tmp/held", "host")
        with pytest.raises(sbx.ConflictError) as e:
            sb.pause(mode="hibernate")
        assert "host socket" in str(e.value), str(e.value)
        assert sb.refresh().state == "running"
        # The holder runs on, and the agent answers.
        assert "hold.py" in sb.exec(["sh", "-c", "cat /proc/[0-9]*/cmdline | tr '\\0' ' '"]).stdout
        # Ended, and gone (this shell's own command line names it too: spared).
        sb.exec(["sh", "-c", "for p in /proc/[0-9]*; do [ ${p#/proc/} != $$ ] && grep -q hold[.]py $p/cmdline "
                             "2>/dev/null && kill ${p#/proc/}; done; rm /tmp/held; "
                             "while grep -qs hold[.]py /proc/[0-9]*/cmdline; do sleep 0.1; done"])
        sb.exec(["sh", "-c", "python3 /tmp/hold.py loopback >/dev/null 2>&1 &"])
        wait_for(sb, "/tmp/held", "loopback")
        assert sb.pause(mode="hibernate").state == "paused"
        assert sb.resume().state == "running"
        sb.exec(["touch", "/tmp/go"])
        wait_for(sb, "/tmp/carried", "x")


def test_network_none_is_loopback_only_in_a_namespace_of_its_own(client, daemon):
    """The sandbox's sockets are the host kernel's in a network namespace of the sandbox's
    own: with mode none it holds a loopback only, and nothing of the host's listens there
    (sbxd's API is on the host's loopback, not this one)."""
    with client.create(image="default", isolation="gvisor") as sb:
        assert sb.data["network"]["mode"] == "none"
        links = [l.split(":")[0].strip() for l in sb.exec("cat /proc/net/dev").stdout.splitlines()[2:]]
        assert links == ["lo"], links
        port = daemon.port
        out = sb.exec(f"python3 -c \"import socket; s=socket.socket(); s.settimeout(2); "
                      f"print(s.connect_ex(('127.0.0.1', {port})))\"").stdout.strip()
        assert out == "111", out  # ECONNREFUSED: sbxd's port is not in this namespace
        # Its own servers work on its own loopback.
        assert sb.exec("python3 -c \"import socket; s=socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(); "
                       "c=socket.create_connection(s.getsockname()); print('ok')\"").stdout == "ok\n"


def test_without_runsc_gvisor_is_refused_clearly():
    from conftest import Daemon
    d = Daemon("norunsc", extra_args=["--runsc", "none"])
    try:
        assert "gvisor" not in d.client().health()["features"]["isolation"]
        status, body = d.raw("POST", "/v1/sandboxes", body={"image": "busybox", "isolation": "gvisor"})
        assert status == 400 and body["error"]["code"] == "invalid_request", body
        assert "gvisor" in body["error"]["message"]
        status, body = d.raw("POST", "/v1/sandboxes", body={"image": "busybox", "isolation": "vm"})
        assert status == 400 and "unknown isolation" in body["error"]["message"], body
    finally:
        d.destroy()
