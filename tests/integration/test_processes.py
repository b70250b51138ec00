"""Background processes: they outlive the request that started them, keep their output in
a ring that late readers replay by sequence number, take stdin and signals, and stream
with keep-alives while quiet."""
import http.client
import json
import threading
import time

import pytest

import sbx
from conftest import Daemon


def ndjson(d, path, timeout=60):
    c = http.client.HTTPConnection("127.0.0.1", d.port, timeout=timeout)
    c.request("GET", path, headers={"Authorization": "Bearer " + d.key})
    r = c.getresponse()
    assert r.status == 200, r.read()
    lines = []
    while True:
        line = r.readline()
        if not line:
            break
        lines.append(json.loads(line))
    c.close()
    return lines


def test_start_list_output_exit(daemon, client):
    with client.create(image="busybox") as sb:
        p = sb.processes.start("echo out; echo err >&2; sleep 0.3; echo done; exit 3")
        assert p.pid > 1 and p.data["state"] == "running" and p.data["type"] == "process.started"
        info = p.wait(timeout=30)
        assert info["state"] == "exited" and info["exit_code"] == 3 and info["ended_at"]
        events = list(p.output())
        out = "".join(e["data"] for e in events if e["type"] == "stdout")
        err = "".join(e["data"] for e in events if e["type"] == "stderr")
        assert out == "out\ndone\n" and err == "err\n"
        assert events[-1]["type"] == "exit" and events[-1]["exit_code"] == 3
        seqs = [e["seq"] for e in events if "seq" in e]
        assert seqs == sorted(seqs)
        # Replay from a sequence number: only what came after.
        later = [e for e in p.output(since=seqs[-1]) if e["type"] in ("stdout", "stderr")]
        assert later and later[0]["seq"] == seqs[-1]
        assert [q.pid for q in sb.processes.list()] == [p.pid]
        assert sb.processes.get(p.pid).data["exit_code"] == 3
        # argv form, cwd and env.
        q = sb.processes.start(["sh", "-c", "pwd; echo $GREETING"], cwd="/tmp", env={"GREETING": "hi"})
        q.wait(timeout=30)
        assert "".join(e["data"] for e in q.output() if e["type"] == "stdout") == "/tmp\nhi\n"


def test_outlives_the_request_and_reattaches(daemon, client):
    """A counter keeps counting after the client that started it went away; a new client
    reads it back from the ring and follows it live."""
    with client.create(image="busybox") as sb:
        status, body = daemon.raw("POST", f"/v1/sandboxes/{sb.id}/processes",
                                  body={"cmd": "i=0; while true; do echo tick $i; i=$((i+1)); sleep 0.05; done"})
        assert status == 201, body
        pid = body["pid"]
        time.sleep(0.5)
        fresh = daemon.client().get(sb.id).processes.get(pid)
        assert fresh.data["state"] == "running"
        first = [e for e in fresh.output() if e["type"] == "stdout"]
        assert len(first) >= 3 and first[0]["data"] == "tick 0\n"
        # Follow from where we were: later ticks arrive live.
        seen = []
        for e in fresh.output(follow=True, since=first[-1]["seq"] + 1):
            if e["type"] == "stdout":
                seen.append(e["data"])
            if len(seen) >= 5:
                break
        n0 = int(first[-1]["data"].split()[1])
        assert [int(s.split()[1]) for s in seen] == list(range(n0 + 1, n0 + 6))
        assert fresh.kill().type == "process.signalled"
        info = fresh.wait(timeout=30)
        assert info["signal"] == 9 and info["exit_code"] == 137
        with pytest.raises(sbx.ConflictError):
            fresh.kill()


def test_stdin_and_signals(daemon, client):
    with client.create(image="busybox") as sb:
        p = sb.processes.start("while read line; do echo got:$line; done; echo closed")
        p.send_stdin("one\ntwo\n")
        p.send_stdin("three\n", eof=True)
        info = p.wait(timeout=30)
        assert info["exit_code"] == 0 and info["stdin_open"] is False
        assert "".join(e["data"] for e in p.output() if e["type"] == "stdout") == "got:one\ngot:two\ngot:three\nclosed\n"
        with pytest.raises(sbx.ConflictError):
            p.send_stdin("late")
        t = sb.processes.start("trap 'echo term; exit 7' TERM; while true; do sleep 0.05; done")
        time.sleep(0.3)
        t.signal("TERM")
        assert t.wait(timeout=30)["exit_code"] == 7


