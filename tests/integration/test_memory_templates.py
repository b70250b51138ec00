"""Memory templates and forks with memory on the gVisor and container walls: runsc (gVisor's
kernel with its processes) or CRIU (the sandbox's process tree) saves the sandbox beside the
template's files, and each copy is restored from it, renamed as its own. The microVM wall's
are in test_microvm.py."""
import os
import threading
import time

import pytest

import sbx
from conftest import MEMORY_WALLS as WALLS, require_memory
from test_microvm import code_cell

WHOSE = {"gvisor": "gVisor sandbox's memory", "container": "container sandbox's memory"}


@pytest.mark.parametrize("wall", WALLS)
def test_a_memory_template_restores_its_processes_in_copies_each_its_own(client, daemon, wall):
    require_memory(daemon, wall)
    net = {"mode": "outbound", "allow": ["198.51.100.7/32"]}
    src = client.create(image="busybox", isolation=wall, network=net)
    made, name = [src], f"mem-{wall}-{src.id}"
    try:
        # State only in memory: a process's variable, written to the sandbox's tmpfs.
        src.exec(["sh", "-c", "echo file > /root/f; secret=$$-$RANDOM$RANDOM; while true; do echo $secret > /tmp/s; "
                              "sleep 0.2; done >/dev/null 2>&1 &"], check=True)
        time.sleep(1)
        secret = src.exec("cat /tmp/s").stdout
        snap = daemon.raw("POST", f"/v1/sandboxes/{src.id}/snapshot", body={"name": name, "memory": True})[1]
        assert snap["memory"] is True and snap["memory_isolation"] == wall, snap
        assert snap["size_bytes"] > 0, snap
        assert src.exec("cat /tmp/s").stdout == secret  # the source runs on
        src.exec("echo later > /root/f", check=True)
        copies = []
        for _ in range(2):
            cp = client.create(from_=name, isolation=wall, network=net)
            made.append(cp)
            copies.append(cp)
            # Its memory is the template's: the process, and what it keeps in /tmp.
            cp.exec("rm /tmp/s", check=True)
            time.sleep(0.6)
            assert cp.exec("cat /tmp/s").stdout == secret
            assert cp.exec("cat /root/f").stdout == "file\n"
            # Its own name and address (the network answers it there).
            assert cp.exec("hostname").stdout.strip() == cp.id
            assert cp.data["network"]["address"] != src.data["network"]["address"]
            assert cp.data["network"]["address"] in cp.exec("ip -4 addr show eth0").stdout
            assert "REFUSED" in cp.exec("nslookup example.com").stdout
        draws = {cp.exec("head -c 32 /dev/urandom | od -An -tx1").stdout for cp in copies}
        assert len(draws) == 2, draws
        # What sbxd hands out to a copy's execs is its own: its id and token.
        handed = {sb.id: sb.exec("echo $SBX_SANDBOX_ID $SBX_TOKEN").stdout.split() for sb in [src] + copies}
        for sid, (own_id, token) in handed.items():
            assert own_id == sid and token.startswith(f"sbt_{sid}_"), handed
        assert len({token for _, token in handed.values()}) == 3, handed
        # Other walls do not take it; a sandbox of another shape (here: without a network)
        # starts on its files.
        for other_wall in {"gvisor", "container", "microvm"} - {wall}:
            status, body = daemon.raw("POST", "/v1/sandboxes", body={"from": name, "isolation": other_wall})
            assert status == 409 and WHOSE[wall] in body["error"]["message"], (other_wall, body)
        other = client.create(from_=name, isolation=wall)
        made.append(other)
        assert other.exec("cat /root/f").stdout == "file\n"
        assert other.exec("cat /tmp/s").exit_code != 0
        # A copy stopped and started boots afresh on its own files.
        copies[0].exec("echo mine >> /root/f", check=True)
        copies[0].stop()
        copies[0].start()
        assert copies[0].exec("cat /root/f").stdout == "file\nmine\n"
        assert copies[0].exec("cat /tmp/s").exit_code != 0
        # A copy hibernates and resumes as any sandbox of its wall, its process going on.
        copies[1].pause(mode="hibernate")
        copies[1].resume()
        copies[1].exec("rm /tmp/s", check=True)
        time.sleep(0.6)
        assert copies[1].exec("cat /tmp/s").stdout == secret
    finally:
        for sb in made:
            sb.delete()
        daemon.raw("DELETE", f"/v1/snapshots/{name}")
    daemon.wait_clean()


