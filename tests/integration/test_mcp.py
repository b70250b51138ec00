"""`sbx mcp` driven by the Model Context Protocol's own client (@modelcontextprotocol/sdk
from the npm registry, installed in tests/node by scripts/test.sh), over stdio and over
streamable HTTP: initialize, tools/list, ping and tools/call of every tool, with errors as
isError results and an unknown tool as a protocol error."""
import json
import os
import re
import secrets
import shutil
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from conftest import ROOT, SBX

NODE_DIR = os.path.join(ROOT, "tests", "node")


def drive(mode, target, calls, env, token=None):
    assert shutil.which("node"), "Node.js is required (scripts/test.sh installs it)"
    assert os.path.isdir(os.path.join(NODE_DIR, "node_modules", "@modelcontextprotocol")), \
        "run `npm ci` in tests/node first: scripts/test.sh does"
    argv = ["node", os.path.join(NODE_DIR, "mcp_client.mjs"), mode, target, json.dumps(calls)]
    if token:
        argv.append(token)
    p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def structured(result):
    assert result.get("isError") is False, result
    # The same object as text, for clients that read only text.
    assert json.loads(result["content"][0]["text"]) == result["structuredContent"]
    return result["structuredContent"]


def error_text(result):
    assert result.get("isError") is True, result
    return result["content"][0]["text"]


def env_of(daemon):
    return dict(os.environ, SBX_URL=daemon.url, SBX_API_KEY=daemon.key)


@pytest.fixture()
def http_server(daemon):
    """`sbx mcp --http 127.0.0.1:0` with a token; yields (url, token)."""
    token = secrets.token_hex(16)
    env = dict(env_of(daemon), SBX_MCP_TOKEN=token)
    p = subprocess.Popen([SBX, "mcp", "--http", "127.0.0.1:0"], env=env, stderr=subprocess.PIPE, text=True)
    try:
        line = p.stderr.readline()
        m = re.search(r"(http://127\.0\.0\.1:\d+/mcp)", line)
        assert m, line
        yield m.group(1), token
    finally:
        p.kill()
        p.wait()


