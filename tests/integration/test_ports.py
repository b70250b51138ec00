"""The port proxy: HTTP and WebSocket to a server inside a sandbox, by path and by host,
through the sandbox's agent (which only ever dials that sandbox's own loopback)."""
import base64
import os
import socket
import time

import pytest

SERVER = r'''
import base64, hashlib, json, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
class H(BaseHTTPRequestHandler):
    def do_GET(self):
        if self.headers.get("Upgrade", "").lower() == "websocket":
            key = self.headers["Sec-WebSocket-Key"]
            acc = base64.b64encode(hashlib.sha1((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest()).decode()
            self.send_response(101)
            self.send_header("Upgrade", "websocket")
            self.send_header("Connection", "Upgrade")
            self.send_header("Sec-WebSocket-Accept", acc)
            self.end_headers()
            self.wfile.flush()
            f = self.rfile
            while True:
                h = f.read(2)
                if len(h) < 2:
                    return
                op, n = h[0] & 15, h[1] & 127
                if n == 126:
                    n = int.from_bytes(f.read(2), "big")
                mask = f.read(4)
                data = bytes(b ^ mask[i % 4] for i, b in enumerate(f.read(n)))
                if op == 8:
                    return
                reply = b"echo:" + data
                self.wfile.write(bytes([0x81, len(reply)]) + reply)
                self.wfile.flush()
        self.reply({"path": self.path, "headers": dict(self.headers)})
    def do_POST(self):
        n = int(self.headers.get("Content-Length", 0))
        self.reply({"path": self.path, "body": self.rfile.read(n).decode(), "headers": dict(self.headers)})
    def reply(self, obj):
        b = json.dumps(obj).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)
    def log_message(self, *a):
        pass
ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
'''


def request(d, method, path, body=None, headers=None, token=None, auth=True):
    """d.raw, with a sandbox token instead of the admin key when given."""
    h = dict(headers or {})
    if token:
        h["Authorization"] = "Bearer " + token
    return d.raw(method, path, body=body, headers=h, auth=auth)


def start_server(sb, port):
    sb.files.write("/srv/server.py", SERVER)
    sb.exec(f"nohup python3 /srv/server.py {port} >/srv/log 2>&1 &")
    for _ in range(100):
        if sb.exec(f"python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}))' 2>/dev/null && echo up").stdout == "up\n":
            return
        time.sleep(0.05)
    raise AssertionError("the server in the sandbox did not start: " + sb.files.read("/srv/log"))


@pytest.fixture(scope="module")
def served(daemon):
    c = daemon.client()
    sb = c.create(image="default", user="root")
    start_server(sb, 8000)
    yield sb
    sb.delete()


def test_http_by_path_and_by_host_without_credentials_passed_on(daemon, served):
    sid = served.id
    status, body = request(daemon, "GET", f"/v1/sandboxes/{sid}/ports/8000/some/path?q=1&r=%20x")
    assert status == 200, body
    assert body["path"] == "/some/path?q=1&r=%20x"
    assert "Authorization" not in body["headers"]  # the admin key stays with sbxd
    status, body = request(daemon, "GET", f"/v1/sandboxes/{sid}/ports/8000")
    assert status == 200 and body["path"] == "/"
    status, body = request(daemon, "POST", f"/v1/sandboxes/{sid}/ports/8000/echo", body=b"payload-\xc3\xa9",
                           headers={"Content-Type": "text/plain", "X-Custom": "kept"})
    assert status == 200 and body["body"] == "payload-é" and body["headers"]["X-Custom"] == "kept", body
    # By host: PORT-ID.<proxy domain>, any path.
    status, body = request(daemon, "GET", "/any/where?x=y", headers={"Host": f"8000-{sid}.sbx.localhost:{daemon.port}"})
    assert status == 200 and body["path"] == "/any/where?x=y", body
    # Many requests in a row, each on its own connection, all answered.
    for i in range(50):
        status, body = request(daemon, "GET", f"/v1/sandboxes/{sid}/ports/8000/n{i}")
        assert status == 200 and body["path"] == f"/n{i}"


