"""A microVM's root against its host: the guest's kernel is the sandbox's, so its root can
take the agent's port, write what it likes to it and to its own disk. None of that reaches
past the VM: the relay on the host parses the port's frames strictly and runs unprivileged,
QEMU is unprivileged and filtered, and a disk a guest wrote is never mounted by the host."""
import os
import struct
import time

import pytest

import sbx


def vm_dir(daemon, sid):
    return os.path.join(daemon.data, "sandboxes", sid, "vm")


def test_a_guest_that_takes_its_port_and_lies_on_it_harms_only_itself(client, daemon):
    with client.create(image="busybox", isolation="microvm") as bystander:
        hostile = client.create(image="busybox", isolation="microvm")
        # The guest's root ends the agent's mux and writes a frame that claims 4 GiB.
        bad = struct.pack("<IB3s", 0xFFFFFFF0, 0x82, b"\x01\x00\x00") + b"x" * 64
        hostile.files.write("/root/bad", bad)
        hostile.processes.start("sleep 1; kill -9 $(pidof sbx-mux); sleep 0.2; "
                                "for p in /sys/class/virtio-ports/*; do "
                                "[ \"$(cat $p/name)\" = sbx.agent ] && cat /root/bad > /dev/$(basename $p); done; sleep 600",
                                user="root")
        time.sleep(4)
        # Its agent is out of reach now (its own doing): a clear error, not a hang.
        t = time.time()
        with pytest.raises(sbx.SbxError):
            hostile.exec("true", timeout_seconds=20)
        assert time.time() - t < 60
        # Nothing else noticed: sbxd, the other VM.
        assert daemon.client().health()["status"] == "ok"
        assert bystander.exec("echo fine").stdout == "fine\n"
        # Delete takes it whole: folder, cgroup, processes.
        hostile.delete()
        deadline = time.time() + 30
        while time.time() < deadline and (hostile.id in daemon.sandbox_dirs() or hostile.id in daemon.cgroups()):
            time.sleep(0.1)
        assert hostile.id not in daemon.sandbox_dirs() and hostile.id not in daemon.cgroups()
        assert bystander.exec("echo still fine").stdout == "still fine\n"
    daemon.wait_clean()


def test_the_vm_holds_no_host_privilege_and_its_files_are_its_own(client, daemon):
    with client.create(image="busybox", isolation="microvm") as a, \
            client.create(image="busybox", isolation="microvm") as b:
        ua = os.stat(vm_dir(daemon, a.id)).st_uid
        ub = os.stat(vm_dir(daemon, b.id)).st_uid
        assert ua != ub and ua != 0 and ub != 0
        for sb, uid in ((a, ua), (b, ub)):
            d = os.path.join(daemon.data, "sandboxes", sb.id)
            # QEMU's user owns its own folder and disk and nothing of the sandbox's above them;
            # the relay's socket is in a folder of root's.
            assert os.stat(os.path.join(d, "disk.ext4")).st_uid == uid
            assert os.stat(os.path.join(d, "disk.ext4")).st_mode & 0o077 == 0
            ctl = os.stat(os.path.join(d, "ctl"))
            assert ctl.st_uid == 0 and ctl.st_mode & 0o077 == 0
            assert os.stat(d).st_uid == 0
        # Every host process of each VM (QEMU, the relay, the console keeper) runs as that
        # VM's user, without capabilities.
        for sb, uid in ((a, ua), (b, ub)):
            base = f"/sys/fs/cgroup/pids/sbx-{daemon.instance}-microvm/{sb.id}/cgroup.procs"
            if not os.path.exists(base):
                base = f"/sys/fs/cgroup/sbx-{daemon.instance}-microvm/{sb.id}/cgroup.procs"
            pids = open(base).read().split()
            assert pids
            for pid in pids:
                st = {l.split(":")[0]: l.split(":")[1].split() for l in open(f"/proc/{pid}/status")}
                assert st["Uid"] == [str(uid)] * 4, (pid, st["Name"], st["Uid"])
                assert st["CapEff"] == st["CapPrm"] == ["0000000000000000"], (pid, st["Name"])


