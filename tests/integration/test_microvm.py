"""The microVM wall (isolation "microvm"): what is true of it alone. Every test daemon boots
its VMs under TCG (conftest). The rest of the suite runs on it too, as a reduced set with
SBX_TEST_ISOLATION=microvm (scripts/test.sh)."""
import os
import platform
import signal
import subprocess
import threading
import time

import pytest

import sbx


def qemu_pid(daemon, sid):
    with open(os.path.join(daemon.data, "sandboxes", sid, "vm", "qemu.pid")) as f:
        return int(f.read().strip())


def status_of(pid):
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            out[k] = v.split()
    return out


def test_the_sandbox_runs_on_a_kernel_of_its_own(client, daemon):
    health = daemon.client().health()
    assert "microvm" in health["features"]["isolation"]
    assert health["microvm_accel"] == "tcg"
    # The agent's link: vsock where the host has vhost-vsock (this project's machines do not).
    assert health["microvm_channel"] == ("vsock" if os.access("/dev/vhost-vsock", os.R_OK | os.W_OK) else "serial")
    with client.create(image="busybox", isolation="microvm") as sb:
        assert sb.data["isolation"] == "microvm"
        assert sb.data["microvm_accel"] == "tcg"
        host = platform.release()
        guest = sb.exec("uname -r").stdout.strip()
        assert guest and guest != host
        assert host not in sb.exec("cat /proc/version").stdout
        # The host's boot id is not the guest's.
        with open("/proc/sys/kernel/random/boot_id") as f:
            assert f.read().strip() != sb.exec("cat /proc/sys/kernel/random/boot_id").stdout.strip()
        # QEMU: a host process of the VM's own unprivileged uid, in the sandbox's cgroup,
        # under its own system-call filter, unable to gain privileges.
        pid = qemu_pid(daemon, sb.id)
        st = status_of(pid)
        uid = int(st["Uid"][0])
        assert daemon.uid_base + 2 * 65536 <= uid < daemon.uid_base + 3 * 65536, uid
        assert st["Uid"] == [str(uid)] * 4 and st["Gid"][0] == str(uid)
        assert st["Seccomp"] == ["2"] and st["NoNewPrivs"] == ["1"]
        assert st["CapEff"] == ["0000000000000000"]
        assert sb.id in daemon.cgroups()


def test_an_idle_guest_keeps_fine_time_without_a_periodic_tick(client, daemon):
    # The guest keeps time with the TSC (never the 4 ms jiffies clock), so its timer stops
    # when it is idle: an idle VM costs the host next to nothing, and the idle policy sees it
    # idle.
    with client.create(image="busybox", isolation="microvm") as sb:
        src = sb.exec("cat /sys/devices/system/clocksource/clocksource0/current_clocksource").stdout.strip()
        assert src in ("tsc", "kvm-clock"), src
        out = sb.exec("grep LOC: /proc/interrupts; sleep 2; grep LOC: /proc/interrupts").stdout.split("\n")
        before, after = ([int(x) for x in line.split()[1:-3]] for line in out[:2])
        # A periodic tick is 250 a second on each CPU: 500 or more in 2 s.
        assert all(b - a < 200 for a, b in zip(before, after)), (before, after)
        pid = qemu_pid(daemon, sb.id)

        def cpu_s():
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

        a = cpu_s()
        time.sleep(3)
        # The idle policy's threshold is 5 % of a core.
        assert cpu_s() - a < 0.05 * 3


