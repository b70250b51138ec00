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


def test_exec_exit_125_for_cut_output_and_for_the_clis_own_failures(daemon, client):
    with client.create(image="busybox") as sb:
        # 17 MiB against the 16 MiB cap: the command succeeds, the CLI says the output was cut.
        r = subprocess.run([SBX, "exec", sb.id, "--", "head", "-c", "17825792", "/dev/zero"],
                           env=dict(os.environ, SBX_URL=daemon.url, SBX_API_KEY=daemon.key),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
        assert r.returncode == 125
        assert len(r.stdout) == 16 << 20
        assert b"stdout was cut at sbxd's output cap (the command exited 0)" in r.stderr
        # The command's own status comes through untouched, 1 included.
        assert daemon.cli("exec", sb.id, "--", "sh", "-c", "exit 1", check=False).returncode == 1
    # No such sandbox, and no daemon: 125, not a status the command could have given.
    r = daemon.cli("exec", "sb-0000000000000000", "--", "true", check=False)
    assert r.returncode == 125 and "not_found" in r.stderr
    env = dict(os.environ, SBX_URL="http://127.0.0.1:9", SBX_API_KEY=daemon.key)
    r = subprocess.run([SBX, "exec", "sb-0000000000000000", "--", "true"], env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 125 and "cannot reach sbxd" in r.stderr


def test_bad_values_are_refused_not_ignored(daemon):
    before = daemon.sandboxes()
    r = daemon.cli("create", "--ttl", "0", check=False)
    assert r.returncode != 0 and "ttl_seconds" in r.stderr
    r = daemon.cli("ls", "--state", "runing", check=False)
    assert r.returncode != 0 and "unknown state" in r.stderr
    status, body = daemon.raw("GET", "/v1/sandboxes?state=pooled")
    assert status == 400 and body["error"]["code"] == "invalid_request"
    assert daemon.cli("ls", "--state", "running").returncode == 0
    assert [s["id"] for s in daemon.sandboxes()] == [s["id"] for s in before]


def test_ctrl_c_stops_the_remote_command(daemon, client):
    """Ctrl-C on a plain `sbx exec` (the CLI ends) stops the command in the sandbox at once,
    as a client that drops a buffered API exec does: sbxd notices the closed connection."""
    import signal
    import time
    env = dict(os.environ, SBX_URL=daemon.url, SBX_API_KEY=daemon.key)
    with client.create(image="busybox") as sb:
        # As in a terminal's foreground: SIGINT at its default (a suite started in the
        # background, as CI may start it, inherits it ignored).
        p = subprocess.Popen([SBX, "exec", sb.id, "--", "sh", "-c", "echo started; sleep 30; touch /tmp/finished"],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        assert p.stdout.readline() == b"started\n"
        p.send_signal(signal.SIGINT)
        p.wait(timeout=10)
        deadline = time.time() + 20  # inside the command's 30 s, with room for a busy host
        while "sleep 30" in sb.exec("ps -o args").stdout:
            assert time.time() < deadline, "the command still runs after the CLI went away"
            time.sleep(0.1)
        # A buffered exec whose client hangs up mid-way: the same.
        import http.client
        import json
        c = http.client.HTTPConnection("127.0.0.1", daemon.port, timeout=30)
        c.request("POST", f"/v1/sandboxes/{sb.id}/exec", body=json.dumps({"cmd": "sleep 31; touch /tmp/finished"}),
                  headers={"Authorization": "Bearer " + daemon.key, "Content-Type": "application/json"})
        deadline = time.time() + 20
        while "sleep 31" not in sb.exec("ps -o args").stdout:
            assert time.time() < deadline
            time.sleep(0.05)
        c.close()
        deadline = time.time() + 20
        while "sleep 31" in sb.exec("ps -o args").stdout:
            assert time.time() < deadline, "the command still runs after its client hung up"
            time.sleep(0.1)
        assert sb.exec("ls /tmp/finished").exit_code != 0


def test_piped_stdin_reaches_the_command(daemon, client, tmp_path):
    env = dict(os.environ, SBX_URL=daemon.url, SBX_API_KEY=daemon.key)
    with client.create(image="busybox") as sb:
        p = subprocess.run([SBX, "exec", "-i", sb.id, "--", "cat"], input=b"hello\n", env=env, capture_output=True,
                           timeout=60)
        assert p.returncode == 0 and p.stdout == b"hello\n", p.stderr
        # Without -i a pipe is not read (as docker exec): a parent that never closes the
        # pipe it hands down does not hang sbx.
        never_closed = subprocess.Popen(["sleep", "30"], stdout=subprocess.PIPE)
        try:
            p = subprocess.run([SBX, "exec", sb.id, "--", "wc", "-c"], stdin=never_closed.stdout, env=env,
                               capture_output=True, timeout=20)
            assert p.returncode == 0 and p.stdout.split() == [b"0"]
        finally:
            never_closed.kill()
            never_closed.wait()
        blob = os.urandom(300000) + b"\x00\xff"
        f = tmp_path / "in.bin"
        f.write_bytes(blob)
        with open(f, "rb") as fin:  # a redirected file, byte for byte
            p = subprocess.run([SBX, "exec", sb.id, "--", "cat"], stdin=fin, env=env, capture_output=True, timeout=60)
        assert p.stdout == blob
        # -n sends nothing (the command reads EOF), as ssh -n; so does an empty pipe.
        p = subprocess.run([SBX, "exec", "-n", sb.id, "--", "wc", "-c"], input=b"ignored", env=env,
                           capture_output=True, timeout=60)
        assert p.stdout.split() == [b"0"]
        p = subprocess.run([SBX, "exec", "-i", sb.id, "--", "wc", "-c"], input=b"12345", env=env,
                           capture_output=True, timeout=60)
        assert p.stdout.split() == [b"5"]


def test_one_shell_rule(daemon, client):
    """One word after -- is a shell command line, several are the argv: in exec, spawn and
    disk exec alike."""
    with client.create(image="busybox") as sb:
        assert daemon.cli("exec", sb.id, "--", "echo a > /tmp/x; cat /tmp/x").stdout == "a\n"
        assert daemon.cli("exec", sb.id, "--", "echo", "a > b").stdout == "a > b\n"
        pid = daemon.cli("spawn", sb.id, "--", "echo s > /tmp/s").stdout.strip()
        assert sb.processes.get(int(pid)).wait(timeout=10)["exit_code"] == 0
        assert sb.exec("cat /tmp/s").stdout == "s\n"