def test_auth_and_bad_targets(daemon, served, client):
    sid = served.id
    own = served.exec("echo -n $SBX_TOKEN").stdout
    assert request(daemon, "GET", f"/v1/sandboxes/{sid}/ports/8000/", token=own)[0] == 200
    status, body = request(daemon, "GET", f"/v1/sandboxes/{sid}/ports/8000/", auth=False)
    assert status == 401, body
    status, body = request(daemon, "GET", f"/v1/sandboxes/{sid}/ports/8000/", token="sbt_forged_0000")
    assert status == 401, body
    with client.create(image="busybox") as other:
        theirs = other.exec("echo -n $SBX_TOKEN").stdout
        status, body = request(daemon, "GET", f"/v1/sandboxes/{sid}/ports/8000/", token=theirs)
        assert status == 403 and body["error"]["code"] == "forbidden", body
        # Nothing listens there: 503, not a hang.
        status, body = request(daemon, "GET", f"/v1/sandboxes/{other.id}/ports/8000/")
        assert status == 503 and body["error"]["code"] == "unavailable", body
    for bad in ("0", "65536", "abc", "80x", "-1"):
        status, body = request(daemon, "GET", f"/v1/sandboxes/{sid}/ports/{bad}/")
        assert status == 400, (bad, body)
    status, body = request(daemon, "GET", "/v1/sandboxes/NOT..valid/ports/8000/")
    assert status == 400
    status, body = request(daemon, "GET", "/v1/sandboxes/nosuch/ports/8000/")
    assert status == 404
    status, body = request(daemon, "GET", "/", headers={"Host": f"x-{sid}.sbx.localhost"})
    assert status == 400


def test_proxy_never_dials_the_host(daemon, client):
    """A server on the host's loopback is not reachable through any sandbox's port."""
    host = socket.socket()
    host.bind(("127.0.0.1", 0))
    host.listen(8)
    host.settimeout(0.5)
    port = host.getsockname()[1]
    try:
        with client.create(image="busybox") as sb:
            status, body = request(daemon, "GET", f"/v1/sandboxes/{sb.id}/ports/{port}/")
            assert status == 503, body
            with pytest.raises(socket.timeout):
                host.accept()
    finally:
        host.close()