def test_bad_requests(daemon, client):
    with client.create(image="busybox") as sb:
        base = f"/v1/sandboxes/{sb.id}/processes"
        for body in ({}, {"cmd": ""}, {"cmd": []}, {"cmd": 3}, {"cmd": "x", "bogus": 1}, {"cmd": "x", "tty": "yes"},
                     {"cmd": "x", "env": {"A=B": "v"}}):
            status, answer = daemon.raw("POST", base, body=body)
            assert status == 400, (body, answer)
        status, answer = daemon.raw("POST", base, body={"cmd": ["/no/such/binary"]})
        assert status == 400 and "did not start" in answer["error"]["message"], answer
        assert daemon.raw("GET", base + "/999999")[0] == 404
        assert daemon.raw("GET", base + "/abc")[0] == 400
        assert daemon.raw("GET", "/v1/sandboxes/nosuch/processes")[0] == 404
        p = sb.processes.start("sleep 30")
        for sig in ("NOPE", 0, 65, "9x"):
            status, answer = daemon.raw("POST", f"{base}/{p.pid}/signal", body={"signal": sig})
            assert status == 400, (sig, answer)
        assert daemon.raw("GET", f"{base}/{p.pid}/output?since=x")[0] == 400
        assert daemon.raw("GET", f"{base}/{p.pid}/output?follow=maybe")[0] == 400
        token = sb.exec("echo -n $SBX_TOKEN").stdout
        status, _ = daemon.raw("POST", base, body={"cmd": "true"}, headers={"Authorization": "Bearer " + token})
        assert status == 403
        p.kill()


def test_ring_keeps_the_latest_and_reports_the_gap(daemon, client):
    with client.create(image="busybox") as sb:
        # About 3 MiB of numbered lines through a 1 MiB ring.
        p = sb.processes.start("i=0; while [ $i -lt 60000 ]; do echo line-$i-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx; i=$((i+1)); done")
        p.wait(timeout=120)
        events = list(p.output())
        assert events[0]["type"] == "gap" and events[0]["from"] == 0 and events[0]["to"] > 0
        text = "".join(e["data"] for e in events if e["type"] == "stdout")
        assert len(text) <= (1 << 20) + 65536
        assert text.endswith("line-59999-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\n")
        assert events[-1]["type"] == "exit" and events[-1]["exit_code"] == 0


def test_processes_keep_a_sandbox_busy_and_end_with_it(daemon, client):
    with client.create(image="busybox", idle_timeout_seconds=1) as sb:
        p = sb.processes.start("sleep 4; echo woke")
        time.sleep(3)
        assert sb.refresh().state == "running"  # a running process is activity
        assert p.wait(timeout=30)["exit_code"] == 0
    # Deleting the sandbox forgets its processes.
    with client.create(image="busybox") as sb2:
        q = sb2.processes.start("sleep 60")
        sb2.stop()
        info = q.info()
        assert info["state"] == "exited" and info["error"]
        sb2.start()


def test_quiet_commands_stream_keepalives_to_the_end():
    """A command quiet for several keep-alive intervals (shortened to 200 ms here) still
    streams its final line, through a streamed exec and a followed process."""
    d = Daemon("keepalive", extra_args=["--keepalive-ms", "200"])
    try:
        c = d.client()
        with c.create(image="busybox") as sb:
            h = http.client.HTTPConnection("127.0.0.1", d.port, timeout=30)
            h.request("POST", f"/v1/sandboxes/{sb.id}/exec", body=json.dumps({"cmd": "sleep 1.2; echo last"}),
                      headers={"Authorization": "Bearer " + d.key, "Accept": "application/x-ndjson",
                               "Content-Type": "application/json"})
            r = h.getresponse()
            lines = [json.loads(l) for l in r.read().splitlines() if l.strip()]
            h.close()
            kinds = [l["type"] for l in lines]
            assert kinds.count("keepalive") >= 3, kinds
            assert lines[-2] == {"type": "stdout", "data": "last\n"} and lines[-1]["type"] == "exit"
            p = sb.processes.start("sleep 1.2; echo last")
            lines = ndjson(d, f"/v1/sandboxes/{sb.id}/processes/{p.pid}/output?follow=true")
            kinds = [l["type"] for l in lines]
            assert kinds.count("keepalive") >= 3, kinds
            assert [l["data"] for l in lines if l["type"] == "stdout"] == ["last\n"]
            assert lines[-1]["type"] == "exit" and lines[-1]["exit_code"] == 0
    finally:
        d.destroy()


def test_cli_spawn_ps_logs(daemon, client):
    with client.create(image="busybox") as sb:
        pid = daemon.cli("spawn", sb.id, "--", "sh", "-c", "echo from-cli; echo warn >&2; exit 4").stdout.strip()
        assert pid.isdigit()
        p = daemon.cli("logs", "-f", sb.id, pid, check=False)
        assert p.returncode == 4 and p.stdout == "from-cli\n" and p.stderr == "warn\n", p
        table = daemon.cli("ps", sb.id).stdout
        assert pid in table and "exited" in table and "sh -c echo from-cli" in table
        assert daemon.cli("logs", sb.id, "99999", check=False).returncode != 0