def test_guest_root_sees_nothing_of_the_hosts(client, daemon, tmp_path):
    token = f"sbx-host-secret-{os.getpid()}"
    secret = tmp_path / "secret.txt"
    secret.write_text(token)
    host_proc = subprocess.Popen(["sleep", "300", token])
    try:
        with client.create(image="busybox", isolation="microvm") as sb:
            assert sb.exec("id -u").stdout == "0\n"
            # No host file by its path, no host process, no host mount.
            assert sb.exec(f"test -e {secret}").exit_code != 0
            assert token not in sb.exec("ps -o args").stdout
            assert token not in sb.exec("cat /proc/*/cmdline 2>/dev/null | tr '\\0' ' '").stdout
            # Its pid 1 is the agent, the guest kernel's first process.
            assert sb.exec("cat /proc/1/cmdline").stdout.split("\0")[0] == "/init"
            mounts = sb.exec("cat /proc/mounts").stdout
            assert daemon.data not in mounts and "/var/tmp" not in mounts
            # The block devices are the sandbox's own disk and its layers' images; the
            # layers cannot be written, even by the guest's root.
            disks = sb.exec("for d in /sys/block/vd*; do cat $d/serial; echo; done").stdout.split()
            assert "sbx-upper" in disks and "sbx-layer-0" in disks
            layer = sb.exec("for d in /sys/block/vd*; do grep -q sbx-layer-0 $d/serial && basename $d; done").stdout.strip()
            r = sb.exec(f"dd if=/dev/zero of=/dev/{layer} bs=512 count=1")
            assert r.exit_code != 0, r.stdout + r.stderr
            # A whole grep of the guest finds the token nowhere.
            r = sb.exec(f"grep -rl {token} / --exclude-dir=proc --exclude-dir=sys 2>/dev/null", timeout_seconds=120)
            assert r.stdout == "", r.stdout
    finally:
        host_proc.kill()
        host_proc.wait()


def test_files_are_whole_after_a_stop_and_two_vms_differ(client, daemon):
    with client.create(image="busybox", isolation="microvm") as a, \
            client.create(image="busybox", isolation="microvm") as b:
        a.exec("echo kept > /root/f; dd if=/dev/urandom of=/root/big bs=1M count=8 2>/dev/null; md5sum /root/big > /root/sum",
               check=True)
        a.stop()
        a.start()
        assert a.exec("cat /root/f").stdout == "kept\n"
        assert a.exec("md5sum -c /root/sum").exit_code == 0
        # Each VM has its own kernel: its own boot id and random state, its own hostname.
        ids = {s.exec("cat /proc/sys/kernel/random/boot_id").stdout for s in (a, b)}
        rand = {s.exec("head -c 16 /dev/urandom | od -An -tx1").stdout for s in (a, b)}
        assert len(ids) == 2 and len(rand) == 2
        assert a.exec("hostname").stdout.strip() == a.id and b.exec("hostname").stdout.strip() == b.id


def test_killing_qemu_mid_exec_turns_the_sandbox_to_error_and_cleans_up(client, daemon):
    sb = client.create(image="busybox", isolation="microvm")
    got = {}

    def long_exec():
        try:
            got["r"] = sb.exec("sleep 60", timeout_seconds=120)
        except sbx.SbxError as e:
            got["e"] = e

    t = threading.Thread(target=long_exec)
    t.start()
    time.sleep(1.5)
    os.kill(qemu_pid(daemon, sb.id), signal.SIGKILL)
    t.join(60)
    assert not t.is_alive()
    assert "e" in got or got["r"].exit_code != 0, got
    deadline = time.time() + 30
    while time.time() < deadline and client.get(sb.id).state != "error":
        time.sleep(0.2)
    dead = client.get(sb.id)
    assert dead.state == "error" and dead.data["error"], dead.data
    # Its relay went with QEMU; delete leaves nothing (no process, cgroup, tap or folder).
    dead.delete()
    daemon.wait_clean()


def test_a_vm_outlives_sbxd_and_is_adopted(fresh_daemon):
    d = fresh_daemon
    c = d.client()
    sb = c.create(image="busybox", isolation="microvm")
    sb.exec("echo kept > /root/f; sleep 1000 >/dev/null 2>&1 &", check=True)
    pid = qemu_pid(d, sb.id)
    d.stop(signal.SIGKILL)
    assert os.path.exists(f"/proc/{pid}"), "the sandbox's QEMU must outlive its daemon"
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


