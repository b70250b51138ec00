"""HTTP client for the sbx daemon (standard library only)."""

from __future__ import annotations

import http.client
import io
import json
import os
import socket
import threading
import urllib.parse
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from .errors import (
    ExecError,
    ExecTimeoutError,
    NotFoundError,
    SbxConnectionError,
    SbxError,
    error_from_payload,
)

__all__ = [
    "DEFAULT_URL",
    "DEFAULT_TIMEOUT",
    "Api",
    "Client",
    "ExecResult",
    "Images",
    "Sandbox",
    "Timing",
]

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


# --------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------


@dataclass
class Timing:
    """Where the time of an exec went, in milliseconds."""

    queue_ms: float = 0.0
    execute_ms: float = 0.0


@dataclass
class ExecResult:
    """The outcome of one command run in a sandbox."""

    exit_code: int
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    timing: Timing = field(default_factory=Timing)
    cost_usd: float = 0.0
    signal: Optional[int] = None

    @classmethod
    def _from_json(
        cls,
        d: Dict[str, Any],
        stdout: Optional[str] = None,
        stderr: Optional[str] = None,
    ) -> "ExecResult":
        t = d.get("timing") or {}
        code = d.get("exit_code")
        return cls(
            exit_code=int(code) if code is not None else -1,
            stdout=stdout if stdout is not None else (d.get("stdout") or ""),
            stderr=stderr if stderr is not None else (d.get("stderr") or ""),
            timed_out=bool(d.get("timed_out", False)),
            stdout_truncated=bool(d.get("stdout_truncated", False)),
            stderr_truncated=bool(d.get("stderr_truncated", False)),
            timing=Timing(
                queue_ms=float(t.get("queue_ms") or 0.0),
                execute_ms=float(t.get("execute_ms") or 0.0),
            ),
            cost_usd=float(d.get("cost_usd") or 0.0),
            signal=d.get("signal"),
        )


# --------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------


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


