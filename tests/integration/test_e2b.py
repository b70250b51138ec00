"""The E2B-compatible control plane driven by E2B's own SDK (`e2b` from the npm registry,
pinned in tests/node, installed by scripts/test.sh): a user sets E2B_API_KEY, E2B_API_URL
and E2B_SANDBOX_URL and changes nothing else. What the SDK saw is checked against sbx's
own API."""
import json
import os
import secrets
import shutil
import subprocess
import time
from datetime import datetime

import pytest

from conftest import ROOT

NODE_DIR = os.path.join(ROOT, "tests", "node")


def e2b(daemon, scenario, **env):
    assert shutil.which("node"), "Node.js is required (scripts/test.sh installs it)"
    assert os.path.isdir(os.path.join(NODE_DIR, "node_modules", "e2b")), \
        "run `npm ci` in tests/node first: scripts/test.sh does"
    env = dict(os.environ, E2B_API_KEY=daemon.key, E2B_API_URL=daemon.url, E2B_SANDBOX_URL=daemon.url, **env)
    p = subprocess.run(["node", os.path.join(NODE_DIR, "e2b_client.mjs"), scenario], env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert "uncaught" not in out, out["uncaught"]
    return out


def when(s):
    return datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


def test_the_sdk_creates_lists_pauses_connects_and_kills(daemon):
    tag = secrets.token_hex(4)
    out = e2b(daemon, "lifecycle", RUN_TAG=tag)
    sid = out["id"]
    c = out["created"]
    assert c["sandboxId"] == sid and c["state"] == "running" and c["envdVersion"] == "0.6.4", c
    assert c["metadata"] == {"suite": "e2b", "run": tag}
    # base is sbxd's default image (busybox for the test daemons); the timeout is the TTL.
    assert c["templateId"] == "busybox" and c["cpuCount"] >= 1 and c["memoryMB"] > 0, c
    assert 110 <= when(c["endAt"]) - when(c["startedAt"]) <= 130, c
    # Pages of one (limit 1) and still one sandbox of this run.
    assert out["listed"] == [sid]
    assert when(out["afterTimeout"]["endAt"]) - when(c["endAt"]) > 400
    assert out["pause"] is True and out["pauseAgain"] is False
    assert out["paused"]["state"] == "paused" and out["pausedListed"] == [sid]
    assert out["connected"]["sandboxId"] == sid and out["connected"]["info"]["state"] == "running"
    assert out["kill"] is True and out["killAgain"] is False
    for gone in (out["gone"], out["connectGone"]):
        assert gone["ok"] is False and gone["error"] == "SandboxNotFoundError", gone
    status, body = daemon.raw("GET", f"/v1/sandboxes/{sid}")
    assert status == 404, body


def test_what_the_sdk_made_is_an_sbx_sandbox(daemon):
    """The front makes sbx's own sandboxes: the env and metadata the SDK gave are there,
    and the access token it was handed is neither SBX_TOKEN nor in the environment."""
    status, body = daemon.raw("POST", "/v2/sandboxes", body={"templateID": "busybox", "timeout": 300,
                                                              "envVars": {"GREETING": "hi"},
                                                              "metadata": {"made-by": "e2b"}},
                              headers={"X-API-KEY": daemon.key}, auth=False)
    assert status == 201, body
    assert set(body) == {"sandboxID", "templateID", "clientID", "envdVersion", "envdAccessToken", "domain"}, body
    sid, token = body["sandboxID"], body["envdAccessToken"]
    try:
        sb = daemon.client().get(sid)
        assert sb.data["metadata"] == {"made-by": "e2b"}
        env = sb.exec("env").stdout
        assert "GREETING=hi" in env and token not in env
        assert sb.exec("echo -n $SBX_TOKEN").stdout != token
        # The same token on every read of it (connect after a restart gets it too).
        status, got = daemon.raw("GET", f"/sandboxes/{sid}", headers={"X-API-KEY": daemon.key}, auth=False)
        assert status == 200 and got["envdAccessToken"] == token, got
        # It is not an API key: nothing of the control plane takes it.
        status, got = daemon.raw("GET", f"/sandboxes/{sid}", headers={"X-API-KEY": token}, auth=False)
        assert status == 401 and got == {"code": 401, "message": got["message"]}, got
    finally:
        daemon.raw("DELETE", f"/v1/sandboxes/{sid}")


def test_refusals_come_back_as_the_sdk_expects(daemon):
    before = {s["id"] for s in daemon.sandboxes()}
    out = e2b(daemon, "refusals")
    for k in ("wrongKey", "wrongKeyList"):
        assert out[k]["ok"] is False and out[k]["error"] == "AuthenticationError", out[k]
    assert out["noTemplate"]["ok"] is False and "404" in out["noTemplate"]["message"], out["noTemplate"]
    assert out["badTemplate"]["ok"] is False and "400" in out["badTemplate"]["message"], out["badTemplate"]
    assert out["mcp"]["ok"] is False and "mcp is not supported" in out["mcp"]["message"], out["mcp"]
    for k in ("missing", "missingTimeout"):
        assert out[k]["ok"] is False and out[k]["error"] == "SandboxNotFoundError", out[k]
    # Nothing was made, and nothing that was there went.
    assert {s["id"] for s in daemon.sandboxes()} == before


def test_errors_have_e2bs_shape(daemon):
    h = {"X-API-KEY": daemon.key}
    status, body = daemon.raw("GET", "/sandboxes/sb-0000000000000000", headers=h, auth=False)
    assert status == 404 and set(body) == {"code", "message"} and body["code"] == 404, body
    status, body = daemon.raw("DELETE", "/sandboxes/sb-0000000000000000", headers=h, auth=False)
    assert status == 404 and body["code"] == 404, body
    status, body = daemon.raw("GET", "/v2/sandboxes", auth=False)
    assert status == 401 and body["code"] == 401, body
    status, body = daemon.raw("POST", "/v2/sandboxes", body={"templateID": "busybox", "bogus": 1}, headers=h, auth=False)
    assert status == 400 and "bogus" in body["message"], body
    status, body = daemon.raw("POST", "/v2/sandboxes", body="{", headers=h, auth=False)
    assert status == 400 and body["code"] == 400, body
    status, body = daemon.raw("GET", "/v2/sandboxes?limit=x", headers=h, auth=False)
    assert status == 400 and body["code"] == 400, body
    # sbx's own routes keep their shape, and take the key as a Bearer only (the port
    # proxy forwards an X-API-KEY header into the sandbox: nobody should send one there).
    status, body = daemon.raw("GET", "/v1/sandboxes/sb-0000000000000000", headers=h, auth=False)
    assert status == 401 and body["error"]["code"] == "unauthorized", body
    status, body = daemon.raw("GET", "/v1/sandboxes/sb-0000000000000000")
    assert status == 404 and body["error"]["code"] == "not_found", body


def test_a_timeout_kills_the_sandbox(daemon):
    out = e2b(daemon, "expiry")
    assert out["afterExpiry"]["ok"] is False and out["afterExpiry"]["error"] == "SandboxNotFoundError", out
    status, body = daemon.raw("GET", f"/v1/sandboxes/{out['id']}")
    assert status == 404, body


def test_commands_run_through_the_data_plane(daemon):
    out = e2b(daemon, "commands")
    assert out["running"] is True
    # /bin/bash -l -c, the sandbox's env and the call's, the cwd asked for; the sandbox's
    # default user (`user` on the default image, as on E2B) unless the call names one.
    assert out["run"] == {"stdout": "hello\nhi bar\n/tmp\nuser\n", "stderr": "oops\n", "exitCode": 0}, out["run"]
    assert out["asUser"] == "user\n"
    assert out["asRoot"] == "root\n/root\n"
    f = out["failing"]
    assert f["ok"] is False and f["error"] == "CommandExitError" and f["exitCode"] == 3, f
    assert f["message"] == "exit status 3", f
    assert f["stdout"] == "partial\n", f
    # Background output arrives as it is made (three lines 0.3 s apart), not at the end.
    b = out["background"]
    assert b["stdout"] == "1\n2\n3\n" and len(b["chunks"]) == 3 and b["spreadMs"] >= 400, b
    # handle.kill(): SendSignal; a pid that runs nothing is false.
    assert out["kill"] is True and out["killUnknown"] is False, out
    assert out["killedWait"]["ok"] is False and out["killedWait"]["error"] == "CommandExitError", out["killedWait"]
    assert out["killedWait"]["message"] in ("signal: killed", "exit status 137"), out["killedWait"]
    assert out["timeout"]["ok"] is False and out["timeout"]["error"] == "TimeoutError", out["timeout"]
    assert out["timeoutMs"] < 10_000 and out["sleepsLeft"] == "0", out
    assert out["big"] == 3_000_000
    assert out["runningAfterKill"] is False
    assert out["afterKill"]["ok"] is False, out["afterKill"]


def test_commands_list_stdin_and_connect(daemon):
    out = e2b(daemon, "processes")
    pids = out["pids"]
    listed = {p["pid"]: p for p in out["listed"]}
    # E2B's SDK runs each command as /bin/bash -l -c CMD; the working folder is kept.
    assert listed[pids["sleeper"]] == {"pid": pids["sleeper"], "cmd": "/bin/bash", "args": ["-l", "-c", "sleep 30"],
                                       "cwd": "/tmp"}, listed
    assert pids["echo"] in listed
    # Connected after "one" was answered: it sees "two" and the end, not what came before.
    c = out["connected"]
    assert c == {"stdout": "got:two\neof\n", "exitCode": 0, "seen": "got:two\neof\n"}, c
    assert out["first"] == "got:one\ngot:two\neof\n"
    for gone in ("stdinGone", "connectUnknown"):
        assert out[gone]["ok"] is False, (gone, out[gone])
    assert out["connectUnknown"]["error"] == "NotFoundError", out["connectUnknown"]
    assert pids["sleeper"] not in out["listedAfter"] and pids["echo"] not in out["listedAfter"], out


def test_a_terminal_through_the_data_plane(daemon):
    out = e2b(daemon, "pty")
    # A real terminal of the size asked for, with the SDK's TERM; a resize is seen by it.
    assert out["first"] and out["size1"] and out["isTty"] and out["term"], out
    assert out["size2"] is True, out
    # `exit 7` ends it with that status (the SDK's CommandExitError for a non-zero one).
    assert out["end"]["ok"] is False and out["end"]["error"] == "CommandExitError", out["end"]
    assert out["end"]["message"] == "exit status 7", out["end"]
    assert out["resizeGone"]["ok"] is False and out["badSize"]["ok"] is False, out


def test_files_through_the_data_plane(daemon):
    out = e2b(daemon, "files")
    # A multipart upload (the SDK's default) and an octet-stream one, read back as text and
    # as exact bytes; an empty file reads as "".
    assert out["write"] == {"name": "hello.txt", "type": "file", "path": "/tmp/e2b/hello.txt"}, out["write"]
    assert out["read"] == "hello from e2b\n"
    assert out["octet"]["path"] == "/tmp/e2b/bin.dat"
    assert out["binary"] == {"length": 200_000, "same": True}, out["binary"]
    assert out["readEmpty"] == ""
    # Several files in one multipart body; a path that is not absolute is from the home of
    # the user (the sandbox's default, `user`).
    assert [f["path"] for f in out["many"]] == ["/tmp/e2b/a.txt", "/home/user/rel.txt"], out["many"]
    assert out["readRel"] == "R"
    listed = {e["name"]: e for e in out["list"]}
    assert set(listed) == {"hello.txt", "bin.dat", "empty.txt", "a.txt"}, listed
    h = listed["hello.txt"]
    assert h["type"] == "file" and h["path"] == "/tmp/e2b/hello.txt" and h["size"] == 15, h
    assert h["permissions"] == "-rw-r--r--" and h["owner"] == "user" and h["group"] == "user", h
    assert abs(h["modified"] / 1000 - time.time()) < 300, h
    assert out["exists"] is True and out["existsNot"] is False
    assert out["makeDir"] is True and out["makeDirAgain"] is False
    assert out["rename"]["path"] == "/tmp/e2b/d/a2.txt" and out["rename"]["type"] == "file", out["rename"]
    assert sorted(out["deep"]) == ["/tmp/e2b/d/a2.txt", "/tmp/e2b/d/e"], out["deep"]
    assert out["info"]["type"] == "dir" and out["info"]["permissions"].startswith("d"), out["info"]
    assert out["afterRemove"] is False and out["removeMissing"]["ok"] is True
    for missing in ("readMissing", "infoMissing", "listMissing"):
        assert out[missing]["ok"] is False and out[missing]["error"] == "FileNotFoundError", (missing, out[missing])
    # As `user`: from /home/user, owned by user, and refused where user may not write or read.
    assert out["userWrite"]["path"] == "/home/user/notes.txt", out["userWrite"]
    assert out["userInfo"]["owner"] == "user" and out["userInfo"]["path"] == "/home/user/notes.txt", out["userInfo"]
    for denied in ("userDenied", "userCannotRead"):
        assert out[denied]["ok"] is False and "ermission denied" in out[denied]["message"], (denied, out[denied])
    # The watch: the write, the rename (old name, then the new one created), the removal.
    ev = out["events"]
    assert ev[:2] == ["create:watched.txt", "write:watched.txt"], ev  # not the upload's hidden file
    assert "rename:watched.txt" in ev and "create:moved.txt" in ev, ev
    assert not any(".sbx-upload-" in e for e in ev), ev
    assert "remove:moved.txt" in ev and ev.index("rename:watched.txt") < ev.index("remove:moved.txt"), ev
    assert out["seen"] == "hello from e2b\nRuser 644\n", out["seen"]
    assert out["afterKill"]["ok"] is False, out["afterKill"]


def test_connect_timeout_health_and_filters_follow_e2bs_rules(daemon):
    h = {"X-API-KEY": daemon.key}
    status, sb = daemon.raw("POST", "/v2/sandboxes", body={"templateID": "busybox", "timeout": 3600}, headers=h,
                            auth=False)
    assert status == 201, sb
    sid, token = sb["sandboxID"], sb["envdAccessToken"]
    envd = {"E2b-Sandbox-Id": sid, "X-Access-Token": token}
    try:
        end = daemon.raw("GET", f"/sandboxes/{sid}", headers=h, auth=False)[1]["endAt"]
        # A connect never shortens a running sandbox's life; a longer timeout moves it on.
        status, body = daemon.raw("POST", f"/v2/sandboxes/{sid}/connect", body={"timeout": 60}, headers=h, auth=False)
        assert status == 200 and body["envdAccessToken"] == token, body
        assert daemon.raw("GET", f"/sandboxes/{sid}", headers=h, auth=False)[1]["endAt"] == end
        assert daemon.raw("GET", "/health", headers=envd, auth=False)[0] == 204
        # Paused: its data plane is not there (isRunning is false), and nothing resumes it
        # but a connect; a bad timeout changes nothing.
        assert daemon.raw("POST", f"/sandboxes/{sid}/pause", headers=h, auth=False)[0] == 204
        assert daemon.raw("GET", "/health", headers=envd, auth=False)[0] == 502
        for bad in (0, -5, 10**12):
            status, body = daemon.raw("POST", f"/v2/sandboxes/{sid}/connect", body={"timeout": bad}, headers=h, auth=False)
            assert status == 400 and body["code"] == 400, body
        assert daemon.raw("GET", f"/sandboxes/{sid}", headers=h, auth=False)[1]["state"] == "paused"
        status, body = daemon.raw("POST", f"/v2/sandboxes/{sid}/connect", body={"timeout": 120}, headers=h, auth=False)
        assert status == 201, body
        assert daemon.raw("GET", "/health", headers=envd, auth=False)[0] == 204
        # startedAfter is a time, checked as one.
        assert daemon.raw("GET", "/v2/sandboxes?startedAfter=yesterday", headers=h, auth=False)[0] == 400
        listed = daemon.raw("GET", "/v2/sandboxes?startedAfter=2000-01-01T00:00:00.000Z", headers=h, auth=False)[1]
        assert sid in [s["sandboxID"] for s in listed]
        listed = daemon.raw("GET", "/v2/sandboxes?startedAfter=2999-01-01T00:00:00Z", headers=h, auth=False)[1]
        assert listed == []
    finally:
        daemon.raw("DELETE", f"/v1/sandboxes/{sid}")