def test_the_network_goes_through_a_tap_under_the_sandboxs_rules(client, daemon):
    # Only local addresses: the resolver answers for names outside the allow list, and
    # the host's end of the link is closed to the sandbox.
    with client.create(image="busybox", isolation="microvm",
                       network={"mode": "outbound", "allow": ["198.51.100.7/32"]}) as sb:
        net = sb.data["network"]
        assert net["address"]
        assert net["address"] in sb.exec("ip -4 addr show eth0").stdout
        out = sb.exec("nslookup example.com").stdout
        assert "REFUSED" in out, out
        gw = sb.exec("ip route").stdout.split("default via ")[1].split()[0]
        assert sb.exec(f"ping -c1 -W1 {gw}").exit_code != 0
        assert sb.exec("ip -6 route").stdout.count("default via") == (1 if net["address6"] else 0)
        after = client.get(sb.id).data["network"]
        assert after["tx_bytes"] > 0 and after["rx_bytes"] > 0
        # Its link can be taken away while it runs (the tap goes: nothing passes), but not
        # given again (the VM's devices are fixed at boot): that is refused clearly, and
        # the sandbox runs on as it was.
        sb.set_network("none")
        assert sb.data["network"]["address"] is None
        assert "REFUSED" not in sb.exec("nslookup example.com").stdout
        with pytest.raises(sbx.ConflictError) as e:
            sb.set_network("outbound")
        assert "stop and start" in str(e.value)
        assert client.get(sb.id).data["network"]["mode"] == "none"
        assert sb.exec("true").exit_code == 0
        # Stopped, it takes the rules, and its next boot has the link.
        sb.stop()
        sb.set_network("outbound", allow=["198.51.100.7/32"])
        sb.start()
        assert client.get(sb.id).data["network"]["address"]
        assert "REFUSED" in sb.exec("nslookup example.com").stdout


def vm_layer_images(daemon):
    d = os.path.join(daemon.data, "microvm", "images")
    return {n for n in os.listdir(d) if n.endswith(".ext4")} if os.path.isdir(d) else set()


def test_templates_and_forks_of_a_vm_hold_its_disk(client, daemon):
    # A container's template serves a microVM; a microVM's snapshot (its disk's image,
    # frozen for the copy) serves microVMs, running or stopped, and forks. The disk image
    # a VM's boot made of a template's layer goes with the layer.
    with client.create(image="busybox", isolation="microvm"):
        images_before = vm_layer_images(daemon)  # with the image's own
    with client.create(image="busybox") as ct:
        ct.exec("echo from-a-container > /root/note; rm /bin/vi", check=True)
        ct.snapshot("mv-tpl-1")
    made = ["mv-tpl-1"]
    try:
        with client.create(from_="mv-tpl-1", isolation="microvm") as vm:
            assert vm.exec("cat /root/note").stdout == "from-a-container\n"
            assert vm.exec("test -e /bin/vi").exit_code == 1  # the container's whiteout holds
            vm.exec("echo from-the-vm >> /root/note; rm /bin/ls; mkdir -p /srv/d; echo x > /srv/d/f", check=True)
            vm.snapshot("mv-tpl-2")  # running: the guest freezes its disk for the copy
            made.append("mv-tpl-2")
            assert vm.exec("echo still-writable > /tmp/w; cat /tmp/w").stdout == "still-writable\n"
            fork = vm.fork()
            try:
                assert fork.data["isolation"] == "microvm"
                assert fork.exec("cat /root/note").stdout == "from-a-container\nfrom-the-vm\n"
                fork.exec("echo fork-only > /root/mine", check=True)
            finally:
                fork.delete()
            assert vm.exec("test -e /root/mine").exit_code == 1
            vm.stop()
            vm.snapshot("mv-tpl-3")  # stopped: its disk was frozen at the stop
            made.append("mv-tpl-3")
        for name in ("mv-tpl-2", "mv-tpl-3"):
            with client.create(from_=name, isolation="microvm") as again:
                assert again.exec("cat /root/note; cat /srv/d/f").stdout == "from-a-container\nfrom-the-vm\nx\n"
                assert again.exec("test -e /bin/ls").exit_code == 1 and again.exec("test -e /bin/vi").exit_code == 1
                # A layer on a layer: the VM-made one over the container's.
                again.exec("echo third >> /root/note", check=True)
                assert vm_layer_images(daemon) - images_before  # the container template's layer
        # The other walls cannot read a VM's disk: refused clearly, nothing made.
        before = {s["id"] for s in daemon.raw("GET", "/v1/sandboxes")[1]["sandboxes"]}
        status, body = daemon.raw("POST", "/v1/sandboxes", body={"from": "mv-tpl-2", "isolation": "container"})
        assert status == 409 and "microVM" in body["error"]["message"], body
        assert {s["id"] for s in daemon.raw("GET", "/v1/sandboxes")[1]["sandboxes"]} == before
    finally:
        for n in made:
            daemon.raw("DELETE", f"/v1/snapshots/{n}")
    deadline = time.time() + 30  # the last sandboxes' teardowns collect the layers
    while vm_layer_images(daemon) - images_before:
        assert time.time() < deadline, vm_layer_images(daemon) - images_before
        time.sleep(0.2)


