"""The CLI's habits: `exec -i` streams its input, `exec --json` prints one object, --json
shapes errors too, `create --disk/--public`, an example in every command's help, shell
completion and the manual page from the same tree, `usage`'s window, and progress lines
(no escape codes) for large copies when stderr is not a terminal."""
import base64
import json
import os
import select
import signal
import subprocess
import time

from conftest import SBX


def env_of(daemon):
    return dict(os.environ, SBX_URL=daemon.url, SBX_API_KEY=daemon.key)


def read_until(fd, want, got=b""):
    while want not in got:
        ready, _, _ = select.select([fd], [], [], 30)
        assert ready, f"nothing more from the CLI (got {got!r})"
        chunk = os.read(fd, 4096)
        assert chunk, f"the CLI ended early: {got!r}"
        got += chunk
    return got


def test_exec_i_streams_input_as_it_comes(daemon, client):
    env = env_of(daemon)
    with client.create(image="busybox") as sb:
        # The command answers the first line while the CLI's stdin is still open: an input
        # read to its end first would leave the test waiting here.
        p = subprocess.Popen([SBX, "exec", "-i", sb.id, "--", "sh", "-c",
                              "read a; echo got $a; read b; echo got $b >&2; exit 3"],
                             env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            p.stdin.write(b"one\n")
            p.stdin.flush()
            got = read_until(p.stdout.fileno(), b"got one\n")
            p.stdin.write(b"two\n")
            p.stdin.close()
            out, err = p.stdout.read(), p.stderr.read()
            p.wait(timeout=60)
            assert got + out == b"got one\n" and b"got two\n" in err and p.returncode == 3, err
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        # Byte for byte, both ways.
        blob = os.urandom(300000) + b"\x00\xff\xfe\n"
        r = subprocess.run([SBX, "exec", "-i", sb.id, "--", "cat"], input=blob, env=env, capture_output=True,
                           timeout=60)
        assert r.returncode == 0 and r.stdout == blob, r.stderr
        # --timeout applies: the command's group is killed.
        r = subprocess.run([SBX, "exec", "-i", "--timeout", "1", sb.id, "--", "sleep", "30"], input=b"",
                           env=env, capture_output=True, timeout=60)
        assert r.returncode == 124 and b"timed out after 1 s" in r.stderr, r.stderr
        r = subprocess.run([SBX, "exec", "-i", "--timeout", "0", sb.id, "--", "true"], input=b"", env=env,
                           capture_output=True, timeout=60)
        assert r.returncode == 2
        # A reader that goes away (`| head`): sbx stops the command before it ends.
        r = subprocess.run(f"{SBX} exec -i {sb.id} -- sh -c 'while true; do echo y; done' < /dev/null | head -c 2",
                           shell=True, env=env, capture_output=True, timeout=60)
        assert r.stdout == b"y\n"
        deadline = time.time() + 10
        while "while true" in sb.exec("ps -o args").stdout:
            assert time.time() < deadline, "the command still runs after its reader went away"
            time.sleep(0.1)
        # Ctrl-C stops the remote command.
        p = subprocess.Popen([SBX, "exec", "-i", sb.id, "--", "sh", "-c", "echo started; sleep 31"], env=env,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        assert p.stdout.readline() == b"started\n"
        p.send_signal(signal.SIGINT)
        p.wait(timeout=20)
        deadline = time.time() + 5
        while "sleep 31" in sb.exec("ps -o args").stdout:
            assert time.time() < deadline, "the command still runs after Ctrl-C"
            time.sleep(0.1)


def test_processes_api_base64_stdin_and_output(daemon, client):
    with client.create(image="busybox") as sb:
        status, p = daemon.raw("POST", f"/v1/sandboxes/{sb.id}/processes", body={"cmd": ["cat"]})
        assert status == 201, p
        raw = bytes(range(256)) * 3
        base = f"/v1/sandboxes/{sb.id}/processes/{p['pid']}"
        status, body = daemon.raw("POST", base + "/stdin", body={"data": "not base64!", "encoding": "base64"})
        assert status == 400 and "not base64" in body["error"]["message"]
        status, body = daemon.raw("POST", base + "/stdin", body={"data": "x", "encoding": "hex"})
        assert status == 400
        status, body = daemon.raw("POST", base + "/stdin",
                                  body={"data": base64.b64encode(raw).decode(), "encoding": "base64", "eof": True})
        assert status == 200 and body["bytes"] == len(raw), body
        status, text = daemon.raw("GET", base + "/output?follow=true&encoding=base64",
                                  headers={"Accept": "application/x-ndjson"})
        assert status == 200
        lines = [text] if isinstance(text, dict) else [json.loads(l) for l in text.splitlines()]
        got = b"".join(base64.b64decode(l["data"]) for l in lines if l["type"] == "stdout")
        assert got == raw and lines[-1]["type"] == "exit"
        assert daemon.raw("GET", base + "/output?encoding=utf16")[0] == 400
        # A keeper that takes no stdin (the sandbox stopped it): sbxd holds at most 8 MiB
        # of stdin for it, then says wait.
        status, p = daemon.raw("POST", f"/v1/sandboxes/{sb.id}/processes", body={"cmd": "sleep 600"})
        base = f"/v1/sandboxes/{sb.id}/processes/{p['pid']}"
        keeper = sb.exec(f"awk '/^PPid/ {{print $2}}' /proc/{p['pid']}/status").stdout.strip()
        sb.exec(f"kill -STOP {keeper}", check=True)
        assert daemon.raw("POST", base + "/stdin", body={"data": "x" * (6 << 20)})[0] == 200
        status, body = daemon.raw("POST", base + "/stdin", body={"data": "x" * (3 << 20)})
        assert status == 503 and "not taken yet" in body["error"]["message"], body
        sb.exec(f"kill -CONT {keeper}", check=True)
        assert daemon.raw("POST", base + "/signal", body={"signal": "KILL"})[0] == 200


def test_exec_json_is_one_object_and_errors_are_json(daemon, client):
    with client.create(image="busybox") as sb:
        r = daemon.cli("exec", "--json", sb.id, "--", "sh", "-c", "echo out; echo err >&2; exit 4", check=False)
        assert r.returncode == 4, r.stderr
        lines = r.stdout.splitlines()
        assert len(lines) == 1, r.stdout
        obj = json.loads(lines[0])
        assert obj["stdout"] == "out\n" and obj["stderr"] == "err\n" and obj["exit_code"] == 4
        assert obj["timed_out"] is False and obj["duration_ms"] > 0 and "type" not in obj
        # The same through -i.
        r = daemon.cli("exec", "-i", "--json", sb.id, "--", "cat", input="piped", check=False)
        obj = json.loads(r.stdout)
        assert r.returncode == 0 and obj["stdout"] == "piped" and obj["exit_code"] == 0, r.stdout
    # Errors: one JSON line on stderr with the contract's code.
    r = daemon.cli("--json", "get", "sb-0000000000000000", check=False)
    err = json.loads(r.stderr.strip().splitlines()[-1])
    assert r.returncode == 1 and err["error"]["code"] == "not_found", r.stderr
    assert not err["error"]["message"].endswith("(not_found)")
    r = daemon.cli("--json", "crate", check=False)
    err = json.loads(r.stderr)
    assert r.returncode == 2 and err["error"]["code"] == "invalid_request" and "did you mean" in err["error"]["message"]
    r = daemon.cli("usage", "--json", "--since", "yesterday", check=False)
    assert r.returncode == 2 and json.loads(r.stderr)["error"]["code"] == "invalid_request"
    r = subprocess.run([SBX, "--json", "ls"], env=dict(env_of(daemon), SBX_URL="http://127.0.0.1:9"),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and json.loads(r.stderr)["error"]["code"] == "unavailable"
    # Without --json, the text form stays.
    r = daemon.cli("get", "sb-0000000000000000", check=False)
    assert r.stderr.startswith("sbx: ") and "(not_found)" in r.stderr


def test_snapshot_rm_points_to_templates_and_harms_nothing(daemon, client):
    """`sbx snapshot rm NAME` (a natural guess) is a snapshot of a sandbox named "rm": it
    answers that no such sandbox exists, even when NAME is a template's, points to `sbx
    template rm`, and the template stays."""
    with client.create(image="busybox") as sb:
        sb.snapshot("habits-snap")
    try:
        r = daemon.cli("snapshot", "rm", "habits-snap", check=False)
        assert r.returncode != 0 and "not found" in r.stderr and "sbx template rm NAME" in r.stderr, r.stderr
        assert [s.name for s in client.snapshots.list()].count("habits-snap") == 1
    finally:
        daemon.cli("template", "rm", "habits-snap")


def test_create_disk_and_public(daemon, client):
    disk = client.disks.create(name="habits-disk")
    try:
        sid = daemon.cli("create", "--image", "busybox", "--disk", "habits-disk:/mnt/w", "--public").stdout.strip()
        sb = client.get(sid)
        try:
            assert sb.refresh().data["public"] is True
            sb.exec("echo kept > /mnt/w/f", check=True)
        finally:
            sb.delete()
        assert disk.exec("cat /mnt/disk/f").stdout == "kept\n"
        r = daemon.cli("create", "--disk", ":/mnt/w", check=False)
        assert r.returncode == 2 and "DISK[:PATH]" in r.stderr
        r = daemon.cli("create", "--disk", "no-such-disk", check=False)
        assert r.returncode == 1 and "not found" in r.stderr
    finally:
        disk.delete()


def command_paths():
    script = subprocess.run([SBX, "completion", "bash"], capture_output=True, text=True, check=True).stdout
    import re
    return re.findall(r"^      ' ([^']+)'\) p=", script, re.M), script


def test_help_examples_completion_and_man():
    paths, bash_script = command_paths()
    assert {"create", "exec", "template build", "disk exec", "completion", "man"} <= set(paths), paths
    for path in paths:
        r = subprocess.run([SBX, *path.split(), "--help"], capture_output=True, text=True, timeout=30)
        assert r.returncode == 0 and "Example" in r.stdout, path
    # The bash script completes commands, nested commands and flags.
    def complete(*words):
        prog = (bash_script + "\nCOMP_WORDS=(" + " ".join(f"'{w}'" for w in words) + ")\n"
                f"COMP_CWORD={len(words) - 1}\n_sbx\nprintf '%s\\n' \"${{COMPREPLY[@]}}\"\n")
        r = subprocess.run(["bash", "-c", prog], capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, r.stderr
        return r.stdout.split()
    assert complete("sbx", "tem") == ["template"]
    assert complete("sbx", "template", "b") == ["build"]
    assert "--type" in complete("sbx", "create", "--ty")
    assert complete("sbx", "disk", "exec", "--time") == ["--timeout"]
    zsh = subprocess.run([SBX, "completion", "zsh"], capture_output=True, text=True, check=True).stdout
    assert zsh.startswith("#compdef sbx") and "'template:templates (named snapshots)'" in zsh
    assert subprocess.run([SBX, "completion", "fish"], capture_output=True, timeout=30).returncode == 2
    man = subprocess.run([SBX, "man"], capture_output=True, text=True, check=True).stdout
    assert man.startswith(".TH SBX 1")
    for path in paths:
        if path not in ("secret", "template", "disk", "image", "bench"):  # groups: their commands are listed
            assert f'.SS "sbx {path.replace("-", chr(92) + "-")} [OPTIONS]' in man, path


def test_usage_defaults_to_a_recent_summary(daemon, client):
    sb = client.create(image="busybox", name="metered-habits")
    time.sleep(0.3)
    sb.delete()
    r = daemon.cli("usage")
    assert r.stdout.startswith("usage from ") and sb.id not in r.stdout and "total:" in r.stdout
    assert sb.id in daemon.cli("usage", "-s").stdout
    assert sb.id in daemon.cli("usage", "--since", "1h", "--sandboxes").stdout
    assert sb.id in daemon.cli("usage", "--all-time", "-s").stdout
    full = json.loads(daemon.cli("usage", "--json").stdout)
    assert any(s["id"] == sb.id for s in full["sandboxes"])


def test_large_copies_show_progress_lines_when_piped(daemon, client, tmp_path):
    blob = os.urandom(10 << 20)
    src = tmp_path / "big.bin"
    src.write_bytes(blob)
    with client.create(image="busybox") as sb:
        r = daemon.cli("cp", str(src), f"{sb.id}:/root/big.bin")
        assert "copying" in r.stderr and "100%" in r.stderr and "\r" not in r.stderr and "\x1b" not in r.stderr
        back = tmp_path / "back.bin"
        r = daemon.cli("cp", f"{sb.id}:/root/big.bin", str(back))
        assert back.read_bytes() == blob and "copying" in r.stderr and "MiB" in r.stderr and "\r" not in r.stderr
        # A small copy says only what it copied.
        sb.exec("echo small > /root/small", check=True)
        r = daemon.cli("cp", f"{sb.id}:/root/small", str(tmp_path / "h"))
        assert r.stderr.startswith("copied file") and "%" not in r.stderr


def test_an_unreadable_key_file_is_named(daemon, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "SBX_API_KEY"}
    env["SBX_URL"] = daemon.url
    r = subprocess.run([SBX, "--data-dir", str(tmp_path / "none"), "ls"], env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 1 and f"{tmp_path}/none/api-key cannot be read" in r.stderr, r.stderr
    # A call that needs no key goes on.
    assert subprocess.run([SBX, "--data-dir", str(tmp_path / "none"), "health"], env=env,
                          capture_output=True, timeout=60).returncode == 0