@pytest.mark.parametrize("wall", WALLS)
def test_a_capture_with_memory_waits_for_no_open_connection_and_keeps_the_followed(client, daemon, wall):
    """sbxd's connections into the sandbox cannot be saved: a capture with memory while an
    exec is open answers 409 and changes nothing; a background process that sbxd follows
    is let go for the save and followed again after it, its output going on."""
    require_memory(daemon, wall)
    with client.create(image="busybox", isolation=wall) as src:
        held = {}
        t = threading.Thread(target=lambda: held.update(out=src.exec("sleep 3; echo done").stdout))
        t.start()
        time.sleep(1)
        before = daemon.sandbox_dirs()
        status, body = daemon.raw("POST", f"/v1/sandboxes/{src.id}/fork", body={"memory": True})
        assert status == 409 and "connections open" in body["error"]["message"], body
        t.join()
        assert held["out"] == "done\n"
        assert daemon.sandbox_dirs() == before
        proc = src.processes.start(["sh", "-c", "i=0; while true; do i=$((i+1)); echo tick $i; sleep 0.2; done"])
        time.sleep(0.5)
        forks = src.fork(count=1, memory=True)
        try:
            listed = {p.pid for p in src.processes.list()}
            assert proc.pid in listed
            # The fork has the process too, followed as its own.
            assert proc.pid in {p.pid for p in forks[0].processes.list()}
            assert forks[0].exec("hostname").stdout.strip() == forks[0].id
            before = ticks(src, proc.pid)
            time.sleep(0.6)
            assert ticks(src, proc.pid) > before
        finally:
            for f in forks:
                f.delete()


def ticks(sb, pid):
    """How many lines the process `pid` wrote so far."""
    return sum(ev["data"].count("tick") for ev in sb.processes.get(pid).output() if ev.get("type") == "stdout")


@pytest.mark.parametrize("wall", WALLS)
def test_a_memory_template_keeps_a_warm_code_context_each_copy_drawing_its_own_numbers(client, daemon, wall):
    """The seed's case: each copy finds the template's interpreter with its variables, and
    Python's `random` draws differently in each copy."""
    require_memory(daemon, wall)
    src = client.create(image="default", isolation=wall)
    made, name = [src], f"code-{wall}-{src.id}"
    try:
        out = code_cell(daemon, src.id, "import random\nx = 41\nrandom.random()")
        assert out["error"] is None, out
        src.snapshot(name, memory=True)
        draws = {code_cell(daemon, src.id, "random.random()")["results"][0]["text"]}
        for _ in range(2):
            cp = client.create(from_=name, isolation=wall)
            made.append(cp)
            contexts = daemon.raw("GET", f"/v1/sandboxes/{cp.id}/code/contexts")[1]
            assert [c["id"] for c in contexts["contexts"]] == ["python"], contexts
            out = code_cell(daemon, cp.id, "x + 1")
            assert out["results"][0]["text"] == "42" and out["error"] is None, out
            draws.add(code_cell(daemon, cp.id, "random.random()")["results"][0]["text"])
        assert len(draws) == 3, draws
    finally:
        for sb in made:
            sb.delete()
        try:
            client.snapshots.delete(name)
        except sbx.NotFoundError:
            pass


@pytest.mark.parametrize("wall,point", [("gvisor", "gvisor.restored"), ("gvisor", "create.started"),
                                        ("container", "container.restored"), ("container", "create.started")])
def test_kill_9_of_sbxd_while_a_copy_restores_leaves_it_whole_or_gone(fresh_daemon, wall, point):
    """sbxd dies once runsc or CRIU restored a copy but before it is renamed, or before the
    copy is recorded as running: after a restart the copy is an error row whose delete
    leaves nothing (no process, cgroup or folder), the source runs on, and the template
    still makes whole copies."""
    require_memory(fresh_daemon, wall)
    from test_crash import crash_while_a_copy_starts
    crash_while_a_copy_starts(fresh_daemon, wall, point)


@pytest.mark.parametrize("wall", WALLS)
def test_a_warm_pool_keeps_restored_copies_of_a_memory_template(wall):
    """A pooled copy of a memory template is restored and renamed while it waits; a claim
    finds the template's followed process in it, under its own name."""
    from conftest import Daemon
    d = Daemon("mem-pool", extra_args=["--pool-size", "1"])

    def wait_pool():  # a sandbox for the image and one for the template
        deadline = time.time() + 120
        while d.metric("sbx_pool_ready") < 2:
            assert time.time() < deadline, "the pool did not fill"
            time.sleep(0.1)
    try:
        require_memory(d, wall)
        c = d.client()
        src = c.create(image="busybox", isolation=wall)
        proc = src.processes.start(["sh", "-c", "i=0; while true; do i=$((i+1)); echo tick $i; sleep 0.2; done"])
        time.sleep(0.5)
        src.snapshot("pool-mem", memory=True)
        first = c.create(from_="pool-mem", isolation=wall)  # restored at once; the pool learns it
        wait_pool()
        claims = d.metric("sbx_pool_claims_total")
        cp = c.create(from_="pool-mem", isolation=wall, metadata={"k": "v"})
        assert d.metric("sbx_pool_claims_total") == claims + 1
        assert cp.exec("hostname").stdout.strip() == cp.id
        assert c.get(cp.id).data["metadata"] == {"k": "v"}
        assert proc.pid in {p.pid for p in cp.processes.list()}
        before = ticks(cp, proc.pid)
        time.sleep(0.6)
        assert ticks(cp, proc.pid) > before
        made = [src, first, cp]
        # On gVisor another shape never takes a warm one (its kernel keeps the memory it
        # booted with).
        if wall == "gvisor":
            made.append(takes_no_warm_one_of_another_shape(d, c, wait_pool))
        for sb in made:
            sb.delete()
        c.api.request("DELETE", "/v1/snapshots/pool-mem")
    finally:
        d.destroy()


