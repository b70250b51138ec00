"""Clients that never authenticate cannot lock anyone out: connections that have made no
authenticated request have a budget of their own (all together and per source address),
the oldest of them make room for new callers, and they wait no longer than a header's
deadline between requests. The admin, the SDK and sbxd's unix socket stay served while
one client holds every unauthenticated slot, and `sbx mcp --http` does the same for its
clients, refusing one without the token at its header."""
import http.client
import os
import re
import socket
import subprocess
import time

from conftest import SBX, Daemon


class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("localhost", timeout=20)
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(20)
        self.sock.connect(self.path)


def _hold(port, n, send=b""):
    held = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=20)
        if send:
            s.sendall(send)
        held.append(s)
    return held


def test_the_admin_is_served_while_a_client_holds_every_unauthenticated_slot():
    d = Daemon("unknown", extra_args=["--max-unauthenticated-connections", "64",
                                      "--max-unauthenticated-per-source", "64", "--max-connections", "256"])
    held = []
    try:
        # Silent connections and half headers, more than the budget: each newer one makes
        # room by closing the oldest.
        held += _hold(d.port, 100)
        held += _hold(d.port, 60, send=b"GET /v1/health HTTP/1.1\r\nHost: x\r\n")
        time.sleep(0.3)
        for _ in range(10):
            assert d.raw("GET", "/v1/sandboxes", timeout=10)[0] == 200  # the admin key
            assert d.raw("GET", "/v1/health", auth=False, timeout=10)[0] == 200  # a health probe
        assert d.client().health()["status"] == "ok"  # the SDK
        c = UnixHTTPConnection(os.path.join(d.data, "sbxd.sock"))
        c.request("GET", "/v1/sandboxes", headers={"Authorization": "Bearer " + d.key})
        assert c.getresponse().status == 200
        c.close()
        # The oldest of the silent ones were closed to make that room.
        closed = 0
        for s in held[:100]:
            s.settimeout(0.01)
            try:
                closed += s.recv(1) == b""
            except socket.timeout:
                pass
            except OSError:
                closed += 1
        assert closed >= 90, closed
        # An authenticated connection kept alive is not among those closed.
        keep = http.client.HTTPConnection("127.0.0.1", d.port, timeout=20)
        keep.request("GET", "/v1/sandboxes", headers={"Authorization": "Bearer " + d.key})
        assert keep.getresponse().read() and True
        held += _hold(d.port, 200)
        keep.request("GET", "/v1/sandboxes", headers={"Authorization": "Bearer " + d.key})
        assert keep.getresponse().status == 200
        keep.close()
        # A connection that made only public requests waits for its next one as long as
        # for a header, not for the kept-alive 120 s.
        probe = http.client.HTTPConnection("127.0.0.1", d.port, timeout=30)
        probe.request("GET", "/v1/health")
        probe.getresponse().read()
        start = time.time()
        probe.sock.settimeout(30)
        assert probe.sock.recv(1) == b""
        assert time.time() - start < 20
        probe.close()
    finally:
        for s in held:
            s.close()
        d.destroy()


def test_sbx_mcp_refuses_at_headers_and_keeps_room_for_its_clients(daemon):
    env = dict(os.environ, SBX_URL=daemon.url, SBX_API_KEY=daemon.key, SBX_MCP_TOKEN="t0ken-" + "x" * 20)
    p = subprocess.Popen([SBX, "mcp", "--http", "127.0.0.1:0"], env=env, stderr=subprocess.PIPE, text=True)
    held = []
    try:
        m = re.search(r"http://127\.0\.0\.1:(\d+)/mcp", p.stderr.readline())
        port = int(m.group(1))
        # A 16 MiB body declared without the token: 401 at once, before any of it comes.
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(b"POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Accept: application/json\r\nContent-Length: 16000000\r\n\r\n")
        assert s.recv(4096).startswith(b"HTTP/1.1 401"), "no answer at headers"
        s.close()
        # Every slot held by clients without the token: one with it still gets in.
        held = _hold(port, 300)
        time.sleep(0.3)
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
        c.request("POST", "/mcp", body='{"jsonrpc":"2.0","id":1,"method":"initialize","params":'
                                       '{"protocolVersion":"2025-06-18","capabilities":{},'
                                       '"clientInfo":{"name":"t","version":"1"}}}',
                  headers={"Authorization": "Bearer " + env["SBX_MCP_TOKEN"], "Content-Type": "application/json",
                           "Accept": "application/json, text/event-stream"})
        r = c.getresponse()
        assert r.status == 200, r.read()
        c.close()
    finally:
        for s in held:
            s.close()
        p.terminate()
        p.wait(timeout=10)


def test_sandboxes_made_by_mcp_tools_get_no_secrets_and_the_servers_network(daemon):
    env = dict(os.environ, SBX_URL=daemon.url, SBX_API_KEY=daemon.key)
    name = "mcp-secret-probe"
    assert daemon.raw("PUT", f"/v1/secrets/{name.upper().replace('-', '_')}", body={"value": "s3cr3t-value"})[0] in (200, 201)
    try:
        calls = [
            {"jsonrpc": "2.0", "id": 1, "method": "initialize",
             "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}},
            {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
             "params": {"name": "run_command", "arguments": {"command": "env; cat /etc/resolv.conf 2>&1 | head -n 1",
                                                             "network": "outbound"}}},
        ]
        import json
        lines = "\n".join(json.dumps(c) for c in calls) + "\n"
        for extra, secret_seen in (([], False), (["--env"], True)):
            out = subprocess.run([SBX, "mcp", "--network", "none", *extra], input=lines, env=env, capture_output=True,
                                 text=True, timeout=120)
            answers = [json.loads(x) for x in out.stdout.splitlines() if x.strip()]
            result = next(a for a in answers if a.get("id") == 2)["result"]
            text = result["structuredContent"]["stdout"]
            assert ("s3cr3t-value" in text) == secret_seen, (extra, text)
        # The fresh sandbox was made with network none whatever the call asked: sbxd's
        # metadata of MCP-made sandboxes says so while one lives (a session sandbox).
        calls[1]["params"] = {"name": "run_command", "arguments": {"command": "true", "session": "mcp-net-probe",
                                                                  "network": "outbound"}}
        lines = "\n".join(json.dumps(c) for c in calls) + "\n"
        subprocess.run([SBX, "mcp", "--network", "none"], input=lines, env=env, capture_output=True, text=True,
                       timeout=120, check=True)
        status, sb = daemon.raw("GET", "/v1/sandboxes/mcp-net-probe")
        assert status == 200, sb
        assert sb["network"]["mode"] == "none" and sb["no_env"] is True, sb
        daemon.raw("DELETE", f"/v1/sandboxes/{sb['id']}")
    finally:
        daemon.raw("DELETE", f"/v1/secrets/{name.upper().replace('-', '_')}")