class Api:
    """Low-level access to the daemon's JSON API.

    One persistent keep-alive connection is shared by all calls and guarded by
    a lock, so an :class:`Api` (and the :class:`Client` owning it) may be used
    from several threads. Streaming calls use their own connection.
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
        self._lock = threading.Lock()
        self._conn: Optional[http.client.HTTPConnection] = None

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
        """Close the shared connection (it reopens on the next request)."""
        with self._lock:
            self._drop()

    def __del__(self) -> None:
        try:
            self._drop()
        except Exception:
            pass

    # -- internals --------------------------------------------------------

    def _new_conn(self, timeout: float) -> http.client.HTTPConnection:
        if self._scheme == "https":
            return http.client.HTTPSConnection(self._host, self._port, timeout=timeout)
        return http.client.HTTPConnection(self._host, self._port, timeout=timeout)

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:
                pass

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

        with self._lock:
            attempt = 0
            while True:
                attempt += 1
                if self._conn is None:
                    self._conn = self._new_conn(t)
                conn = self._conn
                reused = conn.sock is not None
                self._set_timeout(conn, t)
                try:
                    if rewind is not None and attempt > 1:
                        data.seek(rewind)
                    conn.request(method, target, body=data, headers=headers)
                    resp = conn.getresponse()
                    payload = resp.read()
                except _STALE_ERRORS as e:
                    self._drop()
                    can_retry = data is None or rewind is not None or isinstance(
                        data, (bytes, bytearray, memoryview)
                    )
                    if attempt == 1 and reused and can_retry:
                        continue
                    raise SbxConnectionError(
                        "connection to %s lost: %s" % (self._where(), e)
                    ) from e
                except socket.timeout as e:
                    self._drop()
                    raise SbxConnectionError(
                        "request %s %s timed out after %gs" % (method, path, t)
                    ) from e
                except (OSError, http.client.HTTPException) as e:
                    self._drop()
                    raise SbxConnectionError(
                        "cannot reach sbx daemon at %s: %s" % (self._where(), e)
                    ) from e
                if resp.will_close:
                    self._drop()
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


# --------------------------------------------------------------------------
# High-level objects
# --------------------------------------------------------------------------


class Files:
    """The files of a running sandbox: ``sb.files``. Paths are absolute inside the sandbox
    and resolve inside its root (symlinks too). A paused sandbox is resumed first."""

    def __init__(self, sandbox: "Sandbox") -> None:
        self._sb = sandbox

    def _api(self) -> "Api":
        return self._sb._client.api

    def read_bytes(self, path: str) -> bytes:
        return _get_bytes(self._api(), self._sb._path("/files"), [("path", path)],
                          timeout=max(self._api().timeout, 600.0))

    def read(self, path: str, encoding: str = "utf-8") -> str:
        return self.read_bytes(path).decode(encoding)

    def write(self, path: str, data: Union[str, bytes, Any], mode: Optional[int] = None,
              parents: bool = True) -> Answer:
        """Write a whole file (str, bytes or a binary file object). It appears under
        ``path`` only once complete; ``mode`` is its permission bits (e.g. 0o755)."""
        raw = data.encode() if isinstance(data, str) else data
        query: List[Tuple[str, Any]] = [("path", path)]
        if mode is not None:
            query.append(("mode", "%o" % mode))
        if not parents:
            query.append(("parents", "false"))
        return Answer(self._api()._call("PUT", self._sb._path("/files"), query=query, raw=raw,
                                        content_type="application/octet-stream",
                                        timeout=max(self._api().timeout, 600.0)))

    def list(self, path: str = "/", depth: int = 1) -> List[Dict[str, Any]]:
        d = self._api().request("GET", self._sb._path("/files/list"), query=[("path", path), ("depth", depth)])
        return list((d or {}).get("entries") or [])

    def stat(self, path: str) -> Dict[str, Any]:
        return dict(self._api().request("GET", self._sb._path("/files/stat"), query=[("path", path)]) or {})

    def exists(self, path: str) -> bool:
        try:
            self.stat(path)
            return True
        except NotFoundError:
            return False

    def remove(self, path: str, recursive: bool = False) -> Answer:
        q = [("path", path)] + ([("recursive", "true")] if recursive else [])
        return Answer(self._api().request("DELETE", self._sb._path("/files"), query=q))

    def mkdir(self, path: str, parents: bool = True) -> Answer:
        return Answer(self._api().request("POST", self._sb._path("/files/mkdir"),
                                          body={"path": path, "parents": parents}))

    def move(self, src: str, dst: str, overwrite: bool = False) -> Answer:
        return Answer(self._api().request("POST", self._sb._path("/files/move"),
                                          body={"from": src, "to": dst, "overwrite": overwrite}))

    def upload_dir(self, local_dir: str, remote_dir: str) -> Answer:
        """Copy a local folder's contents into ``remote_dir`` (one tar, streamed)."""
        import tarfile
        import tempfile
        with tempfile.TemporaryFile() as tmp:
            with tarfile.open(fileobj=tmp, mode="w") as tf:
                for name in sorted(os.listdir(local_dir)):
                    tf.add(os.path.join(local_dir, name), arcname=name)
            tmp.seek(0)
            return Answer(self._api()._call("PUT", self._sb._path("/archive"), query=[("path", remote_dir)],
                                            raw=tmp, content_type="application/x-tar",
                                            timeout=max(self._api().timeout, 600.0)))

    def download_dir(self, remote_dir: str, local_dir: str) -> None:
        """Copy ``remote_dir``'s contents into a local folder. The archive is extracted
        with tarfile's "data" filter: nothing lands outside ``local_dir``."""
        import tarfile
        data = _get_bytes(self._api(), self._sb._path("/archive"), [("path", remote_dir)],
                          timeout=max(self._api().timeout, 600.0))
        os.makedirs(local_dir, exist_ok=True)
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tf:
            if hasattr(tarfile, "data_filter"):
                tf.extractall(local_dir, filter="data")
            else:  # Python before 3.11.4: the same checks by hand
                for m in tf.getmembers():
                    inside = not m.name.startswith("/") and ".." not in m.name.split("/")
                    if m.issym():
                        target = os.path.normpath(os.path.join(os.path.dirname(m.name), m.linkname))
                        inside = inside and not m.linkname.startswith("/") and not target.startswith("..")
                    elif not (m.isfile() or m.isdir()):
                        inside = False
                    if not inside:
                        raise SbxError("unsafe archive member %r" % m.name)
                tf.extractall(local_dir)


