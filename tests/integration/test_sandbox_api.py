"""Create, exec, list, stop/start and delete through the SDK, the CLI and raw HTTP."""
import json
import os
import shutil
import time

import pytest

import sbx

from conftest import MICROVM_KERNEL, RUNSC, criu_checkpoints


def test_health_and_openapi_need_no_key(daemon):
    status, body = daemon.raw("GET", "/v1/health", auth=False)
    assert status == 200 and body["status"] == "ok" and body["version"]
    # The shared daemon runs on a store and with CRIU (hibernate where CRIU can checkpoint).
    works = criu_checkpoints()[0]
    # The gVisor wall where runsc is installed (the test command installs it).
    walls = ["container", "gvisor"] if os.access(RUNSC, os.X_OK) else ["container"]
    # The microVM wall where QEMU and the guest kernel are (the test command installs both);
    # test daemons boot VMs under TCG.
    if MICROVM_KERNEL and shutil.which("qemu-system-x86_64"):
        walls.append("microvm")
        assert body["microvm_accel"] == "tcg"
    # Hibernate: the container wall where CRIU can checkpoint, the others always.
    hib = (["container"] if works else []) + [w for w in walls if w != "container"]
    # Memory templates: the same walls (a container's is a CRIU save).
    mem = hib
    assert body["features"] == {"hibernate": bool(hib), "hibernate_isolation": hib, "memory_isolation": mem,
                                "store": True, "isolation": walls}
    assert body["store"]["size_mb"] > 0 and body["store"]["committed_mb"] >= 0
    shown = f"hibernate ({', '.join(hib)}), store" if hib else "store"
    if mem:
        shown += f", memory templates ({', '.join(mem)})"
    assert daemon.cli("health").stdout.strip() == f"ok, sbxd {body['version']} ({', '.join(walls)}; {shown})"
    status, doc = daemon.raw("GET", "/v1/openapi.json", auth=False)
    assert status == 200 and "/v1/sandboxes/{id}/exec" in doc["paths"]


def test_sdk_create_exec_delete(client, daemon):
    sb = client.create(type="small", ttl_seconds=600, no_env=True, name="tool-call-a", image="default")
    try:
        assert sb.state == "running"
        assert sb.data["name"] == "tool-call-a"
        assert sb.data["expires_at"]
        r = sb.exec("python3 -c 'print(1+1)'", timeout_seconds=60, check=True)
        assert r.stdout == "2\n" and r.exit_code == 0 and r.stderr == ""
        assert r.timing.queue_ms >= 0 and r.timing.execute_ms > 0
        assert r.cost_usd >= 0
        code = "import sys; print(sys.argv[1:])"
        r = sb.exec(["python3", "-c", code, "a b", "'c'"], check=True)
        assert r.stdout == "['a b', \"'c'\"]\n"
        with pytest.raises(sbx.ExecError) as e:
            sb.exec("echo bad >&2; exit 3", check=True)
        assert e.value.result.exit_code == 3 and e.value.result.stderr == "bad\n"
        got = client.get(sb.id)
        assert got.id == sb.id and got.state == "running"
        assert [s.id for s in client.list(name="tool-call-a")] == [sb.id]
    finally:
        sb.delete()
    with pytest.raises(sbx.NotFoundError):
        client.get(sb.id)


def test_context_manager_deletes(client):
    with client.create(image="busybox") as sb:
        assert sb.exec("echo $SBX_SANDBOX_ID", check=True).stdout.strip() == sb.id
        sid = sb.id
    with pytest.raises(sbx.NotFoundError):
        client.get(sid)


def test_env_cwd_stdin_and_streaming(client):
    with client.create(image="busybox", env={"FROM_CREATE": "1"}) as sb:
        r = sb.exec("echo $FROM_CREATE $FROM_EXEC; pwd", env={"FROM_EXEC": "2"}, cwd="/tmp")
        assert r.stdout == "1 2\n/tmp\n"
        assert sb.exec("cat", stdin="piped\n").stdout == "piped\n"
        chunks = []
        r = sb.exec("for i in 1 2 3; do echo out$i; echo err$i >&2; sleep 0.05; done",
                    on_stdout=lambda s: chunks.append(("o", s)), on_stderr=lambda s: chunks.append(("e", s)))
        assert r.exit_code == 0
        assert "".join(s for k, s in chunks if k == "o") == "out1\nout2\nout3\n"
        assert "".join(s for k, s in chunks if k == "e") == "err1\nerr2\nerr3\n"
        assert r.stdout == "out1\nout2\nout3\n"