def test_a_vms_monitor_and_saved_memory_are_out_of_other_vms_reach(client, daemon):
    """QEMU's monitor (which can stop, save and read a VM) answers only its own user and
    root; another VM's user cannot reach it, nor a hibernated VM's memory or a memory
    template's, which are root's alone."""
    import socket
    import subprocess
    with client.create(image="busybox", isolation="microvm") as a, \
            client.create(image="busybox", isolation="microvm") as b:
        ub = os.stat(vm_dir(daemon, b.id)).st_uid
        monitor = os.path.join(vm_dir(daemon, a.id), "qmp.sock")
        assert os.path.exists(monitor)
        probe = ("import socket, sys\n"
                 "s = socket.socket(socket.AF_UNIX)\n"
                 "try:\n    s.connect(sys.argv[1]); print('connected')\n"
                 "except OSError as e:\n    print('refused', e.errno)\n")
        def as_b(*args):
            return subprocess.run(["/usr/bin/python3", "-c", *args], capture_output=True, text=True,
                                  user=ub, group=ub, timeout=30).stdout
        assert as_b(probe, monitor).startswith("refused"), "another VM's user reached a monitor"
        # A hibernated VM's memory, and a memory template's, are root's, mode 0600.
        a.exec("echo secret-in-memory > /tmp/s", check=True)
        name = f"mem-sec-{a.id}"
        snap = daemon.raw("POST", f"/v1/sandboxes/{a.id}/snapshot", body={"name": name, "memory": True})[1]
        assert snap["memory"] is True, snap
        try:
            a.pause(mode="hibernate")
            saved = os.path.join(daemon.data, "hibernated", a.id)
            layers = os.path.join(daemon.data, "layers")
            template = [os.path.join(layers, l) for l in os.listdir(layers)
                        if os.path.exists(os.path.join(layers, l, "vm.ram"))]
            assert template
            for folder in [saved, *template]:
                for f in ("vm.ram", "vm.mem", "vm.json"):
                    st = os.stat(os.path.join(folder, f))
                    assert st.st_uid == 0 and st.st_mode & 0o077 == 0, (folder, f, oct(st.st_mode))
                read = ("import sys\ntry:\n    open(sys.argv[1], 'rb').read(1); print('read')\n"
                        "except OSError as e:\n    print('refused', e.errno)\n")
                assert as_b(read, os.path.join(folder, "vm.ram")).startswith("refused")
            assert a.resume().exec("cat /tmp/s").stdout == "secret-in-memory\n"
        finally:
            daemon.raw("DELETE", f"/v1/snapshots/{name}")


def test_qemu_sees_only_its_own_files_in_its_jail(client, daemon):
    """QEMU runs in a mount namespace of its own (the jailer's idea): its root shows the
    system's programs, the files its VM boots from and its own folder and disk, nothing
    else of the host's: no other VM's folder, disk or template, no API key, no /etc; and its
    /proc shows its user's processes only."""
    import subprocess
    with client.create(image="busybox", isolation="microvm") as a, \
            client.create(image="busybox", isolation="microvm") as b:
        # A template that `a` does not boot from: its disk image is out of a's sight.
        b.exec("echo template-secret > /root/t", check=True)
        name = f"jail-{b.id}"
        snap = daemon.raw("POST", f"/v1/sandboxes/{b.id}/snapshot", body={"name": name})[1]
        assert snap.get("name") == name, snap
        try:
            pid = int(open(os.path.join(vm_dir(daemon, a.id), "qemu.pid")).read())
            ua = os.stat(vm_dir(daemon, a.id)).st_uid
            root = f"/proc/{pid}/root"
            argv = open(f"/proc/{pid}/cmdline", "rb").read().decode().split("\0")
            named = {p for arg in argv for part in arg.split(",") for p in [part.split("=", 1)[-1]]
                     if p.startswith("/")}
            # Everything of sbxd's data dir that QEMU sees is its own folder and disk, or a
            # file on its command line.
            own = os.path.join(daemon.data, "sandboxes", a.id)
            seen = []
            for top, dirs, files in os.walk(root + daemon.data):
                for f in files:
                    seen.append(os.path.join(top, f)[len(root):])
            assert seen
            for path in seen:
                assert path.startswith(own + "/") or path in named, path
            assert not os.path.exists(root + os.path.join(daemon.data, "sandboxes", b.id))
            assert not os.path.exists(root + os.path.join(daemon.data, "api-key"))
            assert os.listdir(root + "/etc") == ["ld.so.cache"]
            for gone in ("/root", "/home", "/run", "/boot", "/var/lib"):
                if not daemon.data.startswith(gone + "/"):
                    assert not os.path.exists(root + gone), gone
            assert set(os.listdir(root + "/dev")) <= {"null", "zero", "full", "random", "urandom", "kvm"}
            # What QEMU's user sees from inside: only its own processes, and it cannot
            # write anywhere but its folder and disk.
            def inside(*cmd):
                return subprocess.run(["nsenter", "-t", str(pid), "-m", "-S", str(ua), "-G", str(ua), *cmd],
                                      capture_output=True, text=True, timeout=30)
            listed = inside("/usr/bin/ls", "/proc")
            assert listed.returncode == 0, listed.stderr
            pids = {int(p) for p in listed.stdout.split() if p.isdigit()}
            assert pid in pids and 1 not in pids and os.getpid() not in pids and daemon.proc.pid not in pids, pids
            for p in pids:
                try:
                    assert os.stat(f"/proc/{p}").st_uid == ua, p
                except FileNotFoundError:
                    pass  # ls itself, gone
            wrote = inside("/usr/bin/touch", "/usr/x", "/x", "/var/x")
            assert wrote.returncode != 0 and not os.path.exists("/usr/x")
            # The VM works as ever.
            assert a.exec("echo fine").stdout == "fine\n"
        finally:
            daemon.raw("DELETE", f"/v1/snapshots/{name}")


