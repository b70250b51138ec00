"""The daemon's HTTP listener under hostile clients: the port proxy never hands a client's
connection to a sandbox, bodies are refused before they are read, deadlines and caps hold,
the accept loop does not spin at the fd limit, and framing is strict (RFC 9112)."""
import http.client
import os
import resource
import socket
import time

import pytest

from conftest import Daemon

# A sandbox server that answers every request on a connection and keeps it open (as a
# hostile one would, hoping for the client's next requests), and logs every byte it gets.
GREEDY = r'''
import socket, sys, threading
port = int(sys.argv[1])
log = open("/srv/seen", "ab", 0)
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", port))
s.listen(64)
def serve(c):
    c.settimeout(10)
    buf = b""
    try:
        while True:
            d = c.recv(65536)
            if not d:
                return
            log.write(d)
            buf += d
            while b"\r\n\r\n" in buf:
                head, _, buf = buf.partition(b"\r\n\r\n")
                if b"/switch" in head.split(b"\r\n")[0]:
                    c.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: evil\r\nConnection: Upgrade\r\n\r\n")
                else:
                    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\nok")
    except Exception:
        pass
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
'''


def read_response(s, timeout=10):
    """One HTTP response with a Content-Length body from socket `s`: (head, body)."""
    s.settimeout(timeout)
    data = b""
    while b"\r\n\r\n" not in data:
        d = s.recv(65536)
        if not d:
            raise AssertionError("closed before a response: %r" % data)
        data += d
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"content-length":
            length = int(v)
    while len(body) < length:
        d = s.recv(65536)
        if not d:
            break
        body += d
    return head.decode(), body


def rest_of(s, timeout=5):
    """Everything the server still sends until it closes (b'' if it only closes)."""
    s.settimeout(timeout)
    out = b""
    try:
        while True:
            d = s.recv(65536)
            if not d:
                return out
            out += d
    except (ConnectionResetError, BrokenPipeError):
        return out


@pytest.fixture(scope="module")
def greedy(daemon):
    c = daemon.client()
    sb = c.create(image="default", user="root", ttl_seconds=900)
    sb.files.write("/srv/greedy.py", GREEDY)
    sb.exec("nohup python3 /srv/greedy.py 8100 >/srv/log 2>&1 &")
    for _ in range(100):
        if sb.exec("python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", 8100))' 2>/dev/null && echo up").stdout == "up\n":
            break
        time.sleep(0.05)
    yield sb
    sb.delete()


def seen(sb):
    time.sleep(0.3)
    return sb.files.read_bytes("/srv/seen") if sb.exec("test -f /srv/seen").exit_code == 0 else b""


def test_a_kept_alive_proxied_connection_never_carries_the_clients_next_request(daemon, greedy):
    sb = greedy
    sb.exec(": > /srv/seen")
    s = socket.create_connection(("127.0.0.1", daemon.port))
    first = f"GET /v1/sandboxes/{sb.id}/ports/8100/first HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {daemon.key}\r\n\r\n"
    s.sendall(first.encode())
    head, body = read_response(s)
    assert head.startswith("HTTP/1.1 200") and body == b"ok", head
    assert "connection: close" in head.lower()
    second = f"GET /v1/sandboxes HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {daemon.key}\r\n\r\n"
    try:
        s.sendall(second.encode())
    except (BrokenPipeError, ConnectionResetError):
        pass
    assert rest_of(s) == b"", "sbxd (or the sandbox) answered on a proxied connection after its exchange"
    s.close()
    got = seen(sb)
    assert b"/first" in got
    assert daemon.key.encode() not in got
    assert b"GET /v1/sandboxes " not in got


