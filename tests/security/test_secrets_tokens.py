"""Daemon secrets reach sandboxes only as exec env (never no_env ones), are sealed at rest
and never logged; each sandbox's SBX_TOKEN reads that sandbox and nothing else."""
import os
import sqlite3

import pytest

import sbx
from conftest import Daemon

SECRET = "s3cr3t-value-" + os.urandom(8).hex()


@pytest.fixture()
def d():
    daemon = Daemon("secrets")
    try:
        yield daemon
    finally:
        daemon.destroy()


def test_secrets_reach_env_but_not_no_env_sandboxes_disk_or_logs(d):
    c = d.client()
    assert c.secrets.set("OPENAI_API_KEY", SECRET).type == "secret.set"
    assert c.secrets.list() == ["OPENAI_API_KEY"]
    with c.create(image="busybox") as sb, c.create(image="busybox", no_env=True) as locked:
        assert sb.exec("echo $OPENAI_API_KEY").stdout == SECRET + "\n"
        # A no_env sandbox holds none of it: env, its init's environ, its files.
        r = locked.exec("env; cat /proc/1/environ 2>/dev/null | tr '\\0' '\\n'; grep -rs '" + SECRET + "' / "
                        "--exclude-dir=proc --exclude-dir=sys 2>/dev/null | head -1; true")
        assert SECRET not in r.stdout and "OPENAI_API_KEY" not in r.stdout
        # The init (agent) of a normal sandbox has an empty environment too.
        assert SECRET not in sb.exec("cat /proc/1/environ | tr '\\0' '\\n'").stdout
        # A serverless call's sandbox is no_env as well.
        disk = c.disks.create(size_mb=64)
        assert disk.exec("echo [$OPENAI_API_KEY]").stdout == "[]\n"
        disk.delete()
        # Changes apply to the next exec; deleted secrets are gone.
        c.secrets.set("OPENAI_API_KEY", SECRET + "-2")
        assert sb.exec("echo $OPENAI_API_KEY").stdout == SECRET + "-2\n"
        c.secrets.delete("OPENAI_API_KEY")
        assert sb.exec("echo [$OPENAI_API_KEY]").stdout == "[]\n"
    c.secrets.set("KEEP_ME", SECRET)
    # Sealed at rest, never in the log; still there after a restart.
    db = sqlite3.connect(f"file:{d.data}/sbxd.db?mode=ro", uri=True)
    assert SECRET not in "\n".join(db.iterdump())
    db.close()
    assert SECRET not in d.log()
    assert os.stat(os.path.join(d.data, "secret-key")).st_mode & 0o077 == 0
    d.stop()
    d.start()
    with c.create(image="busybox") as sb:
        assert sb.exec("echo $KEEP_ME").stdout == SECRET + "\n"


@pytest.mark.parametrize("name", ["lower-dash", "1STARTS_WITH_DIGIT", "SBX_TOKEN", "A" * 129, "HAS%20SPACE"])
def test_bad_secret_names_are_400(d, name):
    status, body = d.raw("PUT", f"/v1/secrets/{name}", body={"value": "x"})
    assert status == 400, body
    assert d.raw("GET", "/v1/secrets")[1]["secrets"] == []


def test_bad_secret_bodies(d):
    for body in ({}, {"value": 5}, {"value": "x", "extra": 1}, "{bad"):
        status, resp = d.raw("PUT", "/v1/secrets/OK_NAME", body=body)
        assert status == 400, (body, resp)
    status, resp = d.raw("DELETE", "/v1/secrets/NOT_THERE")
    assert status == 404


def test_a_sandbox_token_reads_only_its_own_sandbox(d):
    c = d.client()
    a = c.create(image="busybox")
    b = c.create(image="busybox")
    token = a.exec("echo $SBX_TOKEN").stdout.strip()
    assert token.startswith("sbt_" + a.id + "_")
    assert a.exec("echo $SBX_SANDBOX_ID").stdout.strip() == a.id
    auth = {"Authorization": "Bearer " + token}
    status, body = d.raw("GET", f"/v1/sandboxes/{a.id}", headers=auth)
    assert status == 200 and body["id"] == a.id
    # Everything else: 403.
    for method, path, body in (
            ("GET", f"/v1/sandboxes/{b.id}", None), ("GET", "/v1/sandboxes", None),
            ("POST", "/v1/sandboxes", {"image": "busybox"}), ("POST", f"/v1/sandboxes/{a.id}/exec", {"cmd": "id"}),
            ("POST", f"/v1/sandboxes/{b.id}/exec", {"cmd": "id"}), ("DELETE", f"/v1/sandboxes/{a.id}", None),
            ("DELETE", f"/v1/sandboxes/{b.id}", None), ("POST", f"/v1/sandboxes/{a.id}/snapshot", {"name": "x"}),
            ("GET", "/v1/secrets", None), ("PUT", "/v1/secrets/X", {"value": "v"}), ("GET", "/metrics", None),
            ("GET", "/v1/usage", None), ("POST", "/v1/disks", {})):
        status, resp = d.raw(method, path, body=body, headers=auth)
        assert status == 403 and resp["error"]["code"] == "forbidden", (method, path, status, resp)
    assert len(d.sandboxes()) == 2
    # A forged or altered token is 401, not 403.
    for bad in (token[:-1] + ("0" if token[-1] != "0" else "1"), "sbt_" + b.id + token[len("sbt_" + a.id):],
                "sbt_", "sbt_x_y"):
        status, resp = d.raw("GET", f"/v1/sandboxes/{a.id}", headers={"Authorization": "Bearer " + bad})
        assert status == 401, (bad, resp)
    # Dead after delete.
    a.delete()
    status, resp = d.raw("GET", f"/v1/sandboxes/{a.id}", headers=auth)
    assert status == 401
    b.delete()