def test_stdio_every_tool(daemon, client):
    name = "mcp-" + secrets.token_hex(4)
    disk = "mcp-disk-" + secrets.token_hex(4)
    calls = [
        {"name": "run_command", "arguments": {"command": "echo fresh; echo err >&2; exit 3", "image": "busybox"}},
        {"name": "run_command", "arguments": {"command": ["sh", "-c", "echo kept > /root/note; hostname"],
                                              "session": name, "image": "busybox"}},
        {"name": "run_command", "arguments": {"command": "cat /root/note; hostname", "session": name}},
        {"name": "write_file", "arguments": {"sandbox": name, "path": "/work/a.txt", "content": "héllo\n"}},
        {"name": "read_file", "arguments": {"sandbox": name, "path": "/work/a.txt"}},
        {"name": "write_file", "arguments": {"sandbox": name, "path": "/work/b.bin", "content": "AP8A",
                                             "encoding": "base64"}},
        {"name": "read_file", "arguments": {"sandbox": name, "path": "/work/b.bin"}},
        {"name": "list_files", "arguments": {"sandbox": name, "path": "/work"}},
        {"name": "run_command", "arguments": {"command": "cat", "sandbox": name, "stdin": "in\n", "cwd": "/work",
                                              "env": {"X": "1"}}},
        {"name": "snapshot", "arguments": {"sandbox": name, "name": name + "-snap"}},
        {"name": "create_sandbox", "arguments": {"from": name + "-snap", "name": name + "-2"}},
        {"name": "run_command", "arguments": {"command": "cat /root/note /work/a.txt", "sandbox": name + "-2"}},
        {"name": "run_on_disk", "arguments": {"disk": disk, "command": "echo one >> log; wc -l < log",
                                              "image": "busybox", "size_mb": 64}},
        {"name": "run_on_disk", "arguments": {"disk": disk, "command": "echo two >> log; cat log",
                                              "image": "busybox"}},
        {"name": "list_sandboxes", "arguments": {}},
        {"name": "delete_sandbox", "arguments": {"sandbox": name}},
        {"name": "delete_sandbox", "arguments": {"sandbox": name + "-2"}},
        # Errors are results the model can read, never a crash.
        {"name": "run_command", "arguments": {"command": "true", "sandbox": name}},
        {"name": "run_command", "arguments": {"sandbox": name}},
        {"name": "run_command", "arguments": {"command": "sleep 5", "image": "busybox", "timeout_seconds": 1}},
        {"name": "no_such_tool", "arguments": {}},
        {"name": "run_command", "arguments": {"command": "id -u; pwd", "image": "busybox", "user": "1234"}},
        # The code interpreter, in a session's sandbox: state lasts between calls.
        {"name": "run_code", "arguments": {"code": "import math\nr = 2\nprint('area')\nmath.pi * r ** 2",
                                           "session": name + "-code", "image": "default"}},
        {"name": "run_code", "arguments": {"code": "r * 10", "session": name + "-code"}},
        {"name": "run_code", "arguments": {"code": "1"}},
        {"name": "delete_sandbox", "arguments": {"sandbox": name + "-code"}},
    ]
    before = {s.id for s in client.list()}
    out = drive("stdio", SBX, calls, env_of(daemon))
    try:
        assert out["server"]["name"] == "sbx"
        assert out["capabilities"]["tools"] is not None
        assert out["ping"] == {}
        names = {t["name"] for t in out["tools"]}
        assert names == {"create_sandbox", "run_command", "run_code", "run_on_disk", "read_file", "write_file",
                         "list_files", "snapshot", "delete_sandbox", "list_sandboxes"}
        for t in out["tools"]:
            assert t["description"] and t["inputSchema"]["type"] == "object", t
        r = out["results"]
        fresh = structured(r[0])
        assert (fresh["stdout"], fresh["stderr"], fresh["exit_code"]) == ("fresh\n", "err\n", 3)
        assert fresh["duration_ms"] > 0 and "execute_ms" in fresh["timing"]
        first, second = structured(r[1]), structured(r[2])
        assert first["sandbox"] == second["sandbox"]
        assert second["stdout"] == "kept\n" + first["stdout"]
        assert structured(r[3])["size"] == len("héllo\n".encode())
        assert structured(r[4]) == {"path": "/work/a.txt", "size": 7, "content": "héllo\n", "encoding": "text"}
        assert structured(r[6])["encoding"] == "base64" and structured(r[6])["content"] == "AP8A"
        assert [e["name"] for e in structured(r[7])["entries"]] == ["a.txt", "b.bin"]
        assert structured(r[8])["stdout"] == "in\n"
        assert structured(r[9])["name"] == name + "-snap"
        assert structured(r[10])["name"] == name + "-2"
        assert structured(r[11])["stdout"] == "kept\nhéllo\n"
        one = structured(r[12])
        assert (one["stdout"], one["disk"]) == ("1\n", disk)
        assert structured(r[13])["stdout"] == "one\ntwo\n"
        listed = {s["name"] for s in structured(r[14])["sandboxes"]}
        assert {name, name + "-2"} <= listed
        assert structured(r[15])["type"] == "sandbox.deleted"
        assert "not found" in error_text(r[17])
        assert "command is required" in error_text(r[18])
        timed = structured(r[19])
        assert timed["timed_out"] is True and timed["exit_code"] == 124
        assert "unknown tool" in r[20]["thrown"] and r[20]["code"] == -32602
        assert structured(r[21])["stdout"] == "1234\n/\n"
        area = structured(r[22])
        assert area["results"][0]["text"] == "12.566370614359172" and area["logs"]["stdout"] == ["area\n"], area
        again = structured(r[23])
        assert again["results"][0]["text"] == "20" and again["sandbox"] == area["sandbox"]
        assert "give sandbox or session" in error_text(r[24])
        assert structured(r[25])["type"] == "sandbox.deleted"
        # The fresh sandboxes are gone: only what the calls kept on purpose is left.
        left = {s.id for s in client.list()} - before
        assert left == set(), left
    finally:
        for s in client.list():
            if s.name in (name, name + "-2", name + "-code"):
                s.delete()
        daemon.raw("DELETE", f"/v1/snapshots/{name}-snap")
        daemon.raw("DELETE", f"/v1/disks/{disk}")


def test_http_transport_sessions_and_token(daemon, client, http_server):
    url, token = http_server
    name = "mcp-h-" + secrets.token_hex(4)
    calls = [
        {"name": "create_sandbox", "arguments": {"image": "busybox", "name": name}},
        # Calls at once: each request runs on its own, so the sleeps overlap.
        [{"name": "run_command", "arguments": {"command": "sleep 1; echo a", "sandbox": name}},
         {"name": "run_command", "arguments": {"command": "sleep 1; echo b", "sandbox": name}}],
        {"name": "delete_sandbox", "arguments": {"sandbox": name}},
    ]
    out = drive("http", url, calls, env_of(daemon), token=token)
    assert out["server"]["name"] == "sbx" and out["session"]
    r = out["results"]
    assert structured(r[0])["name"] == name
    assert sorted(structured(x)["stdout"] for x in r[1]) == ["a\n", "b\n"]
    # The two 1 s commands overlapped: one after the other they take 2 s or more.
    assert out["timings"][1] < 1900, out["timings"]
    assert structured(r[2])["type"] == "sandbox.deleted"

    def post(body, headers):
        req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST", headers=dict(
            {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}, **headers))
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return resp.status, dict(resp.headers), resp.read()
        except urllib.error.HTTPError as e:
            return e.code, dict(e.headers), e.read()

    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2024-11-05", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
    auth = {"Authorization": "Bearer " + token}
    # No token, a wrong one, a page of another origin: refused before anything runs.
    assert post(init, {})[0] == 401
    assert post(init, {"Authorization": "Bearer x" + token})[0] == 401
    assert post(init, dict(auth, Origin="http://evil.example"))[0] == 403
    status, headers, body = post(init, auth)
    assert status == 200, body
    assert json.loads(body)["result"]["protocolVersion"] == "2024-11-05"  # the client's, which it speaks
    sid = headers["Mcp-Session-Id"]
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    assert post(listing, auth)[0] == 400  # no session
    assert post(listing, dict(auth, **{"Mcp-Session-Id": "nope"}))[0] == 404
    assert post(listing, dict(auth, **{"Mcp-Session-Id": sid, "MCP-Protocol-Version": "1999-01-01"}))[0] == 400
    status, _, body = post(listing, dict(auth, **{"Mcp-Session-Id": sid}))
    assert status == 200 and len(json.loads(body)["result"]["tools"]) == 10
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert post(note, dict(auth, **{"Mcp-Session-Id": sid}))[0] == 202
    status, _, body = post({"jsonrpc": "2.0", "id": 3, "method": "nope"}, dict(auth, **{"Mcp-Session-Id": sid}))
    assert json.loads(body)["error"]["code"] == -32601
    req = urllib.request.Request(url, method="DELETE", headers=dict(auth, **{"Mcp-Session-Id": sid}))
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert resp.status == 204
    assert post(listing, dict(auth, **{"Mcp-Session-Id": sid}))[0] == 404
    assert name not in {s.name for s in client.list()}