def test_raw_http_ndjson_stream(daemon, client):
    with client.create(image="busybox") as sb:
        status, text = daemon.raw("POST", f"/v1/sandboxes/{sb.id}/exec",
                                  body={"cmd": "echo a; echo b >&2; exit 7"},
                                  headers={"Accept": "application/x-ndjson"})
        assert status == 200
        lines = [json.loads(l) for l in text.splitlines()]
        assert {"type": "stdout", "data": "a\n"} in lines
        assert {"type": "stderr", "data": "b\n"} in lines
        assert lines[-1]["type"] == "exit" and lines[-1]["exit_code"] == 7
        # An error found before any output is a plain JSON error, even when streaming.
        status, body = daemon.raw("POST", "/v1/sandboxes/sb-0000000000000000/exec", body={"cmd": "true"},
                                  headers={"Accept": "application/x-ndjson"})
        assert status == 404 and body["error"]["code"] == "not_found"


def test_exit_codes_and_signals(client):
    with client.create(image="busybox") as sb:
        assert sb.exec("exit 42").exit_code == 42
        r = sb.exec("kill -TERM $$")
        assert r.exit_code == 128 + 15 and r.signal == 15 and not r.timed_out
        r = sb.exec(["no-such-binary"])
        assert r.exit_code == 127 and "no-such-binary" in r.stderr


def test_output_cap_flags_and_command_runs_on(client):
    with client.create(image="busybox") as sb:
        # 20 MiB of output against the 16 MiB default cap; the command still finishes.
        r = sb.exec("head -c 20971520 /dev/zero | tr '\\0' x; echo done > /tmp/finished", timeout_seconds=120)
        assert r.stdout_truncated and not r.stderr_truncated
        assert len(r.stdout) == 16 << 20
        assert sb.exec("cat /tmp/finished").stdout == "done\n"


def test_stop_keeps_files_and_start_boots_them(client):
    with client.create(image="busybox") as sb:
        sb.exec("echo kept > /root/state", check=True)
        sb.stop()
        assert client.get(sb.id).state == "stopped"
        with pytest.raises(sbx.ConflictError):
            sb.exec("true")
        sb.start()
        assert client.get(sb.id).state == "running"
        assert sb.exec("cat /root/state").stdout == "kept\n"


def test_ttl_stops_and_keeps_the_sandbox_listed(client):
    with client.create(image="busybox", ttl_seconds=1) as sb:
        sb.exec("echo x > /root/f", check=True)
        deadline = time.time() + 15
        while time.time() < deadline and client.get(sb.id).state != "stopped":
            time.sleep(0.2)
        got = client.get(sb.id)
        assert got.state == "stopped"
        assert got.data["billed_seconds"] >= 1
        assert sb.id in [s.id for s in client.list(state="stopped")]
        sb.start()
        assert sb.exec("cat /root/f").stdout == "x\n"


def test_list_filters(client):
    with client.create(image="busybox", metadata={"team": "a"}) as a, \
            client.create(image="busybox", metadata={"team": "b"}) as b:
        ids = [s.id for s in client.list(metadata={"team": "a"})]
        assert a.id in ids and b.id not in ids


def test_cli_create_exec_ls_rm(daemon):
    sid = daemon.cli("create", "--image", "default", "--ttl", "600", "--no-env").stdout.strip()
    assert sid.startswith("sb-")
    p = daemon.cli("exec", sid, "--", "python3", "-c", "print(1+1)")
    assert p.stdout == "2\n"
    p = daemon.cli("exec", sid, "--", "sh", "-c", "echo err >&2; exit 5", check=False)
    assert p.returncode == 5 and p.stderr == "err\n"
    assert sid in daemon.cli("ls").stdout
    assert json.loads(daemon.cli("--json", "get", sid).stdout)["state"] == "running"
    daemon.cli("rm", sid)
    assert sid not in daemon.cli("ls").stdout
    p = daemon.cli("exec", sid, "--", "true", check=False)
    assert p.returncode != 0 and "not found" in p.stderr


def test_delete_answers_at_once_and_leaves_nothing(fresh_daemon):
    d = fresh_daemon
    c = d.client()
    sb = c.create(image="busybox")
    sb.exec("sleep 1000 > /dev/null 2>&1 &")
    assert d.processes() and d.cgroups() == {sb.id}
    status, body = d.raw("DELETE", f"/v1/sandboxes/{sb.id}")
    assert status == 200 and body == {"type": "sandbox.deleted", "id": sb.id}
    d.wait_clean()
    assert not d.sandbox_mounts()
