"""The CLI shows a command's output as the command produces it (sbxd streams it), not in
64 KiB batches or at the end, also when its stdout is a pipe."""
import os
import select
import subprocess

from conftest import SBX


def test_exec_output_appears_while_the_command_runs(daemon, client):
    with client.create(image="busybox") as sb:
        # The command prints a partial line, then waits until the test, having read it
        # through the CLI's pipe, lets it go on: a CLI that batched its output would leave
        # the test waiting (the readline's timeout fails it).
        cmd = ("printf 'first, no newline'; while [ ! -e /tmp/go ]; do sleep 0.05; done; "
               "echo; echo second")
        env = dict(os.environ, SBX_URL=daemon.url, SBX_API_KEY=daemon.key)
        p = subprocess.Popen([SBX, "exec", sb.id, "--", "sh", "-c", cmd], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            fd = p.stdout.fileno()
            got = b""
            while b"first, no newline" not in got:
                ready, _, _ = select.select([fd], [], [], 30)
                assert ready, f"nothing from the CLI while the command runs (got {got!r})"
                chunk = os.read(fd, 4096)
                assert chunk, f"the CLI ended early: {got!r} {p.stderr.read()!r}"
                got += chunk
            assert p.poll() is None  # the command is still waiting for /tmp/go
            sb.exec("touch /tmp/go", check=True)
            rest, err = p.communicate(timeout=60)
            assert (got + rest).decode() == "first, no newline\nsecond\n", err
            assert p.returncode == 0
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
