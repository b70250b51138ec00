"""A holder of one sandbox's E2B access token gets limits of its own, never the admin's:
a small JSON body, uploads held to the sandbox's own disk as they stream (and refused at
headers when they declare more than it holds), never spooled on the host's disk, and a
cap on the connections it holds."""
import os
import select
import socket
import time

from conftest import Daemon


def _sandbox(daemon, disk_mb=None):
    body = {"image": "busybox", "ttl_seconds": 600}
    if disk_mb:
        body["resources"] = {"disk_mb": disk_mb}
    status, sb = daemon.raw("POST", "/v1/sandboxes", body=body)
    assert status == 201, sb
    status, e2b = daemon.raw("GET", f"/sandboxes/{sb['id']}", headers={"X-API-KEY": daemon.key}, auth=False)
    assert status == 200, e2b
    return sb, {"E2b-Sandbox-Id": sb["id"], "X-Access-Token": e2b["envdAccessToken"]}


def _head(daemon, lines):
    """Opens a connection and sends a request's header (a list of lines)."""
    s = socket.create_connection(("127.0.0.1", daemon.port), timeout=20)
    s.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
    return s


def _status(s):
    data = b""
    while b"\r\n" not in data:
        got = s.recv(4096)
        if not got:
            break
        data += got
    return int(data.split(b" ")[1]) if data.startswith(b"HTTP/1.1 ") else None


def _spooled(daemon):
    """The bytes in sbxd's upload folder on the host's disk."""
    tmp = os.path.join(daemon.data, "tmp")
    return sum(os.path.getsize(os.path.join(tmp, f)) for f in os.listdir(tmp)) if os.path.isdir(tmp) else 0


def test_an_access_tokens_json_bodies_are_small(daemon):
    sb, token = _sandbox(daemon)
    try:
        h = dict(token, **{"Content-Type": "application/json"})
        # 2 MiB of JSON: the admin's limit (64 MiB) would take it, a token's does not.
        big = '{"pad": "' + "x" * (2 << 20) + '"}'
        status, body = daemon.raw("POST", "/process.Process/List", body=big, headers=h, auth=False)
        assert status == 413, (status, body)
        # What a token's calls need fits.
        status, body = daemon.raw("POST", "/process.Process/List", body="{}", headers=h, auth=False)
        assert status == 200, (status, body)
        # A body shaped to cost much more to parse than its size is refused as such.
        deep = "[" * 5000 + "]" * 5000
        status, body = daemon.raw("POST", "/process.Process/SendSignal", body=deep, headers=h, auth=False)
        assert status == 400 and "nested" in body["message"], (status, body)
        wide = "[" + ",".join(["0"] * 200_000) + "]"
        status, body = daemon.raw("POST", "/v1/sandboxes", body=wide)  # the admin's too
        assert status == 400 and "values" in body["error"]["message"], (status, body)
        assert daemon.raw("GET", f"/v1/sandboxes/{sb['id']}")[1]["state"] == "running"
    finally:
        daemon.raw("DELETE", f"/v1/sandboxes/{sb['id']}")


def test_an_upload_declaring_more_than_the_sandboxs_disk_is_refused_at_headers(daemon):
    sb, token = _sandbox(daemon, disk_mb=64)
    try:
        # 1 GiB declared, nothing sent: answered at once, before any of it is read.
        s = _head(daemon, ["POST /files?path=/tmp/big HTTP/1.1", "Host: x", f"E2b-Sandbox-Id: {sb['id']}",
                           f"X-Access-Token: {token['X-Access-Token']}", "Content-Type: application/octet-stream",
                           f"Content-Length: {1 << 30}"])
        try:
            assert _status(s) == 413
        finally:
            s.close()
        assert _spooled(daemon) == 0
        client = daemon.client().get(sb["id"])
        assert client.exec("test -e /tmp/big; echo $?").stdout == "1\n"
        # A chunked one (no length declared) stops at the disk's size, and nothing is left.
        s = _head(daemon, ["POST /files?path=/tmp/big HTTP/1.1", "Host: x", f"E2b-Sandbox-Id: {sb['id']}",
                           f"X-Access-Token: {token['X-Access-Token']}", "Content-Type: application/octet-stream",
                           "Transfer-Encoding: chunked"])
        try:
            chunk = b"z" * (1 << 20)
            for _ in range(100):  # 100 MiB at most, past the 64 MiB disk
                if select.select([s], [], [], 0)[0]:
                    break  # answered
                s.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                assert _spooled(daemon) == 0
            assert select.select([s], [], [], 20)[0]
            answer = s.recv(65536)
            assert answer.startswith(b"HTTP/1.1 413"), answer
        finally:
            s.close()
        ls = client.exec("ls -a /tmp").stdout
        assert "big" not in ls, ls
        assert client.exec("df -m / | tail -n 1").exit_code == 0
    finally:
        daemon.raw("DELETE", f"/v1/sandboxes/{sb['id']}")


