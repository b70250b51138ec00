"""A sandbox: exec (buffered and streamed), lifecycle, snapshots and forks."""

from __future__ import annotations

import base64
import binascii
import http.client
import json
import socket
import warnings
from typing import Any, Dict, List, Optional, Sequence, Union, TYPE_CHECKING

from .code import Execution, run_code
from .contexts import CodeContexts
from .errors import ExecError, NotFoundError, SbxConnectionError, SbxError, error_from_payload
from .files import Files
from .http import _EXEC_GRACE, _SERVER_EXEC_TIMEOUT, _decode, _drop_none, _seg
from .processes import Processes
from .snapshots import Snapshot
from .types import ExecResult

if TYPE_CHECKING:
    from .client import Client
    from .http import Callback

__all__ = ["Sandbox"]


def _unb64(v: Any) -> bytes:
    """The bytes of a base64 field of an exec answer (absent: empty)."""
    if not v:
        return b""
    try:
        return base64.b64decode(v, validate=True)
    except (binascii.Error, ValueError) as e:
        raise SbxError("daemon sent output that is not base64: %s" % e) from e


class Sandbox:
    """A sandbox on the daemon. ``data`` holds its latest JSON description."""

    def __init__(self, client: "Client", data: Dict[str, Any]) -> None:
        self._client = client
        self._id = str(data["id"])
        self.data: Dict[str, Any] = data
        self.files = Files(self)
        self.processes = Processes(self)
        self.code_contexts = CodeContexts(self)

    @property
    def id(self) -> str:
        return self._id

    @property
    def name(self) -> Optional[str]:
        return self.data.get("name")

    @property
    def state(self) -> Optional[str]:
        return self.data.get("state")

    @property
    def user(self) -> Optional[str]:
        """Who its commands and file operations run as when a call names no one."""
        return self.data.get("user")

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

    def set_network(
        self,
        mode: str = "outbound",
        allow: Optional[Sequence[str]] = None,
        deny: Optional[Sequence[str]] = None,
    ) -> "Sandbox":
        """Replace the sandbox's network rules (the whole ``network`` object): new
        connections follow them at once. ``allow`` and ``deny`` take CIDRs and domain
        names (``*.example.com`` for any name below it); deny wins."""
        body = _drop_none({"mode": mode, "allow": list(allow) if allow is not None else None,
                           "deny": list(deny) if deny is not None else None})
        return self._update(self._client.api.request("PATCH", self._path("/network"), body=body))

    @property
    def network(self) -> Dict[str, Any]:
        """The rules, the address while it has a link, and its bytes sent and received."""
        return self.data.get("network") or {}

    def set_timeout(self, seconds: int) -> "Sandbox":
        """Extend the TTL: the sandbox now expires ``seconds`` from now."""
        return self._update(self._client.api.request("POST", self._path("/timeout"), body={"timeout_seconds": seconds}))

    def snapshot(self, name: str, memory: bool = False) -> "Snapshot":
        """Capture this sandbox's files as the immutable named snapshot ``name``.

        A running sandbox is frozen only for the copy and keeps running. With
        ``memory=True`` the snapshot keeps the running sandbox's memory too (every wall;
        containers where sbxd has CRIU): sandboxes created from it start with its processes running.
        """
        body: Dict[str, Any] = {"name": name}
        if memory:
            body["memory"] = True
        return Snapshot(self._client, self._client.api.request("POST", self._path("/snapshot"), body=body))

    def fork(self, count: Optional[int] = None, memory: bool = False) -> Any:
        """New running sandboxes with a copy-on-write view of this one's files.

        ``fork()`` returns one :class:`Sandbox`; ``fork(count=K)`` returns a list of K.
        With ``memory=True`` each starts from this running sandbox's memory too, its
        processes running (every wall; containers where sbxd has CRIU).
        """
        body: Dict[str, Any] = {} if count is None else {"count": count}
        if memory:
            body["memory"] = True
        d = self._client.api.request("POST", self._path("/fork"), body=body) or {}
        made = [Sandbox(self._client, s) for s in (d.get("sandboxes") or [])]
        return made[0] if count is None else made

    def get_url(self, port: int, path: str = "/", signed: bool = False, ttl_seconds: int = 3600) -> str:
        """The URL that reaches ``port`` inside the sandbox through the daemon's port proxy.
        Unsigned, it needs the API key or this sandbox's token as a Bearer header (or the
        sandbox to be ``public``). ``signed=True`` adds a token of its own (``sbx_token``,
        stripped by the proxy before the request reaches the sandbox) that lets anyone
        holding the URL reach this port, and only it, for ``ttl_seconds`` (at most 7 days)."""
        api = self._client.api
        url = "%s://%s:%d%s/v1/sandboxes/%s/ports/%d%s" % (
            api._scheme, api._host, api._port, api._prefix, _seg(self.id), int(port),
            path if path.startswith("/") else "/" + path)
        if not signed:
            return url
        grant = api.request("POST", self._path("/port-urls"), {"port": int(port), "ttl_seconds": int(ttl_seconds)})
        return url + ("&" if "?" in url else "?") + "sbx_token=" + str(grant["token"])

    def wait_for_port(self, port: int, timeout: float = 30.0, interval: float = 0.1) -> "Sandbox":
        """Wait until something in the sandbox listens on TCP ``port`` (any protocol, any
        address), as its kernel's socket table shows; raises ``TimeoutError`` after
        ``timeout`` seconds."""
        import time
        want = "%04X" % int(port)
        deadline = time.monotonic() + timeout
        while True:
            for table in ("/proc/net/tcp", "/proc/net/tcp6"):
                try:
                    text = self.files.read(table)
                except NotFoundError:
                    continue
                for line in text.splitlines()[1:]:
                    fields = line.split()
                    # local_address is ADDR:PORT in hex; state 0A is LISTEN.
                    if len(fields) > 3 and fields[1].rsplit(":", 1)[-1] == want and fields[3] == "0A":
                        return self
            if time.monotonic() >= deadline:
                raise TimeoutError("nothing listens on port %d in sandbox %s after %.1f s" % (port, self.id, timeout))
            time.sleep(interval)

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

    # -- code -------------------------------------------------------------

    def run_code(
        self,
        code: str,
        *,
        language: Optional[str] = None,
        context: Any = None,
        env: Optional[Dict[str, str]] = None,
        timeout_seconds: Optional[int] = None,
        on_stdout: Any = None,
        on_stderr: Any = None,
        on_result: Any = None,
        on_error: Any = None,
    ) -> Execution:
        """Run ``code`` in a long-lived interpreter of the sandbox and return its
        :class:`sbx.code.Execution` (``results``, ``logs``, ``error``, ``text``).

        Without ``context`` it runs in the language's default context (``python``
        unless ``language="bash"``), made on first use; a context from
        ``sb.code_contexts.create()`` keeps its own state. ``env`` is for this cell
        only. Past ``timeout_seconds`` (default 300) the cell is interrupted
        (``timed_out``). The callbacks get output and results as they come.
        """
        return run_code(self, code, language, context, env, timeout_seconds, on_stdout, on_stderr, on_result,
                        on_error)

    # -- exec -------------------------------------------------------------

    def exec(
        self,
        cmd: Union[str, Sequence[str]],
        *,
        cwd: Optional[str] = None,
        env: Optional[Dict[str, str]] = None,
        stdin: Optional[Union[str, bytes]] = None,
        timeout_seconds: Optional[int] = None,
        check: bool = False,
        on_stdout: Optional[Callback] = None,
        on_stderr: Optional[Callback] = None,
        binary: bool = False,
        user: Optional[str] = None,
    ) -> ExecResult:
        """Run a command in the sandbox and wait for it.

        ``cmd`` is a string (run by ``/bin/sh -c``) or a list of strings (argv,
        no shell). With ``on_stdout``/``on_stderr`` the output is streamed and
        each callback gets ``str`` chunks as they arrive; the returned result
        still holds the whole output. With ``check=True`` a non-zero exit code
        raises :class:`sbx.ExecError`.

        Output is text by default (invalid UTF-8 shows as U+FFFD). With
        ``binary=True`` it is exact: ``stdout`` and ``stderr`` are ``bytes``,
        callbacks get ``bytes``, and ``stdin`` may be ``bytes`` (the request's
        ``"encoding": "base64"``).

        ``user`` runs it as that user of the sandbox (a name in its /etc/passwd, such
        as the default image's ``"user"``, or a uid) instead of the sandbox's default
        user (``Sandbox.user``): its ids, its capabilities (none unless root), its HOME,
        and its home as the default ``cwd``.
        """
        if isinstance(stdin, (bytes, bytearray)) and not binary:
            raise TypeError("bytes stdin needs binary=True")
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
                "user": user,
            }
        )
        if binary:
            body["encoding"] = "base64"
            if stdin is not None:
                raw = stdin.encode() if isinstance(stdin, str) else bytes(stdin)
                body["stdin"] = base64.b64encode(raw).decode("ascii")
        limit = timeout_seconds if timeout_seconds is not None else _SERVER_EXEC_TIMEOUT
        http_timeout = max(self._client.api.timeout, float(limit) + _EXEC_GRACE)

        if on_stdout is None and on_stderr is None:
            d = self._client.api._call("POST", self._path("/exec"), body=body, timeout=http_timeout) or {}
            if binary:
                result = ExecResult._from_json(d, stdout=_unb64(d.get("stdout")), stderr=_unb64(d.get("stderr")))
            else:
                result = ExecResult._from_json(d)
        else:
            result = self._exec_stream(body, http_timeout, on_stdout, on_stderr, binary)
        if check and result.exit_code != 0:
            raise ExecError(result)
        return result

    def _exec_stream(
        self,
        body: Dict[str, Any],
        http_timeout: float,
        on_stdout: Optional[Callback],
        on_stderr: Optional[Callback],
        binary: bool = False,
    ) -> ExecResult:
        api = self._client.api
        conn, resp = api._open_stream("POST", self._path("/exec"), body, http_timeout)
        try:
            ctype = (resp.getheader("Content-Type") or "").lower()
            if "ndjson" not in ctype:
                # The daemon answered with a plain JSON result: replay it.
                d = _decode(resp.status, resp.reason, resp.read()) or {}
                if binary:
                    result = ExecResult._from_json(d, stdout=_unb64(d.get("stdout")), stderr=_unb64(d.get("stderr")))
                else:
                    result = ExecResult._from_json(d)
                if on_stdout is not None and result.stdout:
                    on_stdout(result.stdout)
                if on_stderr is not None and result.stderr:
                    on_stderr(result.stderr)
                return result
            out: List[Any] = []
            err: List[Any] = []
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
                    chunk = _unb64(ev.get("data")) if binary else (ev.get("data") or "")
                    out.append(chunk)
                    if on_stdout is not None and chunk:
                        on_stdout(chunk)
                elif kind == "stderr":
                    chunk = _unb64(ev.get("data")) if binary else (ev.get("data") or "")
                    err.append(chunk)
                    if on_stderr is not None and chunk:
                        on_stderr(chunk)
                elif kind == "exit":
                    joiner = b"" if binary else ""
                    return ExecResult._from_json(ev, stdout=joiner.join(out), stderr=joiner.join(err))
                elif kind == "error":
                    raise error_from_payload(None, ev)
                # "keepalive" and unknown events are ignored.
        finally:
            conn.close()
