"""Exec output and input byte for byte: "encoding": "base64" in the API (buffered and
streamed, sandbox and disk), the CLI writing exactly what the command wrote when its
stdout is a pipe or a file, and the Python SDK's binary=True."""
import base64
import hashlib
import http.client
import io
import json
import os
import subprocess
import tarfile

import sbx
from conftest import SBX

# Every byte value, then invalid UTF-8 and a lone NUL: what text mode would alter.
MAKE = "i=0; while [ $i -lt 256 ]; do printf \"\\\\$(printf %o $i)\"; i=$((i+1)); done; printf '\\377\\376x\\000'"
EXPECTED = bytes(range(256)) + b"\xff\xfex\x00"


def test_api_base64_buffered_streamed_and_stdin(daemon, client):
    with client.create(image="busybox") as sb:
        status, body = daemon.raw("POST", f"/v1/sandboxes/{sb.id}/exec",
                                  body={"cmd": MAKE + "; printf '\\200' >&2", "encoding": "base64"})
        assert status == 200, body
        assert base64.b64decode(body["stdout"]) == EXPECTED and base64.b64decode(body["stderr"]) == b"\x80"
        # Text mode (the default) replaces what is not UTF-8, as documented.
        status, body = daemon.raw("POST", f"/v1/sandboxes/{sb.id}/exec", body={"cmd": "printf 'a\\377b'"})
        assert body["stdout"] == "a\ufffdb"
        # Streamed: each data field is the base64 of the bytes as read.
        c = http.client.HTTPConnection("127.0.0.1", daemon.port, timeout=60)
        c.request("POST", f"/v1/sandboxes/{sb.id}/exec", body=json.dumps({"cmd": MAKE, "encoding": "base64"}),
                  headers={"Authorization": "Bearer " + daemon.key, "Accept": "application/x-ndjson"})
        lines = [json.loads(l) for l in c.getresponse().read().splitlines() if l.strip()]
        c.close()
        got = b"".join(base64.b64decode(l["data"]) for l in lines if l["type"] == "stdout")
        assert got == EXPECTED and lines[-1]["type"] == "exit"
        # stdin in base64 too: a binary round trip.
        blob = os.urandom(70000)
        status, body = daemon.raw("POST", f"/v1/sandboxes/{sb.id}/exec",
                                  body={"cmd": "cat", "stdin": base64.b64encode(blob).decode(), "encoding": "base64"})
        assert base64.b64decode(body["stdout"]) == blob
        for bad in ({"cmd": "true", "encoding": "hex"}, {"cmd": "cat", "stdin": "not base64!", "encoding": "base64"}):
            status, body = daemon.raw("POST", f"/v1/sandboxes/{sb.id}/exec", body=bad)
            assert status == 400 and body["error"]["code"] == "invalid_request", body


def test_cli_output_is_exact_into_a_pipe_and_a_file(daemon, client, tmp_path):
    env = dict(os.environ, SBX_URL=daemon.url, SBX_API_KEY=daemon.key)
    with client.create(image="busybox") as sb:
        p = subprocess.run([SBX, "exec", sb.id, "--", "sh", "-c", MAKE], env=env, capture_output=True, timeout=60)
        assert p.returncode == 0 and p.stdout == EXPECTED, p.stderr
        # A tar piped out of the sandbox is a tar.
        sb.exec("mkdir -p /root/t && head -c 200000 /dev/urandom > /root/t/r && sha256sum /root/t/r > /root/sum")
        out = tmp_path / "t.tar"
        with open(out, "wb") as f:
            p = subprocess.run([SBX, "exec", sb.id, "--", "tar", "-C", "/root", "-cf", "-", "t"], env=env,
                               stdout=f, stderr=subprocess.PIPE, timeout=60)
        assert p.returncode == 0, p.stderr
        with tarfile.open(out) as t:
            data = t.extractfile("t/r").read()
        assert hashlib.sha256(data).hexdigest() == sb.exec("cat /root/sum").stdout.split()[0]
    # A serverless call on a disk: the same.
    status, disk = daemon.raw("POST", "/v1/disks", body={"size_mb": 64})
    try:
        p = subprocess.run([SBX, "disk", "exec", disk["id"], "--", MAKE], env=env, capture_output=True, timeout=120)
        assert p.returncode == 0 and p.stdout == EXPECTED, p.stderr
        status, body = daemon.raw("POST", f"/v1/disks/{disk['id']}/exec", body={"cmd": MAKE, "encoding": "base64"})
        assert status == 200 and base64.b64decode(body["stdout"]) == EXPECTED
    finally:
        daemon.raw("DELETE", f"/v1/disks/{disk['id']}")


def test_python_sdk_binary(daemon, client):
    with client.create(image="busybox") as sb:
        r = sb.exec(MAKE, binary=True)
        assert r.stdout == EXPECTED and r.stderr == b""
        chunks = []
        r = sb.exec(MAKE, binary=True, on_stdout=chunks.append)
        assert b"".join(chunks) == EXPECTED and r.stdout == EXPECTED
        assert all(isinstance(c, bytes) for c in chunks)
        assert sb.exec("cat", stdin=b"\x00\xff\x01", binary=True).stdout == b"\x00\xff\x01"
        assert sb.exec("cat", stdin="text é", binary=True).stdout == "text é".encode()
        assert sb.exec("echo hi").stdout == "hi\n"  # text stays the default
        try:
            sb.exec("cat", stdin=b"\x00")
            raise AssertionError("bytes stdin without binary=True must be refused")
        except TypeError:
            pass
