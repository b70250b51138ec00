"""Bad input gets the contract's error code and changes nothing; every route needs a key."""
import json
import os
import re

import pytest


def documented_routes():
    """Every route of the OpenAPI document (which a unit test holds equal to the router's)."""
    with open(os.path.join(os.path.dirname(__file__), "..", "..", "docs", "openapi.json")) as f:
        doc = json.load(f)
    out = []
    for path, ops in doc["paths"].items():
        for method in ops:
            if path in ("/v1/health", "/v1/openapi.json"):
                continue  # open by design
            out.append((method.upper(), re.sub(r"\{[a-z_]+\}", "x-1", path)))
    return out


ROUTES = documented_routes()


@pytest.mark.parametrize("method,path", ROUTES)
def test_every_route_needs_the_key(daemon, method, path):
    if path.startswith(("/health", "/process.", "/filesystem.", "/files")):
        # E2B's data plane: only the named sandbox's own access token, never the API key.
        for extra in ({}, {"X-Access-Token": "sba_wrong"}, {"X-Access-Token": daemon.key},
                      {"Authorization": "Bearer " + daemon.key}, {"X-API-KEY": daemon.key}):
            status, body = daemon.raw(method, path, headers={"E2b-Sandbox-Id": "x-1", **extra}, auth=False)
            assert status == 401 and body["code"] == 401, (extra, body)
        return
    status, body = daemon.raw(method, path, auth=False)
    if path.startswith(("/sandboxes", "/v2/")):  # E2B's API: its error shape
        assert status == 401 and body["code"] == 401, body
    else:
        assert status == 401 and body["error"]["code"] == "unauthorized"
    status, body = daemon.raw(method, path, headers={"Authorization": "Bearer sbx_wrong"})
    assert status == 401
    status, body = daemon.raw(method, path, headers={"Authorization": daemon.key})
    assert status == 401


def test_key_file_is_private_and_key_stored_hashed(daemon):
    import os
    import sqlite3
    assert os.stat(os.path.join(daemon.data, "api-key")).st_mode & 0o077 == 0
    db = sqlite3.connect(f"file:{daemon.data}/sbxd.db?mode=ro", uri=True)
    dump = "\n".join(db.iterdump())
    assert daemon.key not in dump
    assert daemon.key not in daemon.log()


BAD_CREATES = [
    "{not json", "[]", '"x"', '{"type": "huge"}', '{"type": 5}', '{"name": "Bad Name"}',
    '{"name": "a/b"}', '{"name": ".."}', '{"name": "' + "a" * 10000 + '"}', '{"name": "a\\u0000b"}',
    '{"ttl_seconds": -1}', '{"ttl_seconds": 0}', '{"ttl_seconds": 9223372036854775808}',
    '{"ttl_seconds": 1e400}', '{"ttl_seconds": 1e100}', '{"resources": {"cpus": -1e300}}', '{"ttl_seconds": "10"}', '{"unknown_field": 1}', '{"isolation": "chroot"}',
    '{"resources": {"memory_mb": -5}}', '{"resources": {"pids": 1}}', '{"resources": {"cpus": 0}}',
    '{"env": {"A=B": "x"}}', '{"env": {"A": 1}}', '{"metadata": []}', '{"network": {"mode": "everything"}}',
    '{"no_env": "yes"}', '{"image": "../../etc"}', '{"ttl_action": "explode"}', '{"ttl_action": 1}',
    '{"idle_timeout_seconds": -1}', '{"idle_timeout_seconds": 1e400}', '{"idle_timeout_seconds": 99999999999}',
    '{"auto_resume": "yes"}', '{"no_new_privs": "no"}', '{"no_new_privs": 0}', '{"name": ""}', '{"name": "-x"}', '{"from": ""}', '{"name": 7}',
]


@pytest.mark.parametrize("path,body", [
    ("/v1/disks", {"name": ""}), ("/v1/disks", {"name": "Bad Name"}),
    ("{sandbox}/snapshot", {"name": ""}), ("{sandbox}/snapshot", {"name": "UPPER"}),
    ("{sandbox}/snapshot", {}),
])
def test_a_name_present_but_empty_or_invalid_is_400(daemon, client, path, body):
    """A name given but empty or invalid is refused, never taken as "no name"."""
    def state():
        return ({(s["id"], s["state"]) for s in daemon.sandboxes()},
                daemon.raw("GET", "/v1/disks")[1], daemon.raw("GET", "/v1/snapshots")[1])
    with client.create(image="busybox") as sb:
        before = state()
        status, resp = daemon.raw("POST", path.replace("{sandbox}", f"/v1/sandboxes/{sb.id}"), body=body)
        assert status == 400, resp
        assert resp["error"]["code"] == "invalid_request" and "name" in resp["error"]["message"]
        assert state() == before