def test_http_makes_a_token_when_given_none(daemon):
    p = subprocess.Popen([SBX, "mcp", "--http", "127.0.0.1:0"], env=env_of(daemon), stderr=subprocess.PIPE, text=True)
    try:
        url = re.search(r"(http://127\.0\.0\.1:\d+/mcp)", p.stderr.readline()).group(1)
        token = re.search(r"Bearer ([0-9a-f]{32})", p.stderr.readline()).group(1)
        init = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                           "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                                      "clientInfo": {"name": "t", "version": "1"}}}).encode()
        h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        try:
            urllib.request.urlopen(urllib.request.Request(url, data=init, headers=h), timeout=30)
            raise AssertionError("no token was needed")
        except urllib.error.HTTPError as e:
            assert e.code == 401 and e.headers["WWW-Authenticate"] == "Bearer"
        req = urllib.request.Request(url, data=init, headers=dict(h, Authorization="Bearer " + token))
        with urllib.request.urlopen(req, timeout=30) as resp:
            assert resp.status == 200 and json.loads(resp.read())["result"]["serverInfo"]["name"] == "sbx"
    finally:
        p.kill()
        p.wait()


def test_http_refuses_an_open_address_without_a_token(daemon):
    p = subprocess.run([SBX, "mcp", "--http", "0.0.0.0:0"], env=env_of(daemon), capture_output=True, text=True,
                       timeout=30)
    assert p.returncode == 2 and "needs a token" in p.stderr


def test_stdio_bad_lines_and_sbxd_down(tmp_path):
    """A line that is not JSON gets a parse error and the server goes on; with no sbxd, a
    tool call is an isError result; end of input ends the server."""
    env = dict(os.environ, SBX_URL="http://127.0.0.1:9", SBX_API_KEY="k")
    lines = [
        "not json",
        json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                    "params": {"protocolVersion": "2099-01-01", "capabilities": {}, "clientInfo": {"name": "t"}}}),
        json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                    "params": {"name": "run_command", "arguments": {"command": "true", "image": "busybox"}}}),
        # Malformed members of every kind: an error each, never the end of the server.
        json.dumps({"jsonrpc": 2, "id": 3, "method": "ping"}),
        json.dumps({"jsonrpc": "2.0", "id": 4, "method": "initialize", "params": {"protocolVersion": 1}}),
        json.dumps({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": 7}}),
        json.dumps({"jsonrpc": "2.0", "id": 6, "method": "tools/call",
                    "params": {"name": "run_command", "arguments": {"command": 5}}}),
        json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": -1, "message": "a response"}}),
        json.dumps([1, 2]),
        json.dumps({"jsonrpc": "2.0", "id": 7, "method": "ping"}),
    ]
    p = subprocess.run([SBX, "mcp"], input="\n".join(lines) + "\n", env=env, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stderr
    out = [json.loads(x) for x in p.stdout.splitlines()]
    assert out[0]["error"]["code"] == -32700 and out[0]["id"] is None
    by_id = {m["id"]: m for m in out[1:]}
    assert by_id[1]["result"]["protocolVersion"] == "2025-11-25"  # not the client's: it gets the newest
    assert by_id[2]["result"]["isError"] is True
    assert "cannot be reached" in by_id[2]["result"]["content"][0]["text"]
    assert by_id[3]["error"]["code"] == -32600
    assert by_id[4]["result"]["protocolVersion"] == "2025-11-25"
    assert by_id[5]["error"]["code"] == -32602
    assert by_id[6]["result"]["isError"] is True
    assert by_id[7]["result"] == {}
    assert len(out) == 9  # the response got no answer; the batch [1, 2] one error