def test_a_pipelined_request_after_a_proxied_one_never_reaches_the_sandbox(daemon, greedy):
    sb = greedy
    sb.exec(": > /srv/seen")
    s = socket.create_connection(("127.0.0.1", daemon.port))
    both = (f"GET /v1/sandboxes/{sb.id}/ports/8100/one HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {daemon.key}\r\n\r\n"
            f"PUT /v1/secrets/STOLEN HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {daemon.key}\r\n"
            "Content-Type: application/json\r\nContent-Length: 15\r\n\r\n{\"value\":\"abc\"}")
    s.sendall(both.encode())
    head, body = read_response(s)
    assert head.startswith("HTTP/1.1 200") and body == b"ok"
    assert rest_of(s) == b""
    s.close()
    got = seen(sb)
    assert b"/one" in got and b"STOLEN" not in got and daemon.key.encode() not in got
    assert "STOLEN" not in [x["name"] for x in daemon.raw("GET", "/v1/secrets")[1]["secrets"]]


def test_a_101_to_a_request_that_asked_no_upgrade_is_refused(daemon, greedy):
    sb = greedy
    s = socket.create_connection(("127.0.0.1", daemon.port))
    s.sendall(f"GET /v1/sandboxes/{sb.id}/ports/8100/switch HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {daemon.key}\r\n\r\n".encode())
    head, body = read_response(s)
    assert head.startswith("HTTP/1.1 503"), head
    assert b"switched protocols" in body
    assert rest_of(s) == b""
    s.close()


def test_set_cookie_domains_are_stripped_and_path_routed_pages_get_an_opaque_origin(daemon):
    c = daemon.client()
    sb = c.create(image="default", user="root", ttl_seconds=300)
    try:
        sb.files.write("/srv/cookie.py", r'''
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer
class H(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Set-Cookie", "a=1; Domain=sbx.localhost; Path=/; HttpOnly")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")
    def log_message(self, *a):
        pass
HTTPServer(("127.0.0.1", 8200), H).serve_forever()
''')
        sb.exec("nohup python3 /srv/cookie.py >/dev/null 2>&1 &")
        for _ in range(100):
            if sb.exec("python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", 8200))' 2>/dev/null && echo up").stdout == "up\n":
                break
            time.sleep(0.05)
        for host, by_path in ((f"8200-{sb.id}.sbx.localhost", False), ("127.0.0.1", True)):
            conn = http.client.HTTPConnection("127.0.0.1", daemon.port, timeout=10)
            path = f"/v1/sandboxes/{sb.id}/ports/8200/" if by_path else "/"
            conn.request("GET", path, headers={"Host": host, "Authorization": "Bearer " + daemon.key})
            r = conn.getresponse()
            assert r.status == 200 and r.read() == b"ok"
            cookie = r.getheader("Set-Cookie")
            assert cookie and "domain" not in cookie.lower() and "a=1" in cookie and "HttpOnly" in cookie
            csp = r.getheader("Content-Security-Policy") or ""
            assert ("sandbox" in csp) == by_path
            conn.close()
    finally:
        sb.delete()


