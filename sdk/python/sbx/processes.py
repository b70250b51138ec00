"""A sandbox's background processes: ``sandbox.processes``."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Union, TYPE_CHECKING

from .http import _drop_none, _next_event
from .types import Answer

if TYPE_CHECKING:
    from .sandbox import Sandbox
    from .terminal import Terminal

__all__ = ["Process", "Processes"]


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

    def attach(self, since: Optional[int] = None, timeout: float = 3600.0) -> "Terminal":
        """This tty process's terminal (started with ``tty=True``): a :class:`Terminal` to
        type into (``send``), ``resize`` and read (iterate, ``recv``, ``wait``). Output from
        ``since`` (default: what the ring still holds) comes first. 409 for a process
        without a terminal."""
        from .terminal import Terminal
        path = self._path("/tty") + ("" if since is None else "?since=%d" % int(since))
        return Terminal(self._sb._client.api, path, timeout)

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
                ev = _next_event(resp, "output stream")
                if ev is None:
                    return
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
              rows: Optional[int] = None, user: Optional[str] = None) -> Process:
        """Start a background process. With ``tty`` it runs on a pseudo-terminal of
        ``cols`` x ``rows``, reachable as a WebSocket at ``.../processes/{pid}/tty``.
        ``user``: run as that user of the sandbox (a name or a uid) instead of its default (``Sandbox.user``)."""
        body = _drop_none({"cmd": cmd if isinstance(cmd, str) else [str(a) for a in cmd], "cwd": cwd,
                           "env": dict(env) if env is not None else None, "tty": tty or None,
                           "cols": cols, "rows": rows, "user": user})
        return Process(self._sb, self._sb._client.api.request("POST", self._sb._path("/processes"), body=body))

    def list(self) -> List[Process]:
        d = self._sb._client.api.request("GET", self._sb._path("/processes")) or {}
        return [Process(self._sb, p) for p in d.get("processes") or []]

    def get(self, pid: int) -> Process:
        return Process(self._sb, self._sb._client.api.request("GET", self._sb._path("/processes/%d" % int(pid))))
