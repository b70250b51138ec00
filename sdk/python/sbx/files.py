"""A sandbox's files: ``sandbox.files``."""

from __future__ import annotations

import io
import os
import socket
import urllib.parse
from typing import Any, Dict, List, Optional, Tuple, Union, TYPE_CHECKING

from .errors import NotFoundError, SbxConnectionError, SbxError
from .http import _get_bytes, _next_event
from .types import Answer

if TYPE_CHECKING:
    from .http import Api
    from .sandbox import Sandbox

__all__ = ["Files", "FileWatch"]


def _as(query: List[Tuple[str, Any]], user: Optional[str]) -> List[Tuple[str, Any]]:
    """The query, with the user a file call runs as (if one is named)."""
    return query + ([("user", user)] if user is not None else [])


class Files:
    """The files of a running sandbox: ``sb.files``. Paths are absolute inside the sandbox
    and resolve inside its root (symlinks too). A paused sandbox is resumed first.
    ``read``, ``read_bytes``, ``write``, ``list``, ``stat``, ``exists``, ``remove``,
    ``mkdir`` and ``move`` take ``user=`` (a user name or uid of the sandbox): the call then
    runs as that user, so the kernel checks each access as theirs and what it makes is
    theirs."""

    def __init__(self, sandbox: "Sandbox") -> None:
        self._sb = sandbox

    def _api(self) -> "Api":
        return self._sb._client.api

    def read_bytes(self, path: str, user: Optional[str] = None) -> bytes:
        return _get_bytes(self._api(), self._sb._path("/files"), _as([("path", path)], user),
                          timeout=max(self._api().timeout, 600.0))

    def read(self, path: str, encoding: str = "utf-8", user: Optional[str] = None) -> str:
        return self.read_bytes(path, user=user).decode(encoding)

    def write(self, path: str, data: Union[str, bytes, Any], mode: Optional[int] = None,
              parents: bool = True, user: Optional[str] = None) -> Answer:
        """Write a whole file (str, bytes or a binary file object). It appears under
        ``path`` only once complete; ``mode`` is its permission bits (e.g. 0o755)."""
        raw = data.encode() if isinstance(data, str) else data
        query: List[Tuple[str, Any]] = [("path", path)]
        if mode is not None:
            query.append(("mode", "%o" % mode))
        if not parents:
            query.append(("parents", "false"))
        return Answer(self._api()._call("PUT", self._sb._path("/files"), query=_as(query, user), raw=raw,
                                        content_type="application/octet-stream",
                                        timeout=max(self._api().timeout, 600.0)))

    def list(self, path: str = "/", depth: int = 1, user: Optional[str] = None) -> List[Dict[str, Any]]:
        d = self._api().request("GET", self._sb._path("/files/list"),
                                query=_as([("path", path), ("depth", depth)], user))
        return list((d or {}).get("entries") or [])

    def stat(self, path: str, user: Optional[str] = None) -> Dict[str, Any]:
        return dict(self._api().request("GET", self._sb._path("/files/stat"), query=_as([("path", path)], user)) or {})

    def exists(self, path: str, user: Optional[str] = None) -> bool:
        try:
            self.stat(path, user=user)
            return True
        except NotFoundError:
            return False

    def remove(self, path: str, recursive: bool = False, user: Optional[str] = None) -> Answer:
        q = [("path", path)] + ([("recursive", "true")] if recursive else [])
        return Answer(self._api().request("DELETE", self._sb._path("/files"), query=_as(q, user)))

    def mkdir(self, path: str, parents: bool = True, user: Optional[str] = None) -> Answer:
        return Answer(self._api().request("POST", self._sb._path("/files/mkdir"), query=_as([], user),
                                          body={"path": path, "parents": parents}))

    def move(self, src: str, dst: str, overwrite: bool = False, user: Optional[str] = None) -> Answer:
        return Answer(self._api().request("POST", self._sb._path("/files/move"), query=_as([], user),
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

    def watch(self, path: str, recursive: bool = False, timeout: float = 86400.0) -> "FileWatch":
        """Watch the folder ``path`` (and with ``recursive`` the folders under it, on the
        same filesystem): iterate the returned ``FileWatch`` for events, dicts with
        ``type`` (``create``, ``write``, ``remove``, ``rename`` with ``to``, or
        ``overflow``/``error``), ``path`` and ``is_dir``. The watch is in place when this
        returns; it ends when the folder goes, or on ``close()`` (it is a context manager)."""
        return FileWatch(self._api(), self._sb._path("/files/watch") + "?" + urllib.parse.urlencode(
            {"path": path, "recursive": "true" if recursive else "false"}), timeout)

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


class FileWatch:
    """A running watch on a sandbox folder (``sb.files.watch``): an iterator of events."""

    def __init__(self, api: "Api", target: str, timeout: float) -> None:
        self._conn, self._resp = api._open_stream("GET", target, None, timeout)
        first = self._next_line()  # {"type":"watching"}: the agent's watch is in place
        if first is None or first.get("type") != "watching":
            self.close()
            raise SbxConnectionError("the watch did not start: %r" % (first,))

    def _next_line(self) -> Optional[Dict[str, Any]]:
        return _next_event(self._resp, "watch stream")

    def __iter__(self) -> "FileWatch":
        return self

    def __next__(self) -> Dict[str, Any]:
        ev = self._next_line()
        if ev is None:
            self.close()
            raise StopIteration
        return ev

    def close(self) -> None:
        """Stop watching (the agent's watch ends with the connection). Safe from another
        thread than the one iterating: that one's wait ends too."""
        sock = self._conn.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)  # wakes a reader blocked on it
            except OSError:
                pass
        self._conn.close()

    def __enter__(self) -> "FileWatch":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
