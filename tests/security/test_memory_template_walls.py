"""A memory template against the other tenants: its saved memory (every secret its processes
held) is closed to them on the host, and the privilege that renames a copy is never the
copy's own. gVisor's save is root's alone; CRIU's (the container wall's) is root's and
readable by the sandboxes' root group only, as a hibernated sandbox's is: CRIU reads it
from processes already turned into the sandbox's."""
import os
import subprocess

import pytest

from conftest import MEMORY_WALLS as WALLS, require_memory


@pytest.mark.parametrize("wall", WALLS)
def test_a_memory_template_is_closed_to_other_tenants_and_its_copies_gain_no_capability(client, daemon, wall):
    require_memory(daemon, wall)
    with client.create(image="busybox", isolation=wall) as a, client.create(image="busybox") as b:
        a.exec(["sh", "-c", "s=secret-in-memory-$RANDOM; while true; do sleep 1; done >/dev/null 2>&1 &"], check=True)
        name = f"mem-sec-{wall}-{a.id}"
        snap = daemon.raw("POST", f"/v1/sandboxes/{a.id}/snapshot", body={"name": name, "memory": True})[1]
        assert snap["memory"] is True, snap
        try:
            layers = os.path.join(daemon.data, "layers")
            saved = [os.path.join(layers, l, "memory") for l in os.listdir(layers)
                     if os.path.isdir(os.path.join(layers, l, "memory"))]
            assert len(saved) == 1, saved
            st = os.stat(saved[0])
            names = os.listdir(saved[0])
            if wall == "gvisor":
                assert st.st_uid == 0 and st.st_mode & 0o077 == 0, oct(st.st_mode)
                image = "checkpoint.img"
            else:
                assert st.st_uid == 0 and st.st_gid == daemon.uid_base and st.st_mode & 0o027 == 0, oct(st.st_mode)
                image = "inventory.img"
            assert image in names, names
            # gVisor's: another sandbox's host user (its files' owner) cannot list or read it.
            # CRIU's: a host user outside the sandboxes cannot (their root group can, as
            # for a hibernated sandbox's images, from the host's side only).
            other = os.stat(os.path.join(daemon.data, "sandboxes", b.id, "upper")).st_uid
            assert other == daemon.uid_base
            if wall == "container":
                other = 65534
            probe = ("import os, sys\ntry:\n    os.listdir(sys.argv[1]); open(sys.argv[2], 'rb').read(1); print('read')\n"
                     "except OSError as e:\n    print('refused', e.errno)\n")
            out = subprocess.run(["/usr/bin/python3", "-c", probe, saved[0], os.path.join(saved[0], image)],
                                 capture_output=True, text=True, user=other, group=other, timeout=30).stdout
            assert out.startswith("refused"), out
            # The copy was renamed from outside; its own root cannot rename it, nor holds
            # the capability that would.
            with client.create(from_=name, isolation=wall) as cp:
                assert cp.exec("hostname").stdout.strip() == cp.id
                r = cp.exec("hostname taken", user="root")
                assert r.exit_code != 0 and cp.exec("hostname").stdout.strip() == cp.id, r
                caps = [l.split()[1] for l in cp.exec("cat /proc/self/status", user="root").stdout.splitlines()
                        if l.startswith(("CapEff", "CapPrm", "CapBnd"))]
                for mask in caps:
                    assert not int(mask, 16) & (1 << 21), caps  # CAP_SYS_ADMIN
        finally:
            daemon.raw("DELETE", f"/v1/snapshots/{name}")
