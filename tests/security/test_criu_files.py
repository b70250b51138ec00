"""A file that a restored process holds is the one that was saved. CRIU reopens each open
file of a checkpoint by its path, with the privileges of the restore (the sandbox's root):
if the path has become a link to a root-owned file (a disk that another sandbox also
mounts, swapped while this one sleeps; a memory template's copy given a disk of the
attacker's at the same place), `user`'s process would hold that file open for writing in
the restored sandbox, and `user` would become root there. The restore refuses a path
that goes through a link: a hibernated sandbox stays hibernated and says why (a stop and
start boots it on its files), a memory template's copy boots on the template's files."""
import time

import pytest

from conftest import require_hibernate, require_memory

# `user` holds F open for appending in a process kept through the checkpoint; F has the
# size and mode of /etc/profile (what CRIU checks), so only the path can tell them apart.
HOLD = ("sh -c 'exec 3>>/mnt/d/f; while true; do sleep 1; done' >/dev/null 2>&1 &")
PREPARE = ("s=$(stat -c %s /etc/profile); head -c $s /dev/zero > /mnt/d/f; chmod 644 /mnt/d/f; "
           "chown user:user /mnt/d/f")
SWAP = "rm -f /mnt/d/f; ln -s /etc/profile /mnt/d/f"


def holders_of_profile(sb):
    """The processes of `sb` with /etc/profile open for writing, as `pid:fd` strings."""
    script = ("for p in /proc/[0-9]*; do for fd in $p/fd/*; do "
              "[ \"$(readlink $fd 2>/dev/null)\" = /etc/profile ] || continue; "
              "f=$(awk '/^flags/{print $2}' $p/fdinfo/${fd##*/}); "
              "[ $(( $f & 3 )) -ne 0 ] && echo ${p#/proc/}:${fd##*/}; done; done; true")
    # As `user`: the sandbox's root may not look into another uid's descriptors.
    return sb.exec(["sh", "-c", script], user="user").stdout.split()


def profile_unchanged(sb, before):
    return sb.exec(["sha256sum", "/etc/profile"], user="root").stdout == before


def start_holder(sb):
    sb.exec(["sh", "-c", PREPARE], user="root", check=True)
    sb.exec(["sh", "-c", HOLD], user="user", check=True)
    for _ in range(50):
        if sb.exec(["sh", "-c", "for p in /proc/[0-9]*; do readlink $p/fd/3; done 2>/dev/null"],
                   user="user").stdout.split().count("/mnt/d/f"):
            return
        time.sleep(0.1)
    pytest.fail("the holder did not start")


def test_a_hibernated_sandbox_whose_open_file_became_a_link_stays_hibernated(client, daemon):
    require_hibernate(daemon)
    disk = client.disks.create(size_mb=32)
    try:
        with client.create(image="default", disks=[{"id": disk.id, "mount_path": "/mnt/d"}]) as a, \
                client.create(image="busybox", disks=[{"id": disk.id, "mount_path": "/mnt/d"}]) as b:
            before = a.exec(["sha256sum", "/etc/profile"], user="root").stdout
            start_holder(a)
            a.pause(mode="hibernate")
            b.exec(["sh", "-c", SWAP], check=True)  # the other sandbox, while `a` sleeps
            status, body = daemon.raw("POST", f"/v1/sandboxes/{a.id}/resume")
            if status == 200:
                # What the swap would have given `user`: /etc/profile open for writing.
                assert holders_of_profile(a) == [], "a restored process holds /etc/profile for writing"
                pytest.fail(f"the restore took a file that is not the one saved: {body}")
            assert status == 500 or status == 409, (status, body)
            assert "link" in body["error"]["message"].lower() or "/mnt/d/f" in body["error"]["message"], body
            assert daemon.raw("GET", f"/v1/sandboxes/{a.id}")[1]["state"] == "paused"
            # Its files are whole: a stop and a start boot it on them.
            a.stop()
            a.start()
            assert profile_unchanged(a, before)
            assert a.exec(["readlink", "/mnt/d/f"]).stdout.strip() == "/etc/profile"
    finally:
        disk.delete()


def test_a_memory_copy_given_a_link_where_its_template_had_a_file_boots_on_files(client, daemon):
    require_memory(daemon, "container")
    mine, theirs = client.disks.create(size_mb=32), client.disks.create(size_mb=32)
    name = None
    try:
        with client.create(image="default", isolation="container",
                           disks=[{"id": mine.id, "mount_path": "/mnt/d"}]) as a:
            start_holder(a)
            name = f"criu-files-{a.id}"
            snap = daemon.raw("POST", f"/v1/sandboxes/{a.id}/snapshot", body={"name": name, "memory": True})[1]
            assert snap.get("memory") is True, snap
        # The attacker's disk, at the place the template's process held its file.
        with client.create(image="busybox", disks=[{"id": theirs.id, "mount_path": "/mnt/d"}]) as b:
            b.exec(["sh", "-c", SWAP], check=True)
        with client.create(from_=name, isolation="container",
                           disks=[{"id": theirs.id, "mount_path": "/mnt/d"}]) as cp:
            before = cp.exec(["sha256sum", "/etc/profile"], user="root").stdout
            assert holders_of_profile(cp) == [], "a copy's process holds /etc/profile for writing"
            # It booted on the template's files: the template's holder is not running in it.
            held = cp.exec(["sh", "-c", "for p in /proc/[0-9]*; do readlink $p/fd/3; done 2>/dev/null"],
                           user="user").stdout.split()
            assert "/mnt/d/f" not in held and "/etc/profile" not in held, held
            assert profile_unchanged(cp, before)
    finally:
        if name:
            daemon.raw("DELETE", f"/v1/snapshots/{name}")
        mine.delete()
        theirs.delete()