def test_the_admin_key_is_in_no_sandbox(d):
    c = d.client()
    with c.create(image="busybox") as sb:
        r = sb.exec("env; grep -rs '" + d.key + "' / --exclude-dir=proc --exclude-dir=sys | head -1; true")
        assert d.key not in r.stdout
    with pytest.raises(sbx.AuthError):
        sbx.Client(url=d.url, api_key="sbt_sb-0000000000000000_" + "0" * 48).list()


API_CALL = r'''
import json, socket, sys
def call(method, path, body=None):
    s = socket.socket(socket.AF_UNIX)
    s.connect("/run/sbx/api.sock")
    data = json.dumps(body).encode() if body is not None else b""
    s.sendall(f"{method} {path} HTTP/1.1\r\nHost: sbx\r\nConnection: close\r\nContent-Length: {len(data)}\r\n"
              f"Authorization: Bearer {sys.argv[1]}\r\n\r\n".encode() + data)
    out = b""
    while True:
        b = s.recv(65536)
        if not b:
            break
        out += b
    head, _, payload = out.partition(b"\r\n\r\n")
    return int(head.split()[1]), payload.decode()
results = {}
for name, (m, p) in json.loads(sys.argv[2]).items():
    results[name] = call(m, p)[0]
print(json.dumps(results))
'''


def test_in_sandbox_api_socket_is_scoped_to_its_sandbox(d):
    """/run/sbx/api.sock: code in a sandbox reaches the API as that sandbox, whatever
    credentials it sends (none, or the admin key if it had it)."""
    d.cli("image", "build", "default", timeout=1800)  # from the cache
    c = d.client()
    with c.create(image="default", user="root") as sb, c.create(image="busybox") as other:
        assert "api.sock" in sb.exec("ls /run/sbx").stdout
        # The socket folder is read-only; /run itself is the sandbox's own small tmpfs.
        assert sb.exec("touch /run/sbx/x 2>&1; echo ok > /run/mine && cat /run/mine").stdout.endswith("ok\n")
        sb.files.write("/call.py", API_CALL)
        calls = {
            "own": ["GET", f"/v1/sandboxes/{sb.id}"],
            "other": ["GET", f"/v1/sandboxes/{other.id}"],
            "list": ["GET", "/v1/sandboxes"],
            "create": ["POST", "/v1/sandboxes"],
            "exec": ["POST", f"/v1/sandboxes/{sb.id}/exec"],
            "delete": ["DELETE", f"/v1/sandboxes/{other.id}"],
            "files": ["GET", f"/v1/sandboxes/{sb.id}/files?path=/call.py"],
            "secrets": ["GET", "/v1/secrets"],
        }
        import json
        for creds in ("none", d.key):  # even the admin key does not lift the scope
            r = sb.exec(["python3", "/call.py", creds, json.dumps(calls)])
            got = json.loads(r.stdout)
            assert got == {"own": 200, "other": 403, "list": 403, "create": 403, "exec": 403,
                           "delete": 403, "files": 403, "secrets": 403}, (creds, got, r.stderr)
        # An unprivileged user of the sandbox (a new sandbox's default) reaches it the same
        # way, with the same scope.
        r = sb.exec(["python3", "/call.py", "none", json.dumps({"own": calls["own"], "list": calls["list"]})],
                    user="user")
        assert json.loads(r.stdout) == {"own": 200, "list": 403}, r.stderr
        assert other.refresh().state == "running"
        # The busybox sandbox has the socket too (a /run of its own).
        assert "api.sock" in other.exec("ls /run/sbx").stdout
        # After a restart of sbxd the socket is new, and sandboxes still reach it.
        d.stop()
        d.start()
        r = sb.exec(["python3", "/call.py", "none", json.dumps({"own": calls["own"], "other": calls["other"]})])
        assert json.loads(r.stdout) == {"own": 200, "other": 403}, r.stderr


def test_a_host_process_on_the_sandbox_socket_is_not_anyone(d):
    import socket
    s = socket.socket(socket.AF_UNIX)
    s.connect(os.path.join(d.data, "sandbox-api", "api.sock"))
    s.settimeout(5)
    try:
        # sbxd may close it before the request is even sent: a broken pipe then.
        s.sendall(f"GET /v1/sandboxes HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {d.key}\r\n\r\n".encode())
        answer = s.recv(100)
    except (ConnectionResetError, BrokenPipeError):
        answer = b""
    assert answer == b""  # closed unanswered: not a sandbox of this daemon
    s.close()