def test_hibernate_saves_the_whole_vm_and_the_restore_renews_its_clock(client, daemon):
    sb = client.create(image="busybox", isolation="microvm")
    try:
        # A process whose state is only in its memory, writing it (and a count) to /tmp.
        sb.exec(["sh", "-c", "echo kept > /root/f; secret=$$-$RANDOM$RANDOM; n=0; while true; do n=$((n+1)); "
                             "echo $secret > /tmp/s; echo $n > /tmp/n.t; mv /tmp/n.t /tmp/n; sleep 0.2; done "
                             ">/dev/null 2>&1 &"], check=True)
        time.sleep(1)
        secret = sb.exec("cat /tmp/s").stdout
        boot = sb.exec("cat /proc/sys/kernel/random/boot_id").stdout
        qemu = qemu_pid(daemon, sb.id)
        saved = os.path.join(daemon.data, "hibernated", sb.id)
        for cycle in range(2):
            n0 = int(sb.exec("cat /tmp/n").stdout)
            p = sb.pause(mode="hibernate")
            assert p.state == "paused" and p.data["pause_mode"] == "hibernate"
            # Nothing of the VM runs on the host: its QEMU, relay and cgroup are gone.
            assert not os.path.exists(f"/proc/{qemu}") and sb.id not in daemon.cgroups()
            ram = os.stat(os.path.join(saved, "vm.ram"))
            memory = sb.data["resources"]["memory_mb"] << 20
            # The RAM file is as large as the guest's memory, but holds only what it touched.
            assert ram.st_size == memory and ram.st_blocks * 512 < memory // 4, ram
            assert all(os.stat(os.path.join(saved, f)).st_mode & 0o777 == 0o600 for f in os.listdir(saved))
            time.sleep(3)  # the guest's clock stands still meanwhile
            assert sb.resume().state == "running"
            assert not os.path.exists(saved)
            # The same boot, the same process with the same memory, going on from where it was.
            assert sb.exec("cat /proc/sys/kernel/random/boot_id").stdout == boot
            assert sb.exec("cat /tmp/s").stdout == secret and sb.exec("cat /root/f").stdout == "kept\n"
            time.sleep(0.6)
            assert int(sb.exec("cat /tmp/n").stdout) > n0
            # Its clock is the host's again, and its disk takes writes (thawed).
            assert abs(int(sb.exec("date +%s").stdout) - time.time()) < 3
            sb.exec(f"echo {cycle} > /root/c && sync", check=True)
            qemu = qemu_pid(daemon, sb.id)
        assert daemon.metric("sbx_restore_seconds_count") >= 2
    finally:
        sb.delete()


