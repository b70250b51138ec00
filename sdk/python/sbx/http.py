"""The transport of the sbx SDK: one kept-alive HTTP connection to sbxd, requests and streams."""

from __future__ import annotations

import http.client
import io
import json
import os
import socket
import threading
import urllib.parse
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from .errors import SbxConnectionError, SbxError, error_from_payload
from .types import Answer

__all__ = ["DEFAULT_URL", "DEFAULT_DATA_DIR", "DEFAULT_TIMEOUT", "Api"]


DEFAULT_URL = "http://127.0.0.1:7070"
DEFAULT_DATA_DIR = "/var/lib/sbx"
DEFAULT_TIMEOUT = 600.0
# Server-side default for an exec's timeout_seconds, and the extra time we
# give the HTTP request on top of the command's own limit.
_SERVER_EXEC_TIMEOUT = 60
_EXEC_GRACE = 30.0
_USER_AGENT = "sbx-python"

# Errors that mean a kept-alive connection was closed by the server while idle.
_STALE_ERRORS = (
    http.client.RemoteDisconnected,
    http.client.BadStatusLine,
    ConnectionResetError,
    ConnectionAbortedError,
    BrokenPipeError,
)

Callback = Callable[[str], Any]


def _default_api_key() -> Optional[str]:
    key = os.environ.get("SBX_API_KEY")
    if key and key.strip():
        return key.strip()
    data_dir = os.environ.get("SBX_DATA_DIR") or DEFAULT_DATA_DIR
    try:
        with open(os.path.join(data_dir, "api-key"), "r", encoding="utf-8") as f:
            key = f.read().strip()
    except (OSError, UnicodeDecodeError):
        return None
    return key or None


def _drop_none(d: Dict[str, Any]) -> Dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


def _seg(value: str) -> str:
    """Quote one path segment (ids, image names)."""
    return urllib.parse.quote(str(value), safe="")


QueryType = Union[Dict[str, Any], Sequence[Tuple[str, Any]], None]


def _encode_query(query: QueryType) -> str:
    if not query:
        return ""
    items = query.items() if isinstance(query, dict) else query
    pairs = []
    for k, v in items:
        if v is None:
            continue
        if isinstance(v, bool):
            v = "true" if v else "false"
        pairs.append((k, str(v)))
    return urllib.parse.urlencode(pairs)


def _body_length(body: Any) -> Optional[int]:
    """Bytes left to read in a seekable file object, or None if unknown."""
    try:
        size = os.fstat(body.fileno()).st_size
        return max(0, size - body.tell())
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        pass
    try:
        pos = body.tell()
        end = body.seek(0, io.SEEK_END)
        body.seek(pos)
        return max(0, end - pos)
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return None


# --------------------------------------------------------------------------
# Low-level API
# --------------------------------------------------------------------------


# Idle keep-alive connections an Api keeps for its next calls.
_MAX_IDLE = 8


