"""A terminal attached to a tty process: ``process.attach()`` (a WebSocket, RFC 6455, spoken
with the standard library only)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import socket
import ssl
import struct
import threading
from typing import TYPE_CHECKING, Any, Iterator, Optional, Union

from .errors import SbxConnectionError
from .http import _decode

if TYPE_CHECKING:
    from .http import Api

__all__ = ["Terminal"]

_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
_TEXT, _BINARY, _CLOSE, _PING, _PONG = 1, 2, 8, 9, 10


class Terminal:
    """The terminal of a process started with ``tty=True``, attached over its WebSocket.
    ``send`` types input, ``resize`` changes its size, iterating (or ``recv``) gives its
    output as bytes until it ends; then ``exit_code`` and ``signal`` are set. Output
    already in the process's ring comes first (from ``since``, by default all of it)."""

    def __init__(self, api: "Api", path: str, timeout: float = 3600.0) -> None:
        self.exit_code: Optional[int] = None
        self.signal: Optional[int] = None
        self._buf = b""
        self._ended = False
        self._send_lock = threading.Lock()
        sock = socket.create_connection((api._host, api._port), timeout=timeout)
        if api._scheme == "https":
            sock = ssl.create_default_context().wrap_socket(sock, server_hostname=api._host)
        self._sock = sock
        key = base64.b64encode(os.urandom(16)).decode()
        headers = api._headers(True, {"Host": "%s:%d" % (api._host, api._port), "Upgrade": "websocket",
                                      "Connection": "Upgrade", "Sec-WebSocket-Key": key,
                                      "Sec-WebSocket-Version": "13"})
        request = "GET %s HTTP/1.1\r\n" % api._target(path, None)
        request += "".join("%s: %s\r\n" % kv for kv in headers.items()) + "\r\n"
        try:
            sock.sendall(request.encode())
            head = self._read_until(b"\r\n\r\n")
        except OSError as e:
            sock.close()
            raise SbxConnectionError("cannot attach to the terminal: %s" % e) from e
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        fields = {k.strip().lower(): v.strip() for k, _, v in (l.partition(":") for l in lines[1:] if l)}
        if status != 101:
            length = int(fields.get("content-length", "0"))
            body = self._take(length)
            sock.close()
            _decode(status, lines[0], body)  # raises the API's error
            raise SbxConnectionError("the terminal was not upgraded (HTTP %d)" % status)
        want = base64.b64encode(hashlib.sha1((key + _GUID).encode()).digest()).decode()
        if fields.get("sec-websocket-accept") != want:
            sock.close()
            raise SbxConnectionError("the terminal's WebSocket handshake did not match")

    # -- input ------------------------------------------------------------

    def send(self, data: Union[str, bytes]) -> None:
        """Type ``data`` into the terminal."""
        self._send(_BINARY, data.encode() if isinstance(data, str) else bytes(data))

    def resize(self, cols: int, rows: int) -> None:
        self._send(_TEXT, json.dumps({"type": "resize", "cols": int(cols), "rows": int(rows)}).encode())

    def send_eof(self) -> None:
        """Ctrl-D."""
        self._send(_TEXT, b'{"type":"eof"}')

    # -- output -----------------------------------------------------------

    def recv(self) -> Optional[bytes]:
        """The next output, or None once the process ended (``exit_code`` is then set)."""
        while not self._ended:
            try:
                op, payload = self._frame()
            except OSError as e:  # a timeout, or the socket closed under us (close())
                if self._ended:
                    return None
                raise SbxConnectionError("the terminal's connection broke: %s" % e) from e
            except SbxConnectionError:
                if self.exit_code is None and not self._ended:
                    raise
                self._ended = True  # closed right after the exit message
                break
            if op == _BINARY:
                return payload
            if op == _TEXT:
                msg = json.loads(payload.decode("utf-8", errors="replace"))
                if msg.get("type") == "exit":
                    self.exit_code, self.signal = msg.get("exit_code"), msg.get("signal")
            elif op == _PING:
                self._send(_PONG, payload)
            elif op == _CLOSE:
                self._ended = True
                try:
                    self._send(_CLOSE, payload[:2])
                except OSError:
                    pass
        return None

    def __iter__(self) -> Iterator[bytes]:
        while True:
            data = self.recv()
            if data is None:
                return
            yield data

    def wait(self) -> Optional[int]:
        """Reads to the end; the process's exit code."""
        for _ in self:
            pass
        return self.exit_code

    def close(self) -> None:
        """Detach (the process keeps running). Safe from another thread than the reader's:
        that one's wait ends too."""
        if not self._ended:
            try:
                self._send(_CLOSE, struct.pack("!H", 1000))
            except OSError:
                pass
        self._ended = True
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        try:
            self._sock.close()
        except OSError:
            pass

    def __enter__(self) -> "Terminal":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- frames -----------------------------------------------------------

    def _send(self, op: int, payload: bytes) -> None:
        mask = os.urandom(4)
        n = len(payload)
        if n < 126:
            head = struct.pack("!BB", 0x80 | op, 0x80 | n)
        elif n < 1 << 16:
            head = struct.pack("!BBH", 0x80 | op, 0x80 | 126, n)
        else:
            head = struct.pack("!BBQ", 0x80 | op, 0x80 | 127, n)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        with self._send_lock:  # a pong from the reader's thread and a user's send
            self._sock.sendall(head + mask + masked)

    def _frame(self) -> "tuple[int, bytes]":
        """One whole message (continuation frames joined)."""
        op, data = 0, b""
        while True:
            b0, b1 = self._take(2)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack("!H", self._take(2))[0]
            elif n == 127:
                n = struct.unpack("!Q", self._take(8))[0]
            mask = self._take(4) if b1 & 0x80 else b""
            payload = self._take(n)
            if mask:
                payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
            code = b0 & 0x0F
            if code >= 8:  # control frames come whole, even between a message's frames
                return code, payload
            op = op or code
            data += payload
            if b0 & 0x80:
                return op, data

    def _take(self, n: int) -> bytes:
        while len(self._buf) < n:
            chunk = self._sock.recv(65536)
            if not chunk:
                raise SbxConnectionError("the terminal's connection closed")
            self._buf += chunk
        out, self._buf = self._buf[:n], self._buf[n:]
        return out

    def _read_until(self, end: bytes) -> bytes:
        while end not in self._buf:
            chunk = self._sock.recv(65536)
            if not chunk:
                raise OSError("the connection closed during the handshake")
            self._buf += chunk
        head, _, self._buf = self._buf.partition(end)
        return head
