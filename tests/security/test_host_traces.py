"""What a sandbox must not learn about its host or do to the user's terminal: the host's
kernel command line, boot id, host name and name servers stay outside; escape sequences
in sandbox output reach a terminal only as visible text."""
import os
import pty
import select
import subprocess

import pytest

from conftest import ISOLATION, SBX, require_hibernate


def host(path):
    with open(path) as f:
        return f.read()


@pytest.mark.container_wall("gVisor shows a command line and boot id of its own")
def test_kernel_command_line_and_boot_id_are_the_sandboxes_own(daemon):
    c = daemon.client()
    with c.create(image="busybox") as a, c.create(image="busybox") as b:
        cmdline = a.exec("cat /proc/cmdline").stdout
        assert cmdline == "ro quiet\n" and cmdline != host("/proc/cmdline")
        ids = [sb.exec("cat /proc/sys/kernel/random/boot_id").stdout.strip() for sb in (a, b)]
        assert len(set(ids)) == 2 and host("/proc/sys/kernel/random/boot_id").strip() not in ids
        assert all(len(i) == 36 and i[14] == "4" for i in ids), ids
        # Read-only, and not to be unmounted or replaced from inside.
        for path in ("/proc/cmdline", "/proc/sys/kernel/random/boot_id"):
            r = a.exec(f"echo x > {path}")
            assert r.exit_code != 0
            assert a.exec(f"umount {path}").exit_code != 0
        # The same boot id while the sandbox lives; a new one when it boots again.
        assert a.exec("cat /proc/sys/kernel/random/boot_id").stdout.strip() == ids[0]
        a.stop()
        a.start()
        assert a.exec("cat /proc/sys/kernel/random/boot_id").stdout.strip() not in ids


def test_boot_id_survives_hibernation(daemon):
    require_hibernate(daemon)
    with daemon.client().create(image="busybox") as sb:
        before = sb.exec("cat /proc/sys/kernel/random/boot_id").stdout
        cmdline = sb.exec("cat /proc/cmdline").stdout
        # The container wall's own command line; gVisor's kernel shows its own too.
        assert cmdline != host("/proc/cmdline") and (cmdline == "ro quiet\n" or ISOLATION != "container")
        sb.pause(mode="hibernate")
        sb.resume()
        assert sb.exec("cat /proc/sys/kernel/random/boot_id").stdout == before
        assert sb.exec("cat /proc/cmdline").stdout == cmdline


def test_default_image_carries_no_host_name_or_name_servers(daemon):
    with daemon.client().create(image="default") as sb:
        etc_hostname = sb.exec("cat /etc/hostname").stdout
        resolv = sb.exec("cat /etc/resolv.conf").stdout
        assert etc_hostname == "localhost\n"
        # The only name server is sbxd's resolver for sandboxes (its subnet's first address).
        assert [l for l in resolv.splitlines() if l.startswith("nameserver")] == ["nameserver 10.250.0.1"]
        for line in host("/etc/resolv.conf").splitlines():
            if line.startswith("nameserver"):
                assert line not in resolv
        assert sb.exec("getent hosts localhost").exit_code == 0


NASTY = "printf 'title\\033]0;owned\\007 clear\\033[2J bell\\007 c1\\302\\233 done\\n'"


def run_on_pty(args, env):
    """Runs the CLI with its stdout on a pseudo-terminal; returns what it wrote there."""
    master, slave = pty.openpty()
    p = subprocess.Popen(args, env=env, stdout=slave, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    os.close(slave)
    out = b""
    while True:
        r, _, _ = select.select([master], [], [], 30)
        if not r:
            break
        try:
            chunk = os.read(master, 65536)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    p.wait(timeout=30)
    os.close(master)
    return out


def test_cli_shows_escape_sequences_on_a_terminal_and_passes_them_to_a_pipe(daemon):
    env = dict(os.environ, SBX_URL=daemon.url, SBX_API_KEY=daemon.key)
    env.pop("SBX_RAW_OUTPUT", None)
    with daemon.client().create(image="busybox") as sb:
        raw = b"title\x1b]0;owned\x07 clear\x1b[2J bell\x07 c1\xc2\x9b done\n"
        piped = subprocess.run([SBX, "exec", sb.id, "--", "sh", "-c", NASTY], env=env, capture_output=True, timeout=60)
        assert piped.returncode == 0 and piped.stdout == raw
        shown = run_on_pty([SBX, "exec", sb.id, "--", "sh", "-c", NASTY], env)
        assert b"\x1b" not in shown and b"\x07" not in shown and b"\xc2\x9b" not in shown, shown
        assert b"title^[]0;owned^G clear^[[2J bell^G c1\\u009b done" in shown, shown
        # Asked for, the terminal gets the bytes as they are.
        asked = run_on_pty([SBX, "--raw-output", "exec", sb.id, "--", "sh", "-c", NASTY], env)
        assert b"\x1b]0;owned\x07" in asked


def test_serverless_shell_choice_does_not_follow_tenant_symlinks_onto_the_host(client, daemon):
    assert os.path.exists("/usr/bin/bash")  # the host has bash; the busybox image has not
    with client.create(image="busybox") as sb:
        # Inside, /usr -> /usr is a loop; followed on the host, it would be the host's /usr.
        sb.exec("rm -rf /usr && ln -s /usr /usr", check=True)
        sb.snapshot("usr-loop")
    disk = client.disks.create(size_mb=16)
    try:
        status, body = daemon.raw("POST", f"/v1/disks/{disk.id}/exec", body={"cmd": "echo $0", "from": "usr-loop"})
        assert status == 200, body
        assert body["exit_code"] == 0 and body["stdout"] == "/bin/sh\n", body
    finally:
        disk.delete()
        daemon.raw("DELETE", "/v1/snapshots/usr-loop")