def test_websocket_through_the_proxy(daemon, served):
    s = socket.create_connection(("127.0.0.1", daemon.port), timeout=10)
    key = base64.b64encode(os.urandom(16)).decode()
    s.sendall((f"GET /v1/sandboxes/{served.id}/ports/8000/ws HTTP/1.1\r\nHost: x\r\n"
               f"Authorization: Bearer {daemon.key}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
    head = b""
    while b"\r\n\r\n" not in head:
        head += s.recv(4096)
    assert head.startswith(b"HTTP/1.0 101") or head.startswith(b"HTTP/1.1 101"), head
    rest = head.split(b"\r\n\r\n", 1)[1]
    for msg in (b"hello", b"second message", b"x" * 100):
        mask = os.urandom(4)
        frame = bytes([0x81, 0x80 | len(msg)]) + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(msg))
        s.sendall(frame)
        want = b"echo:" + msg
        buf = rest
        while len(buf) < 2 + len(want):
            buf += s.recv(4096)
        assert buf[:2] == bytes([0x81, len(want)]) and buf[2:2 + len(want)] == want
        rest = buf[2 + len(want):]
    s.sendall(bytes([0x88, 0x80]) + os.urandom(4))  # close
    s.close()


def test_port_request_wakes_a_paused_sandbox_and_counts_as_activity(daemon, served):
    served.pause()
    status, body = request(daemon, "GET", f"/v1/sandboxes/{served.id}/ports/8000/woke")
    assert status == 200 and body["path"] == "/woke"
    assert served.refresh().state == "running"
    assert "port_traffic" in served.data["idle_activity"]


def test_sdk_get_url_and_cli_port(daemon, served):
    url = served.get_url(8000, "/x?y=1")
    assert url == f"{daemon.url}/v1/sandboxes/{served.id}/ports/8000/x?y=1"
    status, body = request(daemon, "GET", url[len(daemon.url):])
    assert status == 200 and body["path"] == "/x?y=1"
    out = daemon.cli("port", served.id, "8000").stdout.split()
    assert out == [f"{daemon.url}/v1/sandboxes/{served.id}/ports/8000/",
                   f"http://8000-{served.id}.sbx.localhost:{daemon.port}/"]
    assert daemon.cli("port", "nosuch", "8000", check=False).returncode != 0


def test_public_sandboxes_need_no_credentials(daemon, client):
    sb = client.create(image="default", user="root", public=True)
    try:
        assert sb.data["public"] is True
        start_server(sb, 8001)
        status, body = request(daemon, "GET", f"/v1/sandboxes/{sb.id}/ports/8001/open", auth=False)
        assert status == 200 and body["path"] == "/open"
        status, body = request(daemon, "GET", "/x", auth=False, headers={"Host": f"8001-{sb.id}.sbx.localhost"})
        assert status == 200
        # Only the ports: the rest of the API still wants a key.
        assert request(daemon, "GET", f"/v1/sandboxes/{sb.id}", auth=False)[0] == 401
        status, body = daemon.raw("PATCH", f"/v1/sandboxes/{sb.id}", body={"public": False})
        assert status == 200 and body["public"] is False
        assert request(daemon, "GET", f"/v1/sandboxes/{sb.id}/ports/8001/", auth=False)[0] == 401
        assert daemon.raw("PATCH", f"/v1/sandboxes/{sb.id}", body={"public": "yes"})[0] == 400
    finally:
        sb.delete()


def test_signed_urls(daemon, served, client):
    """A signed URL opens one port of one sandbox, without credentials, until it expires;
    its token never reaches the sandbox."""
    import json
    import urllib.error
    import urllib.request

    def get(url, headers=None):
        req = urllib.request.Request(url, headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, json.loads(r.read()), r.headers
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read()), e.headers

    sid = served.id
    url = served.get_url(8000, "/p?a=1", signed=True, ttl_seconds=600)
    assert "sbx_token=" in url
    status, body, _ = get(url)
    assert status == 200 and body["path"] == "/p?a=1", body  # the token is sbxd's, not passed on
    # Another port, another sandbox, a changed token: refused.
    token = url.split("sbx_token=")[1]
    assert get(url.replace("/ports/8000/", "/ports/8001/"))[0] == 401
    with client.create(image="busybox") as other:
        assert get(url.replace(sid, other.id))[0] == 401
        granted = other.get_url(8000, signed=True)
    assert get(granted)[0] == 401  # its sandbox is gone: its grants are dead
    assert get(url[:-1] + ("0" if url[-1] != "0" else "1"))[0] == 401
    assert get(url.replace(token, token.split(".")[0] + "9." + token.split(".")[1]))[0] == 401  # a later expiry
    # Expired.
    status, g = daemon.raw("POST", f"/v1/sandboxes/{sid}/port-urls", body={"port": 8000, "ttl_seconds": 1})
    assert status == 201 and g["url"].endswith(g["path"]) and g["type"] == "port.url", g
    time.sleep(2.1)
    assert get(f"http://127.0.0.1:{daemon.port}{g['path']}")[0] == 401
    # By host: the first answer sets a cookie for that host, which then stands in for the
    # token; the sandbox sees neither, but its own cookies pass.
    status, g = daemon.raw("POST", f"/v1/sandboxes/{sid}/port-urls", body={"port": 8000})
    assert g["host_url"].startswith(f"http://8000-{sid}.sbx.localhost:{daemon.port}/?sbx_token=")
    host = f"8000-{sid}.sbx.localhost:{daemon.port}"
    status, body, headers = get(f"http://127.0.0.1:{daemon.port}/?sbx_token={g['token']}", {"Host": host})
    assert status == 200 and body["path"] == "/", body
    cookie = headers["Set-Cookie"]
    assert cookie.startswith(f"sbx_token={g['token']};") and "HttpOnly" in cookie, cookie
    status, body, _ = get(f"http://127.0.0.1:{daemon.port}/next",
                          {"Host": host, "Cookie": f"app=1; sbx_token={g['token']}"})
    assert status == 200 and body["headers"].get("Cookie") == "app=1", body
    # A forged token beside the admin key: let in by the key, no cookie set from it.
    forged = "9" * 30 + "." + "0" * 40
    status, body = request(daemon, "GET", f"/?sbx_token={forged}", headers={"Host": host})
    assert status == 200 and body["path"] == "/", body
    status, _, headers = get(f"http://127.0.0.1:{daemon.port}/?sbx_token={forged}",
                             {"Host": host, "Authorization": "Bearer " + daemon.key})
    assert status == 200 and headers.get("Set-Cookie") is None
    assert get(f"http://127.0.0.1:{daemon.port}/?sbx_token={forged}", {"Host": host})[0] == 401
    # The cookie counts only for the page's own origin: not for a request that a page of
    # another sandbox (the same site) makes, nor a cross-origin one.
    for extra in ({"Sec-Fetch-Site": "same-site"}, {"Sec-Fetch-Site": "cross-site"},
                  {"Origin": f"http://3000-other.sbx.localhost:{daemon.port}"}):
        assert get(f"http://127.0.0.1:{daemon.port}/", {"Host": host, "Cookie": f"sbx_token={g['token']}",
                                                        **extra})[0] == 401, extra
    status, body, _ = get(f"http://127.0.0.1:{daemon.port}/", {
        "Host": host, "Sec-Fetch-Site": "same-origin", "Origin": f"http://{host}",
        "Cookie": f"sbx_token=junk; sbx_token={g['token']}",  # a junk one set by another page does not lock it out
        "Referer": f"http://{host}/?sbx_token={g['token']}"})
    assert status == 200 and "Referer" not in body["headers"], body  # the grant in a Referer stays out
    _, _, headers = get(f"http://127.0.0.1:{daemon.port}/?sbx_token={g['token']}", {"Host": host})
    assert headers["Referrer-Policy"] == "no-referrer"
    # The cookie works by host only (path routing is the API's origin).
    assert get(f"http://127.0.0.1:{daemon.port}/v1/sandboxes/{sid}/ports/8000/",
               {"Cookie": f"sbx_token={g['token']}"})[0] == 401
    # Making one: the admin key only, a port, a ttl up to 7 days, a sandbox that exists.
    own = served.exec("echo -n $SBX_TOKEN").stdout
    assert request(daemon, "POST", f"/v1/sandboxes/{sid}/port-urls", body={"port": 8000}, token=own)[0] == 403
    for bad in ({}, {"port": 0}, {"port": 70000}, {"port": 80, "ttl_seconds": 0},
                {"port": 80, "ttl_seconds": 604801}, {"port": 80, "extra": 1}):
        assert daemon.raw("POST", f"/v1/sandboxes/{sid}/port-urls", body=bad)[0] == 400, bad
    assert daemon.raw("POST", "/v1/sandboxes/sb-0000000000000000/port-urls", body={"port": 80})[0] == 404


def test_wait_for_port(served):
    served.exec("nohup sh -c 'sleep 1; exec python3 /srv/server.py 8123' >/dev/null 2>&1 &")
    t0 = time.time()
    assert served.wait_for_port(8123, timeout=30) is served
    assert time.time() - t0 > 0.5
    assert served.exec("python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", 8123))'").exit_code == 0
    with pytest.raises(TimeoutError):
        served.wait_for_port(8124, timeout=0.5)