class Process:
    """A background process in a sandbox (``sb.processes.start(...)``). It runs on its own:
    this handle only talks about it, and any number of handles may exist for one pid."""

    def __init__(self, sandbox: "Sandbox", data: Dict[str, Any]) -> None:
        self._sb = sandbox
        self.pid = int(data["pid"])
        self.data = data

    def __repr__(self) -> str:
        return "Process(pid=%d, state=%r)" % (self.pid, self.data.get("state"))

    def _path(self, suffix: str = "") -> str:
        return self._sb._path("/processes/%d%s" % (self.pid, suffix))

    def info(self) -> Dict[str, Any]:
        self.data = dict(self._sb._client.api.request("GET", self._path()) or {})
        return self.data

    def signal(self, sig: Union[int, str] = "TERM") -> Answer:
        return Answer(self._sb._client.api.request("POST", self._path("/signal"), body={"signal": sig}))

    def kill(self) -> Answer:
        return self.signal("KILL")

    def send_stdin(self, data: str, eof: bool = False) -> Answer:
        return Answer(self._sb._client.api.request("POST", self._path("/stdin"), body={"data": data, "eof": eof}))

    def close_stdin(self) -> Answer:
        return self.send_stdin("", eof=True)

    def resize(self, cols: int, rows: int) -> Answer:
        """A new size for a tty process's terminal."""
        return Answer(self._sb._client.api.request("POST", self._path("/resize"), body={"cols": cols, "rows": rows}))

    def output(self, follow: bool = False, since: int = 0, timeout: float = 3600.0):
        """Yields the output events from sequence number ``since``: dicts of type ``stdout``
        or ``stderr`` (``seq``, ``data``), ``gap`` (output that already left the ring) and,
        once the process has ended, ``exit``. With ``follow`` it waits for more until the
        process ends. To resume after a broken connection, pass the last ``seq`` + 1."""
        api = self._sb._client.api
        path = self._path("/output") + "?since=%d&follow=%s" % (since, "true" if follow else "false")
        conn, resp = api._open_stream("GET", path, None, timeout)
        try:
            while True:
                try:
                    line = resp.readline()
                except (OSError, http.client.HTTPException) as e:
                    raise SbxConnectionError("output stream broke: %s" % e) from e
                if not line:
                    return
                line = line.strip()
                if not line:
                    continue
                ev = json.loads(line.decode("utf-8", errors="replace"))
                if isinstance(ev, dict) and ev.get("type") != "keepalive":
                    yield ev
        finally:
            conn.close()

    def wait(self, timeout: float = 3600.0) -> Dict[str, Any]:
        """Blocks until the process ends; returns its final description (``exit_code``...)."""
        for ev in self.output(follow=True, since=int(self.data.get("next_seq") or 0), timeout=timeout):
            if ev.get("type") == "exit":
                break
        return self.info()


class Processes:
    """Background processes of a sandbox: ``sb.processes``."""

    def __init__(self, sandbox: "Sandbox") -> None:
        self._sb = sandbox

    def start(self, cmd: Union[str, Sequence[str]], cwd: Optional[str] = None,
              env: Optional[Dict[str, str]] = None, tty: bool = False, cols: Optional[int] = None,
              rows: Optional[int] = None) -> Process:
        """Start a background process. With ``tty`` it runs on a pseudo-terminal of
        ``cols`` x ``rows``, reachable as a WebSocket at ``.../processes/{pid}/tty``."""
        body = _drop_none({"cmd": cmd if isinstance(cmd, str) else [str(a) for a in cmd], "cwd": cwd,
                           "env": dict(env) if env is not None else None, "tty": tty or None,
                           "cols": cols, "rows": rows})
        return Process(self._sb, self._sb._client.api.request("POST", self._sb._path("/processes"), body=body))

    def list(self) -> List[Process]:
        d = self._sb._client.api.request("GET", self._sb._path("/processes")) or {}
        return [Process(self._sb, p) for p in d.get("processes") or []]

    def get(self, pid: int) -> Process:
        return Process(self._sb, self._sb._client.api.request("GET", self._sb._path("/processes/%d" % int(pid))))


