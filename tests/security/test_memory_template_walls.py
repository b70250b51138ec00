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
        layers = os.path.join(daemon.data, "layers")

        def saved_memories():  # other tests' layers may still be there, their removal pending
            return {os.path.join(layers, l, "memory") for l in os.listdir(layers)
                    if os.path.isdir(os.path.join(layers, l, "memory"))}
        before = saved_memories()
        snap = daemon.raw("POST", f"/v1/sandboxes/{a.id}/snapshot", body={"name": name, "memory": True})[1]
        assert snap["memory"] is True, snap
        try:
            saved = sorted(saved_memories() - before)
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


@pytest.mark.parametrize("wall", WALLS)
def test_a_no_env_sandbox_never_receives_secrets_through_a_memory_template(fresh_daemon, wall):
    """A memory template of a sandbox whose execs got the daemon's secrets says so, and a
    no_env sandbox cannot start from it (its processes hold the secret in their
    environment); one made from a no_env sandbox serves no_env sandboxes."""
    d = fresh_daemon
    require_memory(d, wall)
    c = d.client()
    c.secrets.set("MEM_TEMPLATE_SECRET", "s3cr3t-in-a-process")
    # A background process started by an exec keeps the secret in its environment.
    keep = "sleep 1000 >/dev/null 2>&1 &"
    with c.create(image="busybox", isolation=wall) as got, c.create(image="busybox", isolation=wall, no_env=True) as clean:
        for sb in (got, clean):
            sb.exec(["sh", "-c", keep], check=True)
        a = d.raw("POST", f"/v1/sandboxes/{got.id}/snapshot", body={"name": "mem-secrets", "memory": True})[1]
        b = d.raw("POST", f"/v1/sandboxes/{clean.id}/snapshot", body={"name": "mem-clean", "memory": True})[1]
        assert a["memory_secrets"] is True and b["memory_secrets"] is False, (a, b)
        assert d.raw("GET", "/v1/snapshots/mem-secrets")[1]["memory_secrets"] is True
        before = {s["id"] for s in d.sandboxes()}
        status, body = d.raw("POST", "/v1/sandboxes", body={"from": "mem-secrets", "no_env": True, "isolation": wall})
        assert status == 409 and "secrets" in body["error"]["message"], body
        assert {s["id"] for s in d.sandboxes()} == before
        # Without no_env it starts, its kept process holding the secret as the source's does.
        with c.create(from_="mem-secrets", isolation=wall) as cp:
            assert "s3cr3t-in-a-process" in cp.exec(
                "cat /proc/$(pidof sleep)/environ | tr '\\0' '\\n'", user="root").stdout
        # The clean template serves no_env sandboxes, and nothing in them holds the secret.
        with c.create(from_="mem-clean", isolation=wall, no_env=True) as cp:
            out = cp.exec("cat /proc/$(pidof sleep)/environ | tr '\\0' '\\n'; env", user="root").stdout
            assert "s3cr3t" not in out, out
            assert cp.exec("pidof sleep").stdout.strip()
    for n in ("mem-secrets", "mem-clean"):
        d.raw("DELETE", f"/v1/snapshots/{n}")