class WsClient:
    """A minimal WebSocket client (RFC 6455) for the terminal route."""

    def __init__(self, d, path):
        import base64
        import os
        import socket
        self.s = socket.create_connection(("127.0.0.1", d.port), timeout=20)
        key = base64.b64encode(os.urandom(16)).decode()
        self.s.sendall((f"GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {d.key}\r\n"
                        f"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                        f"Sec-WebSocket-Version: 13\r\n\r\n").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.s.recv(4096)
            if not chunk:
                break
            head += chunk
        self.status = int(head.split()[1]) if head else 0
        self.head, _, self.buf = head.partition(b"\r\n\r\n")

    def send(self, data, text=False):
        import os
        mask = os.urandom(4)
        n = len(data)
        hdr = bytes([0x81 if text else 0x82])
        hdr += bytes([0x80 | n]) if n < 126 else bytes([0x80 | 126]) + n.to_bytes(2, "big")
        self.s.sendall(hdr + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))

    def _need(self, n):
        while len(self.buf) < n:
            chunk = self.s.recv(65536)
            if not chunk:
                raise EOFError
            self.buf += chunk

    def recv(self):
        """(opcode, payload)"""
        self._need(2)
        op, n = self.buf[0] & 15, self.buf[1] & 127
        off = 2
        if n == 126:
            self._need(4)
            n, off = int.from_bytes(self.buf[2:4], "big"), 4
        elif n == 127:
            self._need(10)
            n, off = int.from_bytes(self.buf[2:10], "big"), 10
        self._need(off + n)
        payload, self.buf = self.buf[off:off + n], self.buf[off + n:]
        return op, payload

    def read_until(self, needle, limit=200):
        seen = b""
        for _ in range(limit):
            op, payload = self.recv()
            if op == 2:
                seen += payload
                if needle in seen:
                    return seen
            elif op in (1, 8):
                return seen + b"<op%d:%s>" % (op, payload)
        return seen


def test_tty_process_over_websocket(daemon, client):
    with client.create(image="busybox") as sb:
        p = sb.processes.start("sh", tty=True, cols=100, rows=30)
        assert p.data["tty"] is True
        ws = WsClient(daemon, f"/v1/sandboxes/{sb.id}/processes/{p.pid}/tty")
        assert ws.status == 101, ws.head
        ws.send(b"tty; stty size; echo hi-$((1+2))\n")
        seen = ws.read_until(b"hi-3")
        assert b"/dev/pts/" in seen and b"30 100" in seen and b"hi-3" in seen, seen
        ws.send(json.dumps({"type": "resize", "cols": 120, "rows": 40}).encode(), text=True)
        time.sleep(0.2)
        ws.send(b"stty size\n")
        assert b"40 120" in ws.read_until(b"40 120")
        # Ctrl-C reaches the foreground job through the terminal.
        ws.send(b"sleep 30\n")
        time.sleep(0.3)
        ws.send(b"\x03")
        ws.send(b"echo after-$?\n")
        assert b"after-130" in ws.read_until(b"after-130")
        ws.send(b"exit 5\n")
        while True:
            op, payload = ws.recv()
            if op == 1:
                assert json.loads(payload) == {"type": "exit", "exit_code": 5, "signal": None}
                break
        op, _ = ws.recv()
        assert op == 8  # close
        ws.s.close()
        assert p.info()["exit_code"] == 5
        # A process without a terminal, and a plain GET, are refused.
        q = sb.processes.start("sleep 5")
        ws2 = WsClient(daemon, f"/v1/sandboxes/{sb.id}/processes/{q.pid}/tty")
        assert ws2.status == 409
        assert daemon.raw("GET", f"/v1/sandboxes/{sb.id}/processes/{q.pid}/tty")[0] == 400
        status, body = daemon.raw("POST", f"/v1/sandboxes/{sb.id}/processes/{q.pid}/resize", body={"cols": 10, "rows": 10})
        assert status == 409, body
        q.kill()
        status, body = daemon.raw("POST", f"/v1/sandboxes/{sb.id}/processes", body={"cmd": "sh", "tty": True, "cols": 0})
        assert status == 400


def test_cli_exec_it(daemon, client):
    import fcntl
    import os
    import pty
    import struct
    import subprocess
    import termios
    from conftest import SBX
    with client.create(image="busybox") as sb:
        # Input from a pipe: the lines run, then the end of input ends the shell.
        p = daemon.cli("exec", "-it", sb.id, "--", "sh", "-c", "read x; echo got:$x; exit 3", check=False,
                       input="hello\n")
        assert p.returncode == 3 and "got:hello" in p.stdout, p
        # On a terminal: its size goes along, keys are raw, the exit code comes back.
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 33, 111, 0, 0))
        env = dict(os.environ, SBX_URL=daemon.url, SBX_API_KEY=daemon.key)
        proc = subprocess.Popen([SBX, "exec", "-it", sb.id, "--", "sh"], stdin=slave, stdout=slave, stderr=slave,
                                env=env, close_fds=True)
        os.close(slave)
        os.write(master, b"stty size; echo mark-$((6*7))\r")
        seen = b""
        deadline = time.time() + 20
        while b"mark-42" not in seen and time.time() < deadline:
            seen += os.read(master, 4096)
        assert b"33 111" in seen and b"mark-42" in seen, seen
        os.write(master, b"exit 7\r")
        assert proc.wait(timeout=20) == 7
        os.close(master)