@pytest.mark.parametrize("body", BAD_CREATES)
def test_bad_create_is_400_and_changes_nothing(daemon, body):
    before = daemon.sandboxes()
    status, resp = daemon.raw("POST", "/v1/sandboxes", body=body, headers={"Content-Type": "application/json"})
    assert status == 400, resp
    assert resp["error"]["code"] == "invalid_request" and resp["error"]["message"]
    assert daemon.sandboxes() == before


def test_bad_exec_and_ids(daemon):
    c = daemon.client()
    with c.create(image="busybox", name="survivor") as sb:
        sb.exec("echo keep > /root/k", check=True)
        cases = [
            ("POST", f"/v1/sandboxes/{sb.id}/exec", "{bad", 400),
            ("POST", f"/v1/sandboxes/{sb.id}/exec", "{}", 400),
            ("POST", f"/v1/sandboxes/{sb.id}/exec", '{"cmd": ""}', 400),
            ("POST", f"/v1/sandboxes/{sb.id}/exec", '{"cmd": []}', 400),
            ("POST", f"/v1/sandboxes/{sb.id}/exec", '{"cmd": [1]}', 400),
            ("POST", f"/v1/sandboxes/{sb.id}/exec", '{"cmd": "true", "timeout_seconds": 0}', 400),
            ("POST", f"/v1/sandboxes/{sb.id}/exec", '{"cmd": "true", "timeout_seconds": -1}', 400),
            ("POST", f"/v1/sandboxes/{sb.id}/exec", '{"cmd": "true", "shell": true}', 400),
            ("POST", f"/v1/sandboxes/{sb.id}/exec", '{"cmd": ["a\\u0000b"]}', 400),
            ("POST", "/v1/sandboxes/BAD/exec", '{"cmd": "true"}', 400),
            ("POST", "/v1/sandboxes/..%2f..%2fetc/exec", '{"cmd": "true"}', 400),
            ("GET", "/v1/sandboxes/" + "a" * 10000, None, 400),
            ("POST", "/v1/sandboxes/sb-0000000000000000/exec", '{"cmd": "true"}', 404),
            ("DELETE", "/v1/sandboxes/sb-0000000000000000", None, 404),
            ("POST", "/v1/sandboxes", '{"name": "survivor", "image": "busybox"}', 409),
            ("POST", "/v1/sandboxes", '{"image": "no-such-image"}', 404),
            ("POST", "/v1/sandboxes", '{"from": "no-such-snapshot"}', 404),
            ("GET", "/v1/nothing-here", None, 404),
        ]
        before = daemon.sandboxes()
        for method, path, body, want in cases:
            status, resp = daemon.raw(method, path, body=body, headers={"Content-Type": "application/json"})
            assert status == want, (method, path, body, resp)
            assert isinstance(resp, dict) and resp["error"]["code"], resp
        assert [s["id"] for s in daemon.sandboxes()] == [s["id"] for s in before]
        assert sb.exec("cat /root/k").stdout == "keep\n"


def test_oversized_and_malformed_http(daemon):
    import socket
    # A body over the limit: 413, connection closed, daemon alive.
    s = socket.create_connection(("127.0.0.1", daemon.port))
    s.sendall(b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + daemon.key.encode() +
              b"\r\nContent-Length: 999999999999\r\n\r\n")
    assert b" 413 " in s.recv(4096)
    s.close()
    # Request smuggling shapes: both Content-Length and chunked, or two lengths.
    for head in (b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n",
                 b"Content-Length: 5\r\nContent-Length: 6\r\n"):
        s = socket.create_connection(("127.0.0.1", daemon.port))
        s.sendall(b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\n" + head + b"\r\n0\r\n\r\n")
        reply = s.recv(4096)
        assert b" 400 " in reply, reply
        s.close()
    s = socket.create_connection(("127.0.0.1", daemon.port))
    s.sendall(b"\x00\x01garbage\r\n\r\n")
    assert b" 400 " in s.recv(4096)
    s.close()
    assert daemon.raw("GET", "/v1/health", auth=False)[0] == 200