def takes_no_warm_one_of_another_shape(d, c, wait_pool):
    wait_pool()
    claims = d.metric("sbx_pool_claims_total")
    big = c.create(from_="pool-mem", isolation="gvisor", resources={"memory_mb": 512})
    assert d.metric("sbx_pool_claims_total") == claims
    total_kb = int(big.exec("awk '/MemTotal/ {print $2}' /proc/meminfo").stdout)
    assert total_kb > 400 * 1024, total_kb
    return big


def test_a_container_save_refuses_what_criu_cannot_take_and_changes_nothing(client, daemon):
    """An established TCP connection (here inside the sandbox, over its loopback) is not
    taken into a container's memory template: a copy must not take over its source's
    connections. 409 with CRIU's reason; the sandbox and its processes run on, and no
    layer is left."""
    require_memory(daemon, "container")
    with client.create(image="busybox", isolation="container") as sb:
        server = sb.processes.start(["nc", "-l", "-p", "9000"])
        time.sleep(0.3)
        sb.processes.start(["sh", "-c", "sleep 1000 | nc 127.0.0.1 9000"])
        deadline = time.time() + 10
        while "ESTABLISHED" not in sb.exec("netstat -tn").stdout:
            assert time.time() < deadline, sb.exec("netstat -tn").stdout
            time.sleep(0.1)
        layers = os.listdir(os.path.join(daemon.data, "layers"))
        status, body = daemon.raw("POST", f"/v1/sandboxes/{sb.id}/snapshot", body={"name": f"tcp-{sb.id}", "memory": True})
        assert status == 409 and "Connected TCP socket" in body["error"]["message"], body
        assert daemon.raw("GET", f"/v1/snapshots/tcp-{sb.id}")[0] == 404
        assert os.listdir(os.path.join(daemon.data, "layers")) == layers
        assert server.pid in {p.pid for p in sb.processes.list()}
        assert "ESTABLISHED" in sb.exec("netstat -tn").stdout


# A child subreaper that took in an orphan whose session leader has ended: CRIU saves such
# a tree and could never restore it (a session is inherited from the parent, or made by the
# leader itself).
SUBREAPER = ("import ctypes, subprocess, time; ctypes.CDLL(None).prctl(36, 1); "
             "subprocess.run(['setsid', 'sh', '-c', 'sleep 600 >/dev/null 2>&1 &']); time.sleep(600)")
SLEEPS = "for p in /proc/[0-9]*; do [ \"$(cat $p/comm 2>/dev/null)\" = sleep ] && echo $p; done; true"


def test_a_container_save_refuses_a_tree_criu_could_not_restore_and_waits_out_an_answered_command(client, daemon):
    """A command's handler in the agent is a child subreaper: its orphans (`sleep ... &`)
    are its children until it ends, a moment after the command answered. A save in that
    moment gave a template whose every copy failed to restore (and booted on its files): a
    save waits it out. A tree that stays so is refused (409 naming the process) by a memory
    template and by a hibernate, and the sandbox runs on with its processes."""
    require_memory(daemon, "container")
    with client.create(image="default", isolation="container") as sb:
        for i in range(6):
            sb.exec(["sh", "-c", "sleep 600 >/dev/null 2>&1 &"], check=True)
            sb.snapshot(f"answered-{sb.id}-{i}", memory=True)
            with client.create(from_=f"answered-{sb.id}-{i}", isolation="container") as cp:
                assert len(cp.exec(SLEEPS).stdout.split()) == i + 1, daemon.log()
        sb.exec(["sh", "-c", f"python3 -c \"{SUBREAPER}\" >/dev/null 2>&1 &"], check=True)
        deadline = time.time() + 10
        while len(sb.exec(SLEEPS).stdout.split()) < 7:  # and the orphan of the subreaper
            assert time.time() < deadline, sb.exec(SLEEPS).stdout
            time.sleep(0.1)
        layers = os.listdir(os.path.join(daemon.data, "layers"))
        status, body = daemon.raw("POST", f"/v1/sandboxes/{sb.id}/snapshot", body={"name": f"orphan-{sb.id}", "memory": True})
        assert status == 409 and "(sleep) is in a session whose leader has ended" in body["error"]["message"], body
        assert daemon.raw("GET", f"/v1/snapshots/orphan-{sb.id}")[0] == 404
        assert os.listdir(os.path.join(daemon.data, "layers")) == layers
        status, body = daemon.raw("POST", f"/v1/sandboxes/{sb.id}/pause", body={"mode": "hibernate"})
        assert status == 409 and "whose leader has ended" in body["error"]["message"], body
        assert sb.refresh().state == "running"
        assert len(sb.exec(SLEEPS).stdout.split()) == 7