class Sandbox:
    """A sandbox on the daemon. ``data`` holds its latest JSON description."""

    def __init__(self, client: "Client", data: Dict[str, Any]) -> None:
        self._client = client
        self._id = str(data["id"])
        self.data: Dict[str, Any] = data
        self.files = Files(self)
        self.processes = Processes(self)

    @property
    def id(self) -> str:
        return self._id

    @property
    def name(self) -> Optional[str]:
        return self.data.get("name")

    @property
    def state(self) -> Optional[str]:
        return self.data.get("state")

    def __repr__(self) -> str:
        return "Sandbox(id=%r, name=%r, state=%r)" % (self.id, self.name, self.state)

    def _path(self, suffix: str = "") -> str:
        return "/v1/sandboxes/" + _seg(self._id) + suffix

    def _update(self, d: Any) -> "Sandbox":
        if isinstance(d, dict) and d.get("id") is not None:
            self.data = d
        return self

    # -- lifecycle --------------------------------------------------------

    def refresh(self) -> "Sandbox":
        """Fetch the sandbox again and update ``data``."""
        return self._update(self._client.api.request("GET", self._path()))

    def stop(self) -> "Sandbox":
        return self._update(self._client.api.request("POST", self._path("/stop")))

    def start(self) -> "Sandbox":
        return self._update(self._client.api.request("POST", self._path("/start")))

    def pause(self, mode: str = "freeze") -> "Sandbox":
        """Pause: ``"freeze"`` keeps memory in RAM (resume in milliseconds);
        ``"hibernate"`` checkpoints the processes to disk and frees their memory.
        Compute is not billed while paused. Idempotent."""
        return self._update(self._client.api.request("POST", self._path("/pause"), body={"mode": mode}))

    def resume(self) -> "Sandbox":
        """Resume a paused sandbox (an exec on it resumes it too, unless
        ``auto_resume`` is off). Idempotent."""
        return self._update(self._client.api.request("POST", self._path("/resume")))

    def update(
        self,
        ttl_seconds: Optional[int] = None,
        ttl_action: Optional[str] = None,
        idle_timeout_seconds: Optional[int] = None,
        auto_resume: Optional[bool] = None,
        public: Optional[bool] = None,
    ) -> "Sandbox":
        """Change the lifecycle policy; ``ttl_seconds`` restarts the TTL from now."""
        body = _drop_none(
            {
                "ttl_seconds": ttl_seconds,
                "ttl_action": ttl_action,
                "idle_timeout_seconds": idle_timeout_seconds,
                "auto_resume": auto_resume,
                "public": public,
            }
        )
        return self._update(self._client.api.request("PATCH", self._path(), body=body))

    def set_timeout(self, seconds: int) -> "Sandbox":
        """Extend the TTL: the sandbox now expires ``seconds`` from now."""
        return self._update(self._client.api.request("POST", self._path("/timeout"), body={"timeout_seconds": seconds}))

    def snapshot(self, name: str) -> "Snapshot":
        """Capture this sandbox's files as the immutable named snapshot ``name``.

        A running sandbox is frozen only for the copy and keeps running.
        """
        return Snapshot(self._client, self._client.api.request("POST", self._path("/snapshot"), body={"name": name}))

    def fork(self, count: Optional[int] = None) -> Any:
        """New running sandboxes with a copy-on-write view of this one's files.

        ``fork()`` returns one :class:`Sandbox`; ``fork(count=K)`` returns a list of K.
        """
        body = {} if count is None else {"count": count}
        d = self._client.api.request("POST", self._path("/fork"), body=body) or {}
        made = [Sandbox(self._client, s) for s in (d.get("sandboxes") or [])]
        return made[0] if count is None else made

    def get_url(self, port: int, path: str = "/") -> str:
        """The URL that reaches ``port`` inside the sandbox through the daemon's port proxy
        (send the API key or this sandbox's token as a Bearer header)."""
        api = self._client.api
        return "%s://%s:%d%s/v1/sandboxes/%s/ports/%d%s" % (
            api._scheme, api._host, api._port, api._prefix, _seg(self.id), int(port),
            path if path.startswith("/") else "/" + path)

    def delete(self) -> Any:
        """Delete the sandbox; returns the daemon's answer."""
        return self._client.api.request("DELETE", self._path())

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            self.delete()
        except NotFoundError:
            pass
        except SbxError as e:
            if exc_type is None:
                raise
            # Do not hide the exception that ended the block.
            warnings.warn("could not delete sandbox %s: %s" % (self._id, e), RuntimeWarning)

    # -- exec -------------------------------------------------------------

    def exec(
        self,
        cmd: Union[str, Sequence[str]],
        *,
        cwd: Optional[str] = None,
        env: Optional[Dict[str, str]] = None,
        stdin: Optional[str] = None,
        timeout_seconds: Optional[int] = None,
        check: bool = False,
        on_stdout: Optional[Callback] = None,
        on_stderr: Optional[Callback] = None,
    ) -> ExecResult:
        """Run a command in the sandbox and wait for it.

        ``cmd`` is a string (run by ``/bin/sh -c``) or a list of strings (argv,
        no shell). With ``on_stdout``/``on_stderr`` the output is streamed and
        each callback gets ``str`` chunks as they arrive; the returned result
        still holds the whole output. With ``check=True`` a non-zero exit code
        raises :class:`sbx.ExecError`.
        """
        if isinstance(cmd, str):
            cmd_value: Any = cmd
        else:
            cmd_value = [str(a) for a in cmd]
            if not cmd_value:
                raise ValueError("cmd must not be an empty list")
        body = _drop_none(
            {
                "cmd": cmd_value,
                "cwd": cwd,
                "env": dict(env) if env is not None else None,
                "stdin": stdin,
                "timeout_seconds": timeout_seconds,
            }
        )
        limit = timeout_seconds if timeout_seconds is not None else _SERVER_EXEC_TIMEOUT
        http_timeout = max(self._client.api.timeout, float(limit) + _EXEC_GRACE)

        if on_stdout is None and on_stderr is None:
            d = self._client.api._call("POST", self._path("/exec"), body=body, timeout=http_timeout)
            result = ExecResult._from_json(d or {})
        else:
            result = self._exec_stream(body, http_timeout, on_stdout, on_stderr)
        if check and result.exit_code != 0:
            raise ExecError(result)
        return result

    def _exec_stream(
        self,
        body: Dict[str, Any],
        http_timeout: float,
        on_stdout: Optional[Callback],
        on_stderr: Optional[Callback],
    ) -> ExecResult:
        api = self._client.api
        conn, resp = api._open_stream("POST", self._path("/exec"), body, http_timeout)
        try:
            ctype = (resp.getheader("Content-Type") or "").lower()
            if "ndjson" not in ctype:
                # The daemon answered with a plain JSON result: replay it.
                d = _decode(resp.status, resp.reason, resp.read()) or {}
                result = ExecResult._from_json(d)
                if on_stdout is not None and result.stdout:
                    on_stdout(result.stdout)
                if on_stderr is not None and result.stderr:
                    on_stderr(result.stderr)
                return result
            out: List[str] = []
            err: List[str] = []
            while True:
                try:
                    line = resp.readline()
                except socket.timeout as e:
                    raise SbxConnectionError("exec stream timed out after %gs" % http_timeout) from e
                except (OSError, http.client.HTTPException) as e:
                    raise SbxConnectionError("exec stream broke: %s" % e) from e
                if not line:
                    raise SbxConnectionError("exec stream ended before the command finished")
                line = line.strip()
                if not line:
                    continue
                try:
                    ev = json.loads(line.decode("utf-8", errors="replace"))
                except ValueError:
                    continue
                if not isinstance(ev, dict):
                    continue
                kind = ev.get("type")
                if kind == "stdout":
                    chunk = ev.get("data") or ""
                    out.append(chunk)
                    if on_stdout is not None and chunk:
                        on_stdout(chunk)
                elif kind == "stderr":
                    chunk = ev.get("data") or ""
                    err.append(chunk)
                    if on_stderr is not None and chunk:
                        on_stderr(chunk)
                elif kind == "exit":
                    return ExecResult._from_json(ev, stdout="".join(out), stderr="".join(err))
                elif kind == "error":
                    raise error_from_payload(None, ev)
                # "keepalive" and unknown events are ignored.
        finally:
            conn.close()


