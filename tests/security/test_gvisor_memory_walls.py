"""A gVisor memory template against the other tenants: its saved memory (every secret its
processes held) is root's alone on the host, and the privilege that renames a copy is
never the copy's own."""
import os
import subprocess


def test_a_gvisor_memory_template_is_roots_alone_and_its_copies_gain_no_capability(client, daemon):
    with client.create(image="busybox", isolation="gvisor") as a, client.create(image="busybox") as b:
        a.exec(["sh", "-c", "s=secret-in-memory-$RANDOM; while true; do sleep 1; done >/dev/null 2>&1 &"], check=True)
        name = f"gvmem-sec-{a.id}"
        snap = daemon.raw("POST", f"/v1/sandboxes/{a.id}/snapshot", body={"name": name, "memory": True})[1]
        assert snap["memory"] is True, snap
        try:
            layers = os.path.join(daemon.data, "layers")
            saved = [os.path.join(layers, l, "memory") for l in os.listdir(layers)
                     if os.path.isdir(os.path.join(layers, l, "memory"))]
            assert len(saved) == 1, saved
            st = os.stat(saved[0])
            assert st.st_uid == 0 and st.st_mode & 0o077 == 0, oct(st.st_mode)
            names = os.listdir(saved[0])
            assert "checkpoint.img" in names, names
            # Another sandbox's host user (its files' owner) cannot list or read it.
            other = os.stat(os.path.join(daemon.data, "sandboxes", b.id, "upper")).st_uid
            assert other != 0
            probe = ("import os, sys\ntry:\n    os.listdir(sys.argv[1]); open(sys.argv[2], 'rb').read(1); print('read')\n"
                     "except OSError as e:\n    print('refused', e.errno)\n")
            out = subprocess.run(["/usr/bin/python3", "-c", probe, saved[0], os.path.join(saved[0], "checkpoint.img")],
                                 capture_output=True, text=True, user=other, group=other, timeout=30).stdout
            assert out.startswith("refused"), out
            # The copy was renamed from outside; its own root cannot rename it, nor holds
            # the capability that would.
            with client.create(from_=name, isolation="gvisor") as cp:
                assert cp.exec("hostname").stdout.strip() == cp.id
                r = cp.exec("hostname taken", user="root")
                assert r.exit_code != 0 and cp.exec("hostname").stdout.strip() == cp.id, r
                caps = [l.split()[1] for l in cp.exec("cat /proc/self/status", user="root").stdout.splitlines()
                        if l.startswith(("CapEff", "CapPrm", "CapBnd"))]
                for mask in caps:
                    assert not int(mask, 16) & (1 << 21), caps  # CAP_SYS_ADMIN
        finally:
            daemon.raw("DELETE", f"/v1/snapshots/{name}")