def test_a_damaged_saved_vm_fails_its_resume_clearly_and_stays_hibernated(client, daemon):
    with client.create(image="busybox", isolation="microvm") as sb:
        sb.exec("echo kept > /root/f", check=True)
        sb.pause(mode="hibernate")
        ram = os.path.join(daemon.data, "hibernated", sb.id, "vm.ram")
        subprocess.run(["cp", "--sparse=always", "-p", ram, ram + ".whole"], check=True)
        os.truncate(ram, os.path.getsize(ram) // 2)
        status, body = daemon.raw("POST", f"/v1/sandboxes/{sb.id}/resume")
        assert status == 500 and "RAM" in body["error"]["message"], body
        assert sb.refresh().data["pause_mode"] == "hibernate"
        assert sb.id not in daemon.cgroups()
        # Mended, it resumes.
        os.rename(ram + ".whole", ram)
        assert sb.resume().state == "running"
        assert sb.exec("cat /root/f").stdout == "kept\n"


def disk_mb_seen(sb):
    """The size of the sandbox's root file system (its own disk's), in MiB, as df shows it."""
    return int(sb.exec("df -m / | tail -1").stdout.split()[1])


def test_a_memory_template_starts_copies_from_its_memory_each_its_own(client, daemon):
    net = {"mode": "outbound", "allow": ["198.51.100.7/32"]}
    # A smaller disk than the copies': each copy's disk grows to its own disk_mb.
    src = client.create(image="busybox", isolation="microvm", network=net, resources={"disk_mb": 512})
    made, name = [src], f"mem-{src.id}"
    try:
        # State only in memory: a process's variable, written to the guest's tmpfs.
        src.exec(["sh", "-c", "echo file > /root/f; secret=$$-$RANDOM$RANDOM; while true; do echo $secret > /tmp/s; "
                              "sleep 0.2; done >/dev/null 2>&1 &"], check=True)
        time.sleep(1)
        secret = src.exec("cat /tmp/s").stdout
        # Paused: refused with the reason, nothing made (a wall without memory templates:
        # conftest.require_memory).
        src.pause()
        status, body = daemon.raw("POST", f"/v1/sandboxes/{src.id}/snapshot", body={"name": name, "memory": True})
        assert status == 409 and "running sandbox" in body["error"]["message"], body
        src.resume()
        assert daemon.raw("GET", f"/v1/snapshots/{name}")[0] == 404
        snap = daemon.raw("POST", f"/v1/sandboxes/{src.id}/snapshot", body={"name": name, "memory": True})[1]
        assert snap["memory"] is True and snap["memory_isolation"] == "microvm", snap
        assert src.exec("cat /tmp/s").stdout == secret  # the source runs on
        src.exec("echo later > /root/f", check=True)
        copies = []
        for _ in range(2):
            cp = client.create(from_=name, isolation="microvm", network=net)
            made.append(cp)
            copies.append(cp)
            # Its memory is the template's: the process and what it keeps in /tmp.
            assert cp.exec("cat /tmp/s").stdout == secret
            assert cp.exec("cat /root/f").stdout == "file\n"
            # Its own name, address (the network answers it there), clock and randomness.
            assert cp.exec("hostname").stdout.strip() == cp.id
            assert cp.data["network"]["address"] in cp.exec("ip -4 addr show eth0").stdout
            # Its own MAC, the one QEMU gives its device (52:54 and its IPv4 address).
            octets = [int(x) for x in cp.data["network"]["address"].split(".")]
            assert cp.exec("cat /sys/class/net/eth0/address").stdout.strip() == "52:54:" + ":".join(f"{o:02x}" for o in octets)
            assert "REFUSED" in cp.exec("nslookup example.com").stdout
            assert abs(int(cp.exec("date +%s").stdout) - time.time()) < 3
            want = cp.data["resources"]["disk_mb"]
            assert want > 512 and 0.85 * want < disk_mb_seen(cp) <= want, (want, disk_mb_seen(cp))
        assert disk_mb_seen(src) <= 512
        draws = {cp.exec("head -c 32 /dev/urandom | od -An -tx1").stdout for cp in copies}
        assert len(draws) == 2, draws
        # Other walls do not take it, and a VM of another shape boots on its files.
        status, body = daemon.raw("POST", "/v1/sandboxes", body={"from": name, "isolation": "container"})
        assert status == 409 and "microVM" in body["error"]["message"], body
        other = client.create(from_=name, isolation="microvm", resources={"memory_mb": 512, "disk_mb": 1024})
        made.append(other)
        assert other.exec("cat /root/f").stdout == "file\n"
        assert 870 < disk_mb_seen(other) <= 1024
        # A disk smaller than the template's cannot hold its files: refused, nothing made.
        before = len(client.list())
        status, body = daemon.raw("POST", "/v1/sandboxes", body={"from": name, "isolation": "microvm",
                                                                 "resources": {"disk_mb": 256}})
        assert status == 409 and "smaller than its memory template's (512 MiB)" in body["error"]["message"], body
        assert len(client.list()) == before
        assert other.exec("cat /tmp/s").exit_code != 0
        # A copy stopped and started boots afresh on its own disk.
        copies[0].exec("echo mine >> /root/f", check=True)
        copies[0].stop()
        copies[0].start()
        assert copies[0].exec("cat /root/f").stdout == "file\nmine\n"
        assert copies[0].exec("cat /tmp/s").exit_code != 0
    finally:
        for sb in made:
            sb.delete()
        daemon.raw("DELETE", f"/v1/snapshots/{name}")


def test_forks_with_memory_start_with_the_sources_processes_each_its_own(client, daemon):
    src = client.create(image="busybox", isolation="microvm")
    made = [src]
    try:
        src.exec(["sh", "-c", "secret=$$-$RANDOM$RANDOM; while true; do echo $secret > /tmp/s; "
                              "sleep 0.2; done >/dev/null 2>&1 &"], check=True)
        time.sleep(1)
        secret = src.exec("cat /tmp/s").stdout
        before = daemon.sandbox_dirs()
        # Refused, with the reason and nothing made: a paused source, a memory that is no boolean.
        src.pause()
        status, body = daemon.raw("POST", f"/v1/sandboxes/{src.id}/fork", body={"memory": True})
        assert status == 409 and "running sandbox" in body["error"]["message"], body
        src.resume()
        with client.create(image="busybox") as box:
            status, body = daemon.raw("POST", f"/v1/sandboxes/{box.id}/fork", body={"memory": "yes"})
            assert status == 400, body
        deadline = time.time() + 30  # the box's folder goes as its delete ends
        while daemon.sandbox_dirs() != before and time.time() < deadline:
            time.sleep(0.1)
        assert daemon.sandbox_dirs() == before
        forks = src.fork(count=2, memory=True)
        made += forks
        assert src.exec("cat /tmp/s").stdout == secret  # the source runs on
        for f in forks:
            assert f.data["metadata"]["forked_from"] == src.id
            # The source's process runs on in it: it writes its secret again.
            f.exec("rm /tmp/s", check=True)
            time.sleep(0.6)
            assert f.exec("cat /tmp/s").stdout == secret
            assert f.exec("hostname").stdout.strip() == f.id
        draws = {f.exec("head -c 32 /dev/urandom | od -An -tx1").stdout for f in forks}
        assert len(draws) == 2, draws
    finally:
        for sb in made:
            sb.delete()
    daemon.wait_clean()


def test_a_memory_template_keeps_a_warm_code_context_each_copy_drawing_its_own_numbers(client, daemon):
    """The seed's case: a template whose interpreter has imported what the tool call needs.
    Each copy finds the context (its variables, its imports) and is followed as its own
    process; Python's `random` and a bash context's $RANDOM draw differently in each copy."""
    src = client.create(image="default", isolation="microvm")
    made, name = [src], f"code-mem-{src.id}"
    try:
        out = code_cell(daemon, src.id, "import random, json\nx = 41\nrandom.random()")
        assert out["error"] is None, out
        status, sh = daemon.raw("POST", f"/v1/sandboxes/{src.id}/code/contexts", body={"language": "bash"})
        assert status == 201, sh
        code_cell(daemon, src.id, "echo $RANDOM", context=sh["id"])
        snap = daemon.raw("POST", f"/v1/sandboxes/{src.id}/snapshot", body={"name": name, "memory": True})[1]
        assert snap["memory"] is True, snap
        draws = {code_cell(daemon, src.id, "random.random()")["results"][0]["text"]}
        shell_draws = {code_cell(daemon, src.id, "echo $RANDOM $RANDOM", context=sh["id"])["logs"]["stdout"][0]}
        for _ in range(2):
            cp = client.create(from_=name, isolation="microvm")
            made.append(cp)
            contexts = daemon.raw("GET", f"/v1/sandboxes/{cp.id}/code/contexts")[1]
            assert sorted(c["id"] for c in contexts["contexts"]) == sorted(["python", sh["id"]]), contexts
            out = code_cell(daemon, cp.id, "x + 1")
            assert out["results"][0]["text"] == "42" and out["error"] is None, out
            draws.add(code_cell(daemon, cp.id, "random.random()")["results"][0]["text"])
            shell_draws.add(code_cell(daemon, cp.id, "echo $RANDOM $RANDOM", context=sh["id"])["logs"]["stdout"][0])
        assert len(draws) == 3 and len(shell_draws) == 3, (draws, shell_draws)
    finally:
        for sb in made:
            sb.delete()
        daemon.raw("DELETE", f"/v1/snapshots/{name}")


def code_cell(daemon, sid, text, context=None):
    body = {"code": text, **({"context": context} if context else {})}
    status, out = daemon.raw("POST", f"/v1/sandboxes/{sid}/code", body=body, timeout=120)
    assert status == 200, out
    return out


@pytest.mark.parametrize("point", ["microvm.loading", "create.started"])
def test_kill_9_of_sbxd_while_a_copy_loads_leaves_it_whole_or_gone(fresh_daemon, point):
    """sbxd dies while a memory template's copy loads (QEMU waiting for its saved state),
    or once it runs but before it is recorded so: after a restart the copy is an error row
    whose delete leaves nothing (no QEMU, cgroup or folder), the template's source runs on,
    and the template still makes whole copies."""
    from test_crash import crash_while_a_copy_starts
    crash_while_a_copy_starts(fresh_daemon, "microvm", point)


def test_a_warm_pool_keeps_loaded_copies_of_a_memory_template(tmp_path):
    from conftest import Daemon
    d = Daemon("vm-pool", extra_args=["--pool-size", "1"])

    def wait_pool():  # a VM for the image and one for the template
        deadline = time.time() + 120
        while d.metric("sbx_pool_ready") < 2:
            assert time.time() < deadline, "the pool did not fill"
            time.sleep(0.1)
    try:
        c = d.client()
        src = c.create(image="busybox", isolation="microvm")
        src.exec(["sh", "-c", "secret=$$-$RANDOM$RANDOM; while true; do echo $secret > /tmp/s; "
                              "sleep 0.2; done >/dev/null 2>&1 &"], check=True)
        time.sleep(1)
        secret = src.exec("cat /tmp/s").stdout
        name = "pool-mem"
        src.snapshot(name, memory=True)
        first = c.create(from_=name, isolation="microvm")  # loaded at once; the pool learns it
        wait_pool()
        claims = d.metric("sbx_pool_claims_total")
        cp = c.create(from_=name, isolation="microvm", metadata={"k": "v"})
        assert d.metric("sbx_pool_claims_total") == claims + 1
        # A loaded copy, renewed for itself: the template's process, its own name and
        # randomness.
        assert cp.exec("cat /tmp/s").stdout == secret
        assert cp.exec("hostname").stdout.strip() == cp.id
        assert c.get(cp.id).data["metadata"] == {"k": "v"}
        draws = {sb.exec("head -c 32 /dev/urandom | od -An -tx1").stdout for sb in (first, cp)}
        assert len(draws) == 2
        # Another shape never takes a warm VM (its guest keeps the RAM it booted with).
        wait_pool()
        claims = d.metric("sbx_pool_claims_total")
        big = c.create(from_=name, isolation="microvm", resources={"memory_mb": 512})
        assert d.metric("sbx_pool_claims_total") == claims
        total_kb = int(big.exec("awk '/MemTotal/ {print $2}' /proc/meminfo").stdout)
        assert total_kb > 400 * 1024, total_kb
        for sb in (src, first, cp, big):
            sb.delete()
        c.api.request("DELETE", f"/v1/snapshots/{name}")
    finally:
        d.destroy()


def test_a_disk_is_the_same_files_in_vms_and_containers(client, daemon):
    """QEMU shares a disk into the guest as a folder (9p): the files, owners and modes a
    container sandbox sees, at once both ways, and a serverless call runs on this wall too."""
    disk = client.disks.create(size_mb=64)
    try:
        disk.exec("echo from-a-container > a; mkdir d; chown 1000:1000 d; chmod 700 d", image="busybox",
                  isolation="container", check=True)
        with client.create(image="busybox", isolation="microvm",
                           disks=[{"id": disk.id, "mount_path": "/data/disk"}]) as vm:
            assert vm.exec("cat /data/disk/a").stdout == "from-a-container\n"
            assert vm.exec("stat -c '%u:%g %a' /data/disk /data/disk/a /data/disk/d").stdout == \
                "0:0 755\n0:0 644\n1000:1000 700\n"
            assert vm.exec("mount | grep ' /data/disk '").stdout.startswith("sbx-disk-0 on /data/disk type 9p")
            # A user's rights are the guest's to check, as the container's are.
            assert vm.exec("echo x > /data/disk/d/f", user="1000").exit_code == 0
            assert vm.exec("echo x > /data/disk/b", user="1000").exit_code != 0
            vm.exec("echo from-the-vm > /data/disk/v; chown 1000:1000 /data/disk/v", check=True)
            r = disk.exec("cat v; stat -c '%u:%g' v d/f", image="busybox", isolation="container")
            assert r.stdout == "from-the-vm\n1000:1000\n1000:1000\n", r.stdout + r.stderr
            # Another sandbox's write shows at once (the guest caches nothing of a disk).
            disk.exec("echo changed > a", image="busybox", isolation="container", check=True)
            assert vm.exec("cat /data/disk/a").stdout == "changed\n"
            # Space is the disk's: a full disk is ENOSPC in the guest, and space comes back.
            r = vm.exec("dd if=/dev/zero of=/data/disk/big bs=1M count=100 2>&1; rm /data/disk/big; echo x > /data/disk/y && echo ok")
            assert "No space left on device" in r.stdout and r.stdout.endswith("ok\n"), r.stdout
            # While a VM uses it, the disk stays.
            status, body = daemon.raw("DELETE", f"/v1/disks/{disk.id}")
            assert status == 409, body
        r = disk.exec("cat a v; uname -r", image="busybox", isolation="microvm")
        assert r.stdout.startswith("changed\nfrom-the-vm\n") and r.stdout.split()[-1] != os.uname().release, r.stdout
    finally:
        disk.delete()


def test_a_vm_with_a_disk_refuses_memory_saves_clearly_and_runs_on(client, daemon):
    """QEMU cannot save a VM that shares a folder: hibernate and memory templates answer 409
    with the reason; the VM, its disk and its files snapshot are untouched."""
    disk = client.disks.create(size_mb=32)
    name = None
    try:
        with client.create(image="busybox", isolation="microvm", disks=[{"id": disk.id}]) as vm:
            vm.exec("echo kept > /root/r; echo on-disk > /mnt/disk/f", check=True)
            layers = sorted(os.listdir(os.path.join(daemon.data, "layers")))
            status, body = daemon.raw("POST", f"/v1/sandboxes/{vm.id}/pause", body={"mode": "hibernate"})
            assert status == 409 and body["error"]["code"] == "conflict" and "disk" in body["error"]["message"], body
            status, body = daemon.raw("POST", f"/v1/sandboxes/{vm.id}/snapshot", body={"name": f"m-{vm.id}", "memory": True})
            assert status == 409 and "disk" in body["error"]["message"], body
            status, body = daemon.raw("POST", f"/v1/sandboxes/{vm.id}/fork", body={"memory": True})
            assert status == 409 and "disk" in body["error"]["message"], body
            assert sorted(os.listdir(os.path.join(daemon.data, "layers"))) == layers
            assert vm.refresh().state == "running"
            assert vm.exec("cat /root/r /mnt/disk/f").stdout == "kept\non-disk\n"
            # Its files are a template as ever (the disk is not part of it).
            name = f"disk-vm-{vm.id}"
            vm.snapshot(name)
        with client.create(from_=name, isolation="microvm") as copy:
            assert copy.exec("cat /root/r").stdout == "kept\n"
            assert copy.exec("test -e /mnt/disk/f").exit_code == 1
        assert disk.exec("cat f", image="busybox", isolation="container").stdout == "on-disk\n"
    finally:
        if name:
            daemon.raw("DELETE", f"/v1/snapshots/{name}")
        disk.delete()


def test_without_qemu_microvm_is_refused_clearly():
    from conftest import Daemon
    d = Daemon("noqemu", extra_args=["--qemu", "none"])
    try:
        health = d.client().health()
        assert "microvm" not in health["features"]["isolation"] and health["microvm_accel"] is None
        assert health["microvm_channel"] is None
        status, body = d.raw("POST", "/v1/sandboxes", body={"image": "busybox", "isolation": "microvm"})
        assert status == 400 and body["error"]["code"] == "invalid_request", body
        assert "microvm" in body["error"]["message"]
        status, _ = d.raw("GET", "/v1/health", auth=False)
        assert status == 200
    finally:
        d.destroy()