def test_a_vm_with_a_disk_serves_it_with_a_file_servers_rights_over_the_sandboxes_files_only(client, daemon):
    """A VM with a disk: QEMU serves the disk (9p) from a user namespace of its own where
    the sandboxes' ids are mapped, keeping only chown, DAC override and search, fowner and
    fsetid there, as the VM's own host uid. A VM without a disk keeps no right at all. The
    guest's root reaches nothing past the disk through it, and what it plants there gains
    nothing in a container."""
    import subprocess
    disk = client.disks.create(size_mb=32)
    other = client.disks.create(size_mb=32)
    try:
        with client.create(image="busybox", isolation="microvm", disks=[{"id": disk.id}]) as a, \
                client.create(image="busybox", isolation="microvm") as b:
            pid_a = int(open(os.path.join(vm_dir(daemon, a.id), "qemu.pid")).read())
            pid_b = int(open(os.path.join(vm_dir(daemon, b.id), "qemu.pid")).read())
            ua = os.stat(vm_dir(daemon, a.id)).st_uid
            st = {l.split(":")[0]: l.split(":")[1].split() for l in open(f"/proc/{pid_a}/status")}
            assert st["Uid"] == [str(ua)] * 4 and st["Gid"] == [str(ua)] * 4, st["Uid"]
            assert not daemon.uid_base <= ua < daemon.uid_base + 65536
            for k in ("CapEff", "CapPrm", "CapBnd", "CapAmb"):
                assert st[k] == ["000000000000001f"], (k, st[k])
            assert os.readlink(f"/proc/{pid_a}/ns/user") != os.readlink("/proc/self/ns/user")
            assert open(f"/proc/{pid_a}/uid_map").read().split() == \
                ["0", str(daemon.uid_base), "65536", "65536", str(ua), "1"]
            # Its mount namespace is still root's: QEMU cannot change what its jail shows.
            assert os.readlink(f"/proc/{pid_a}/ns/mnt") != os.readlink("/proc/self/ns/mnt")
            root = f"/proc/{pid_a}/root"
            assert os.path.isdir(root + os.path.join(daemon.data, "disks", disk.id, "mnt"))
            assert not os.path.exists(root + os.path.join(daemon.data, "disks", other.id))
            stb = {l.split(":")[0]: l.split(":")[1].split() for l in open(f"/proc/{pid_b}/status")}
            assert stb["CapEff"] == ["0000000000000000"]
            assert os.readlink(f"/proc/{pid_b}/ns/user") == os.readlink("/proc/self/ns/user")
            # Through the disk the guest's root sees its own root, never the host's.
            a.exec("ln -s / /mnt/disk/rootlink; cp /bin/busybox /mnt/disk/id; chmod 4755 /mnt/disk/id", check=True)
            r = a.exec("cat /mnt/disk/rootlink/proc/sys/kernel/hostname; ls /mnt/disk/rootlink/mnt/disk/../../")
            assert r.stdout.splitlines()[0] == a.id, r.stdout
            assert os.listdir("/") != r.stdout.split()[1:] and "sbx-agent" not in r.stdout
            # What it planted: a set-uid root program is a user's own in a container.
            r = disk.exec("su -s /bin/sh nobody -c './id -u; grep CapEff /proc/self/status'", image="busybox",
                          isolation="container")
            assert "65534\n" in r.stdout and "CapEff:\t0000000000000000" in r.stdout, r.stdout + r.stderr
            # The host's copy of the file is owned within the sandboxes' ids, without set-id
            # power on the host (the host mounts disks nosuid).
            host = os.stat(os.path.join(daemon.data, "disks", disk.id, "mnt", "id"))
            assert host.st_uid == daemon.uid_base, host.st_uid
            mounts = subprocess.run(["findmnt", "-n", "-o", "OPTIONS", os.path.join(daemon.data, "disks", disk.id, "mnt")],
                                    capture_output=True, text=True).stdout
            assert "nosuid" in mounts and "nodev" in mounts, mounts
    finally:
        disk.delete()
        other.delete()