def test_an_upload_goes_into_the_sandbox_as_it_streams_never_onto_the_hosts_disk(daemon):
    sb, token = _sandbox(daemon)
    try:
        total = 8 << 20
        s = _head(daemon, ["POST /files?path=/tmp/streamed HTTP/1.1", "Host: x", f"E2b-Sandbox-Id: {sb['id']}",
                           f"X-Access-Token: {token['X-Access-Token']}", "Content-Type: application/octet-stream",
                           f"Content-Length: {total}"])
        try:
            s.sendall(b"a" * (total // 2))
            time.sleep(0.5)
            # Half of it sent: none of it on the host's disk, outside the sandbox.
            assert _spooled(daemon) == 0
            s.sendall(b"a" * (total // 2))
            assert _status(s) == 200
        finally:
            s.close()
        client = daemon.client().get(sb["id"])
        assert client.exec("stat -c %s /tmp/streamed").stdout == f"{total}\n"
        # A multipart upload too (as E2B's SDK sends one), in many pieces.
        boundary = "b0und"
        body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"m.txt\"\r\n\r\n").encode() + \
            b"m" * (3 << 20) + f"\r\n--{boundary}--\r\n".encode()
        s = _head(daemon, ["POST /files?path=/tmp/multi HTTP/1.1", "Host: x", f"E2b-Sandbox-Id: {sb['id']}",
                           f"X-Access-Token: {token['X-Access-Token']}",
                           f"Content-Type: multipart/form-data; boundary={boundary}", f"Content-Length: {len(body)}"])
        try:
            for at in range(0, len(body), 100_000):
                s.sendall(body[at:at + 100_000])
                assert _spooled(daemon) == 0
            assert _status(s) == 200
        finally:
            s.close()
        assert client.exec("stat -c %s /tmp/multi").stdout == f"{3 << 20}\n"
    finally:
        daemon.raw("DELETE", f"/v1/sandboxes/{sb['id']}")


def test_a_sandboxs_tokens_hold_at_most_its_connection_cap():
    d = Daemon("tokcap", extra_args=["--max-sandbox-connections", "4"])
    held = []
    try:
        sb, token = _sandbox(d)
        health = ["GET /health HTTP/1.1", "Host: x", f"E2b-Sandbox-Id: {sb['id']}",
                  f"X-Access-Token: {token['X-Access-Token']}"]
        for _ in range(4):
            s = _head(d, health)
            assert _status(s) == 204
            held.append(s)  # kept alive
        extra = _head(d, health)
        try:
            assert _status(extra) == 503
        finally:
            extra.close()
        # The admin, and another sandbox's token, are served meanwhile.
        assert d.raw("GET", f"/v1/sandboxes/{sb['id']}")[0] == 200
        other, other_token = _sandbox(d)
        assert d.raw("GET", "/health", headers=other_token, auth=False)[0] == 204
        # A slot is free again once a connection goes.
        held.pop().close()
        for _ in range(100):
            s = _head(d, health)
            code = _status(s)
            s.close()
            if code == 204:
                break
            time.sleep(0.05)
        assert code == 204
    finally:
        for s in held:
            s.close()
        d.destroy()