@pytest.fixture(scope="module")
def strict():
    d = Daemon("http", extra_args=["--http-header-timeout-ms", "1000", "--max-connections", "16"])
    try:
        yield d
    finally:
        d.destroy()


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def test_an_unauthenticated_body_is_refused_before_a_byte_of_it_is_read(strict):
    s = socket.create_connection(("127.0.0.1", strict.port))
    s.sendall(b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 60000000\r\n\r\n")
    head, body = read_response(s, timeout=5)  # answered although no byte of the body came
    assert head.startswith("HTTP/1.1 401"), head
    s.close()


def test_unauthenticated_bodies_do_not_grow_the_daemons_memory(strict):
    before = rss_kb(strict.proc.pid)
    chunk = b"x" * (1 << 20)
    socks = []
    for _ in range(8):
        s = socket.create_connection(("127.0.0.1", strict.port))
        s.sendall(b"POST /v1/images/big HTTP/1.1\r\nHost: x\r\nContent-Length: 8388608\r\n\r\n")
        socks.append(s)
    for s in socks:
        try:
            for _ in range(8):
                s.sendall(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass
    for s in socks:
        head, _ = read_response(s)
        assert head.startswith("HTTP/1.1 401"), head
        s.close()
    grown = rss_kb(strict.proc.pid) - before
    assert grown < 24 * 1024, f"sbxd grew by {grown} KiB on unauthenticated bodies"


def test_a_declared_length_over_the_limit_gets_a_413_that_the_client_receives(strict):
    # The admin's JSON bodies are limited to 64 MiB: the client writes its whole body
    # before it reads, and still gets the answer.
    conn = http.client.HTTPConnection("127.0.0.1", strict.port, timeout=30)
    conn.request("POST", "/v1/sandboxes", body=b"{" + b" " * (64 << 20) + b"}",
                 headers={"Authorization": "Bearer " + strict.key, "Content-Type": "application/json"})
    r = conn.getresponse()
    assert r.status == 413
    assert b"too_large" in r.read()
    conn.close()


def test_a_sandbox_token_cannot_send_a_large_body(strict):
    c = strict.client()
    sb = c.create(image="busybox", ttl_seconds=120)
    try:
        token = sb.exec("echo $SBX_TOKEN").stdout.strip()
        assert token.startswith("sbt_")
        s = socket.create_connection(("127.0.0.1", strict.port))
        s.sendall(f"GET /v1/sandboxes/{sb.id} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
                  "Content-Length: 10000000\r\n\r\n".encode())
        head, body = read_response(s)
        assert head.startswith("HTTP/1.1 413"), head
        s.close()
    finally:
        sb.delete()


def test_a_half_sent_header_is_closed_at_the_deadline(strict):
    s = socket.create_connection(("127.0.0.1", strict.port))
    s.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n")
    t0 = time.time()
    assert rest_of(s, timeout=10) == b""
    assert time.time() - t0 < 8
    s.close()
    s = socket.create_connection(("127.0.0.1", strict.port))  # one that sends nothing
    assert rest_of(s, timeout=10) == b""
    s.close()


def test_connections_over_the_cap_are_closed_and_the_daemon_serves_again_after(strict):
    held = [socket.create_connection(("127.0.0.1", strict.port)) for _ in range(16)]
    extra = socket.create_connection(("127.0.0.1", strict.port))
    extra.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n")
    assert rest_of(extra, timeout=5) == b""
    extra.close()
    for s in held:
        s.close()
    for _ in range(100):
        try:
            if strict.raw("GET", "/v1/health", auth=False)[0] == 200:
                break
        except OSError:
            pass
        time.sleep(0.05)
    assert strict.raw("GET", "/v1/health", auth=False)[0] == 200


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_the_accept_loop_does_not_spin_at_the_fd_limit(fresh_daemon):
    d = fresh_daemon
    pid = d.proc.pid
    soft, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (96, hard))
    socks = []
    try:
        for _ in range(150):
            socks.append(socket.create_connection(("127.0.0.1", d.port)))
        time.sleep(0.5)
        c0 = cpu_seconds(pid)
        time.sleep(2)
        used = cpu_seconds(pid) - c0
        assert used < 0.6, f"sbxd used {used:.2f} s of CPU in 2 s at its fd limit"
    finally:
        for s in socks:
            s.close()
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (soft, hard))
    deadline = time.time() + 20
    while time.time() < deadline:
        try:
            if d.raw("GET", "/v1/health", auth=False, timeout=2)[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise AssertionError("sbxd does not serve again after the fd limit")


@pytest.mark.parametrize("framing", [
    "Transfer-Encoding: gzip\r\n",
    "Transfer-Encoding: gzip, chunked\r\n",
    "Transfer-Encoding: chunked, gzip\r\n",
    "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n",
    "Transfer-Encoding: chunked\r\nContent-Length: 2\r\n",
    "X-Folded: a\r\n  b\r\nContent-Length: 2\r\n",
])
def test_bad_framing_is_a_400_and_the_connection_closes(strict, framing):
    s = socket.create_connection(("127.0.0.1", strict.port))
    body = '{"type":"small","ttl_seconds":60}'
    req = (f"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {strict.key}\r\n"
           f"Content-Type: application/json\r\n{framing}\r\n" + f"{len(body):x}\r\n{body}\r\n0\r\n\r\n")
    s.sendall(req.encode())
    head, body = read_response(s)
    assert head.startswith("HTTP/1.1 400"), head
    assert b"invalid_request" in body
    assert rest_of(s) == b""
    s.close()
    assert strict.sandboxes() == []


# Code in a sandbox stops its agent's spare handlers (they run as its own uid) and fills
# the agent's listen queue, so that nobody takes sbxd's connections.
WEDGE = r'''
import os, signal, socket, time
me = {os.getpid(), os.getppid()}
p = os.getppid()
while p > 1:  # the handler that runs this script, and its parents, are left alone
    with open(f"/proc/{p}/stat") as f:
        p = int(f.read().rsplit(")", 1)[1].split()[1])
    me.add(p)
stopped = 0
for pid in os.listdir("/proc"):
    if pid.isdigit() and int(pid) not in me and int(pid) != 1:
        try:
            with open(f"/proc/{pid}/comm") as f:
                if f.read().startswith("sbx-agent"):
                    os.kill(int(pid), signal.SIGSTOP)
                    stopped += 1
        except OSError:
            pass
held = []
for _ in range(400 if FILL else 0):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.setblocking(False)
    try:
        s.connect("\0sbx-agent")
        held.append(s)
    except OSError:
        break
open("/tmp/wedged", "w").write(f"{stopped} {len(held)}\n")
time.sleep(3600)
'''


def test_a_tenant_that_wedges_its_agent_delays_neither_other_calls_nor_a_restart(request):
    d = Daemon("wedge")
    try:
        d.cli("image", "build", "default", timeout=1800)
        c = d.client()
        victim = c.create(image="default", user="root", ttl_seconds=600)
        other = c.create(image="busybox", ttl_seconds=600)
        victim.files.write("/tmp/wedge.py", "FILL = True\n" + WEDGE)
        victim.exec("nohup python3 /tmp/wedge.py >/tmp/wedge.log 2>&1 &")
        time.sleep(3)
        # The victim's agent takes no connection (503 at the dial deadline), or takes it
        # into a queue that nobody serves (the exec's own deadline): either way it ends.
        t0 = time.time()
        status, body = d.raw("POST", f"/v1/sandboxes/{victim.id}/exec", body={"cmd": "true", "timeout_seconds": 5},
                             timeout=60)
        assert status in (503, 504), body
        assert time.time() - t0 < 30
        assert other.exec("echo fine").stdout == "fine\n"
        # A restart does not wait on it: the daemon answers, the victim is an error, the
        # other sandbox is re-adopted.
        d.stop()
        t0 = time.time()
        d.start()
        assert time.time() - t0 < 15
        assert d.raw("GET", f"/v1/sandboxes/{victim.id}")[1]["state"] == "error"
        assert other.exec("echo still").stdout == "still\n"
        assert d.raw("DELETE", f"/v1/sandboxes/{victim.id}")[0] == 200
    finally:
        d.destroy()


def test_a_file_request_to_an_agent_that_never_answers_ends_at_its_deadline(request):
    """The tenant stops its agent's spare handlers but leaves the listen queue open: sbxd's
    connection is queued and its request sent, and nobody answers. The request ends (503)
    at the agent's answer deadline instead of holding the client forever."""
    d = Daemon("silent")
    try:
        d.cli("image", "build", "default", timeout=1800)
        c = d.client()
        victim = c.create(image="default", user="root", ttl_seconds=600)
        victim.files.write("/tmp/wedge.py", "FILL = False\n" + WEDGE)
        victim.exec("nohup python3 /tmp/wedge.py >/tmp/wedge.log 2>&1 &")
        time.sleep(2)
        t0 = time.time()
        status, body = d.raw("GET", f"/v1/sandboxes/{victim.id}/files?path=/etc/hostname", timeout=90)
        took = time.time() - t0
        assert status == 503, body
        assert "did not answer" in body["error"]["message"], body
        assert took < 60, took
        assert d.raw("DELETE", f"/v1/sandboxes/{victim.id}")[0] == 200
    finally:
        d.destroy()