class Api:
    """Low-level access to the daemon's JSON API.

    Calls use keep-alive connections from a small pool: each call takes an idle one (or
    opens one) and gives it back when its answer has been read, so an :class:`Api` (and
    the :class:`Client` owning it) may be used from several threads at once, each call
    on its own connection (a long exec does not hold up the others). Streaming calls use
    their own connection.
    """

    def __init__(self, url: str, api_key: Optional[str], timeout: float = DEFAULT_TIMEOUT) -> None:
        parts = urllib.parse.urlsplit(url)
        scheme = (parts.scheme or "http").lower()
        if scheme not in ("http", "https"):
            raise ValueError("unsupported URL scheme %r (use http or https)" % scheme)
        if not parts.hostname:
            raise ValueError("URL has no host: %r" % url)
        self.url = url
        self.timeout = float(timeout)
        self._scheme = scheme
        self._host = parts.hostname
        self._port = parts.port or (443 if scheme == "https" else 80)
        self._prefix = parts.path.rstrip("/")
        self._api_key = api_key or None
        self._lock = threading.Lock()  # guards _idle only
        self._idle: List[http.client.HTTPConnection] = []

    # -- public -----------------------------------------------------------

    def request(self, method: str, path: str, body: Any = None, query: QueryType = None) -> Any:
        """Send one request and return the decoded JSON answer.

        ``body`` (if not None) is sent as JSON; ``query`` is a dict or a list
        of pairs (None values are skipped). Raises :class:`sbx.ApiError` (or a
        subclass) on an error status and :class:`sbx.SbxConnectionError` when
        the daemon cannot be reached.
        """
        return self._call(method, path, body=body, query=query)

    def delete_named_snapshot(self, name: str) -> "Answer":
        """Delete a named snapshot; ``.type == "snapshot.named.deleted"``."""
        return Answer(self.request("DELETE", "/v1/snapshots/" + _seg(name)))

    def close(self) -> None:
        """Close the idle connections (calls open new ones as needed)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            self._drop(conn)

    def __del__(self) -> None:
        try:
            for conn in self._idle:
                self._drop(conn)
        except Exception:
            pass

    # -- internals --------------------------------------------------------

    def _new_conn(self, timeout: float) -> http.client.HTTPConnection:
        if self._scheme == "https":
            return http.client.HTTPSConnection(self._host, self._port, timeout=timeout)
        return http.client.HTTPConnection(self._host, self._port, timeout=timeout)

    @staticmethod
    def _drop(conn: Optional[http.client.HTTPConnection]) -> None:
        if conn is not None:
            try:
                conn.close()
            except Exception:
                pass

    def _take(self, timeout: float) -> http.client.HTTPConnection:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        return self._new_conn(timeout)

    def _give_back(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if len(self._idle) < _MAX_IDLE:
                self._idle.append(conn)
                return
        self._drop(conn)

    def _target(self, path: str, query: QueryType) -> str:
        if not path.startswith("/"):
            path = "/" + path
        target = self._prefix + path
        qs = _encode_query(query)
        if qs:
            target += ("&" if "?" in target else "?") + qs
        return target

    def _headers(self, auth: bool, extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
        h = {"User-Agent": _USER_AGENT, "Accept": "application/json"}
        if auth and self._api_key:
            h["Authorization"] = "Bearer " + self._api_key
        if extra:
            h.update(extra)
        return h

    def _where(self) -> str:
        return "%s://%s:%d" % (self._scheme, self._host, self._port)

    @staticmethod
    def _set_timeout(conn: http.client.HTTPConnection, timeout: float) -> None:
        conn.timeout = timeout
        if conn.sock is not None:
            try:
                conn.sock.settimeout(timeout)
            except OSError:
                pass

    def _call(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: QueryType = None,
        raw: Any = None,
        content_type: Optional[str] = None,
        timeout: Optional[float] = None,
        auth: bool = True,
    ) -> Any:
        t = self.timeout if timeout is None else float(timeout)
        extra: Dict[str, str] = {}
        data: Any = None
        rewind: Optional[int] = None
        if raw is not None:
            data = raw
            extra["Content-Type"] = content_type or "application/octet-stream"
            if isinstance(raw, (bytes, bytearray, memoryview)):
                extra["Content-Length"] = str(len(raw))
            else:
                length = _body_length(raw)
                if length is None:
                    data = raw.read()
                    extra["Content-Length"] = str(len(data))
                else:
                    extra["Content-Length"] = str(length)
                    rewind = raw.tell()
        elif body is not None:
            data = json.dumps(body).encode("utf-8")
            extra["Content-Type"] = "application/json"
        elif method.upper() in ("POST", "PUT", "PATCH"):
            extra["Content-Length"] = "0"
        headers = self._headers(auth, extra)
        target = self._target(path, query)

        attempt = 0
        while True:
            attempt += 1
            # A retry goes on a new connection: the idle ones are as old as the one that
            # turned out stale (and were dropped with it).
            conn = self._take(t) if attempt == 1 else self._new_conn(t)
            reused = conn.sock is not None
            self._set_timeout(conn, t)
            try:
                if rewind is not None and attempt > 1:
                    data.seek(rewind)
                conn.request(method, target, body=data, headers=headers)
                resp = conn.getresponse()
                payload = resp.read()
            except _STALE_ERRORS as e:
                self._drop(conn)
                if reused:
                    self.close()
                can_retry = data is None or rewind is not None or isinstance(
                    data, (bytes, bytearray, memoryview)
                )
                if attempt == 1 and reused and can_retry:
                    continue
                raise SbxConnectionError(
                    "connection to %s lost: %s" % (self._where(), e)
                ) from e
            except socket.timeout as e:
                self._drop(conn)
                raise SbxConnectionError(
                    "request %s %s timed out after %gs" % (method, path, t)
                ) from e
            except (OSError, http.client.HTTPException) as e:
                self._drop(conn)
                raise SbxConnectionError(
                    "cannot reach sbx daemon at %s: %s" % (self._where(), e)
                ) from e
            except BaseException:
                self._drop(conn)  # interrupted mid-answer: the connection's state is unknown
                raise
            if resp.will_close:
                self._drop(conn)
            else:
                self._give_back(conn)
            break
        return _decode(resp.status, resp.reason, payload)

    def _open_stream(
        self,
        method: str,
        path: str,
        body: Any,
        timeout: float,
        accept: str = "application/x-ndjson",
    ) -> Tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        """Open a request on a fresh connection and return it once headers arrive.

        Error statuses are read, the connection closed, and an ApiError raised.
        """
        conn = self._new_conn(timeout)
        data = json.dumps(body).encode("utf-8") if body is not None else b""
        headers = self._headers(True, {"Accept": accept, "Content-Type": "application/json"})
        try:
            conn.request(method, self._target(path, None), body=data, headers=headers)
            resp = conn.getresponse()
        except socket.timeout as e:
            conn.close()
            raise SbxConnectionError("request %s %s timed out after %gs" % (method, path, timeout)) from e
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise SbxConnectionError(
                "cannot reach sbx daemon at %s: %s" % (self._where(), e)
            ) from e
        if not 200 <= resp.status < 300:
            try:
                payload = resp.read()
            except (OSError, http.client.HTTPException):
                payload = b""
            finally:
                conn.close()
            _decode(resp.status, resp.reason, payload)  # raises
        return conn, resp


def _next_event(resp: http.client.HTTPResponse, what: str) -> Optional[Dict[str, Any]]:
    """The next event of an NDJSON stream (keep-alives skipped), or None at its end."""
    while True:
        try:
            line = resp.readline()
        except (OSError, http.client.HTTPException, AttributeError) as e:  # AttributeError: closed
            raise SbxConnectionError("%s broke: %s" % (what, e)) from e
        if not line:
            return None
        line = line.strip()
        if line:
            ev = json.loads(line.decode("utf-8", errors="replace"))
            if isinstance(ev, dict) and ev.get("type") != "keepalive":
                return ev


def _get_bytes(api: "Api", path: str, query: QueryType, timeout: Optional[float] = None) -> bytes:
    """A raw (non-JSON) body, read on a connection of its own; API errors raise. A body
    the daemon cut short (it failed midway) raises SbxConnectionError, never returns short."""
    conn = api._new_conn(api.timeout if timeout is None else timeout)
    try:
        conn.request("GET", api._target(path, query), headers=api._headers(True, {"Accept": "*/*"}))
        resp = conn.getresponse()
        data = resp.read()
    except (OSError, http.client.HTTPException) as e:
        raise SbxConnectionError("reading %s: %s" % (path, e)) from e
    finally:
        conn.close()
    if resp.status >= 300:
        _decode(resp.status, resp.reason, data)  # raises the API error
    return data


def _decode(status: int, reason: str, payload: bytes) -> Any:
    text = payload.decode("utf-8", errors="replace") if payload else ""
    parsed: Any = None
    parse_ok = False
    if text.strip():
        try:
            parsed = json.loads(text)
            parse_ok = True
        except ValueError:
            pass
    if 200 <= status < 300:
        if not text.strip():
            return None
        if not parse_ok:
            raise SbxError("daemon sent a non-JSON answer (HTTP %d): %s" % (status, text[:200]))
        return parsed
    fallback = text.strip()[:500] if not parse_ok else ""
    raise error_from_payload(status, parsed, fallback or reason or "")