class Images:
    """Image management: ``client.images``."""

    def __init__(self, api: Api) -> None:
        self._api = api

    def list(self) -> List[Dict[str, Any]]:
        d = self._api.request("GET", "/v1/images") or {}
        return list(d.get("images") or [])

    def import_tar(self, name: str, path_or_fileobj: Any) -> Dict[str, Any]:
        """Upload a tar archive as image ``name``.

        ``path_or_fileobj`` is a file path, a binary file object, or the
        archive itself as bytes.
        """
        target = "/v1/images/" + _seg(name)
        if isinstance(path_or_fileobj, (bytes, bytearray, memoryview)):
            return self._api._call(
                "POST", target, raw=bytes(path_or_fileobj), content_type="application/x-tar"
            )
        if isinstance(path_or_fileobj, (str, os.PathLike)):
            with open(path_or_fileobj, "rb") as f:
                return self._api._call("POST", target, raw=f, content_type="application/x-tar")
        return self._api._call("POST", target, raw=path_or_fileobj, content_type="application/x-tar")


class Answer:
    """A JSON answer with attribute access (``answer.type``); ``answer.data`` is the dict."""

    def __init__(self, data: Any) -> None:
        self.data = data if isinstance(data, dict) else {}

    def __getattr__(self, key: str) -> Any:
        try:
            return self.__dict__["data"][key]
        except KeyError:
            raise AttributeError(key) from None

    def __repr__(self) -> str:
        return "Answer(%r)" % (self.data,)


class Snapshot:
    """A named snapshot: an immutable template that sandboxes start from (``from_=name``)."""

    def __init__(self, client: "Client", data: Dict[str, Any]) -> None:
        self._client = client
        self.data = dict(data or {})

    @property
    def name(self) -> str:
        return self.data["name"]

    @property
    def size_bytes(self) -> int:
        return int(self.data.get("size_bytes") or 0)

    @property
    def parent(self) -> Optional[str]:
        return self.data.get("parent")

    def __repr__(self) -> str:
        return "Snapshot(%r)" % (self.data.get("name"),)

    def delete(self) -> Answer:
        return self._client.api.delete_named_snapshot(self.name)


class Snapshots:
    """Named snapshots: ``client.snapshots``."""

    def __init__(self, client: "Client") -> None:
        self._client = client

    def list(self) -> List[Snapshot]:
        d = self._client.api.request("GET", "/v1/snapshots") or {}
        return [Snapshot(self._client, x) for x in (d.get("snapshots") or [])]

    def get(self, name: str) -> Snapshot:
        return Snapshot(self._client, self._client.api.request("GET", "/v1/snapshots/" + _seg(name)))

    def delete(self, name: str) -> Answer:
        return self._client.api.delete_named_snapshot(name)


class Client:
    """Entry point of the SDK.

    ``url`` defaults to ``$SBX_URL`` or ``http://127.0.0.1:7070``. ``api_key``
    defaults to ``$SBX_API_KEY``, else the file ``api-key`` in ``$SBX_DATA_DIR``
    (default ``/var/lib/sbx``). ``timeout`` is the per-request timeout in
    seconds (exec requests get at least their own limit plus 30 s).
    """

    def __init__(
        self,
        url: Optional[str] = None,
        api_key: Optional[str] = None,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        if url is None:
            url = os.environ.get("SBX_URL") or DEFAULT_URL
        if api_key is None:
            api_key = _default_api_key()
        self.api = Api(url, api_key, timeout)
        self.images = Images(self.api)
        self.snapshots = Snapshots(self)
        self.disks = Disks(self)
        self.secrets = Secrets(self)

    def __repr__(self) -> str:
        return "Client(url=%r)" % (self.api.url,)

    def close(self) -> None:
        """Close the kept-alive connection."""
        self.api.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.close()

    def health(self) -> Dict[str, Any]:
        return self.api._call("GET", "/v1/health", auth=False)

    def create(
        self,
        type: Optional[str] = None,
        isolation: Optional[str] = None,
        name: Optional[str] = None,
        image: Optional[str] = None,
        from_: Optional[str] = None,
        ttl_seconds: Optional[int] = None,
        ttl_action: Optional[str] = None,
        idle_timeout_seconds: Optional[int] = None,
        no_env: Optional[bool] = None,
        env: Optional[Dict[str, str]] = None,
        metadata: Optional[Dict[str, str]] = None,
        network: Union[str, Dict[str, Any], None] = None,
        auto_resume: Optional[bool] = None,
        resources: Optional[Dict[str, Any]] = None,
        public: Optional[bool] = None,
        **extra: Any,
    ) -> Sandbox:
        """Create a sandbox. Only the arguments given are sent.

        ``from_`` maps to the API's ``from`` field (``**{"from": ...}`` works
        too); ``network`` may be a mode string or a ``{"mode": ...}`` dict.
        """
        if isinstance(network, str):
            network = {"mode": network}
        body = _drop_none(
            {
                "type": type,
                "isolation": isolation,
                "name": name,
                "image": image,
                "from": from_,
                "ttl_seconds": ttl_seconds,
                "ttl_action": ttl_action,
                "idle_timeout_seconds": idle_timeout_seconds,
                "auto_resume": auto_resume,
                "public": public,
                "no_env": no_env,
                "env": dict(env) if env is not None else None,
                "metadata": dict(metadata) if metadata is not None else None,
                "network": network,
                "resources": _drop_none(dict(resources)) if resources is not None else None,
            }
        )
        body.update(_drop_none(extra))
        d = self.api.request("POST", "/v1/sandboxes", body=body)
        return Sandbox(self, d)

    def get(self, id: str) -> Sandbox:
        d = self.api.request("GET", "/v1/sandboxes/" + _seg(id))
        return Sandbox(self, d)

    def usage(self, from_: Any = None, to: Any = None) -> Dict[str, Any]:
        """Billed seconds and cost per sandbox, per type and in total, plus serverless
        calls, within [from_, to). Times are RFC 3339 strings, Unix seconds, or
        ``datetime`` objects; both default to the whole history."""

        def fmt(t: Any) -> Any:
            if t is None or isinstance(t, str):
                return t
            if hasattr(t, "timestamp"):
                return "%.3f" % t.timestamp()
            return str(t)

        return self.api.request("GET", "/v1/usage", query=[("from", fmt(from_)), ("to", fmt(to))])

    def list(
        self,
        name: Optional[str] = None,
        state: Optional[str] = None,
        metadata: Optional[Dict[str, str]] = None,
    ) -> List[Sandbox]:
        query: List[Tuple[str, Any]] = [("name", name), ("state", state)]
        for k, v in (metadata or {}).items():
            query.append(("metadata." + str(k), v))
        d = self.api.request("GET", "/v1/sandboxes", query=query) or {}
        return [Sandbox(self, s) for s in (d.get("sandboxes") or [])]


class Disk:
    """A persistent disk. ``disk.exec(cmd)`` is a serverless call: a fresh sandbox with
    the disk at ``/mnt/disk`` runs one command (in ``/mnt/disk``) and is gone."""

    def __init__(self, client: "Client", data: Dict[str, Any]) -> None:
        self._client = client
        self.data = dict(data or {})

    @property
    def id(self) -> str:
        return self.data["id"]

    @property
    def name(self) -> Optional[str]:
        return self.data.get("name")

    def __repr__(self) -> str:
        return "Disk(%r)" % (self.data.get("id"),)

    def exec(
        self,
        cmd: Union[str, List[str]],
        *,
        cwd: Optional[str] = None,
        env: Optional[Dict[str, str]] = None,
        timeout_seconds: Optional[int] = None,
        image: Optional[str] = None,
        check: bool = False,
    ) -> ExecResult:
        """Run one command in a fresh sandbox on this disk. Past ``timeout_seconds`` (at
        most 300) the daemon answers 504; this raises :class:`ExecTimeoutError` whose
        ``.result`` carries the partial output."""
        body = _drop_none({"cmd": cmd if isinstance(cmd, str) else list(cmd), "cwd": cwd,
                           "env": dict(env) if env is not None else None,
                           "timeout_seconds": timeout_seconds, "image": image})
        http_timeout = max(self._client.api.timeout, float(timeout_seconds or 300) + 60.0)
        try:
            d = self._client.api._call("POST", "/v1/disks/" + _seg(self.id) + "/exec", body=body,
                                       timeout=http_timeout)
        except ExecTimeoutError as e:
            payload = getattr(e, "payload", None)
            if isinstance(payload, dict):
                e.result = ExecResult._from_json(payload)
            raise
        result = ExecResult._from_json(d or {})
        if check and result.exit_code != 0:
            raise ExecError(result)
        return result

    def read_file(self, path: str) -> bytes:
        """A file of the disk, read without starting a sandbox (``path`` resolves inside
        the disk, symlinks included)."""
        return _get_bytes(self._client.api, "/v1/disks/" + _seg(self.id) + "/files", [("path", path)])

    def write_file(self, path: str, data: Union[str, bytes]) -> Dict[str, Any]:
        """Write a file of the disk (whole and atomically; missing parents are created)."""
        raw = data.encode() if isinstance(data, str) else bytes(data)
        return self._client.api._call("PUT", "/v1/disks/" + _seg(self.id) + "/files", query=[("path", path)],
                                      raw=raw, content_type="application/octet-stream")

    def refresh(self) -> "Disk":
        self.data = dict(self._client.api.request("GET", "/v1/disks/" + _seg(self.id)) or {})
        return self

    def delete(self) -> Answer:
        return Answer(self._client.api.request("DELETE", "/v1/disks/" + _seg(self.id)))


class Secrets:
    """Daemon secrets: ``client.secrets``. Values go in and reach sandboxes (as env, unless
    ``no_env``); they never come back out of the API."""

    def __init__(self, client: "Client") -> None:
        self._client = client

    def set(self, name: str, value: str) -> Answer:
        return Answer(self._client.api.request("PUT", "/v1/secrets/" + _seg(name), body={"value": value}))

    def list(self) -> List[str]:
        d = self._client.api.request("GET", "/v1/secrets") or {}
        return [s["name"] for s in (d.get("secrets") or [])]

    def delete(self, name: str) -> Answer:
        return Answer(self._client.api.request("DELETE", "/v1/secrets/" + _seg(name)))


class Disks:
    """Persistent disks: ``client.disks``."""

    def __init__(self, client: "Client") -> None:
        self._client = client

    def create(self, name: Optional[str] = None, size_mb: Optional[int] = None) -> Disk:
        body = _drop_none({"name": name, "size_mb": size_mb})
        return Disk(self._client, self._client.api.request("POST", "/v1/disks", body=body))

    def get(self, id: str) -> Disk:
        return Disk(self._client, self._client.api.request("GET", "/v1/disks/" + _seg(id)))

    def list(self) -> List[Disk]:
        d = self._client.api.request("GET", "/v1/disks") or {}
        return [Disk(self._client, x) for x in (d.get("disks") or [])]
