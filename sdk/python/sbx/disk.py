"""Persistent disks and serverless calls on them: ``client.disks``."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Union, TYPE_CHECKING

from .errors import ExecError, ExecTimeoutError
from .http import _drop_none, _get_bytes, _seg
from .types import Answer, ExecResult

if TYPE_CHECKING:
    from .client import Client

__all__ = ["Disk", "DiskFiles", "Disks"]


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
        network: Union[str, Dict[str, Any], None] = None,
        isolation: Optional[str] = None,
        check: bool = False,
    ) -> ExecResult:
        """Run one command in a fresh sandbox on this disk. Past ``timeout_seconds`` (at
        most 300) the daemon answers 504; this raises :class:`ExecTimeoutError` whose
        ``.result`` carries the partial output. ``network`` is the call's sandbox's
        (a mode string or a ``{"mode", "allow", "deny"}`` dict; the daemon's default
        mode otherwise). ``isolation`` is the call's wall (``"container"``,
        ``"gvisor"``; the daemon's default otherwise)."""
        if isinstance(network, str):
            network = {"mode": network}
        body = _drop_none({"cmd": cmd if isinstance(cmd, str) else list(cmd), "cwd": cwd,
                           "env": dict(env) if env is not None else None,
                           "timeout_seconds": timeout_seconds, "image": image, "network": network,
                           "isolation": isolation})
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

    @property
    def files(self) -> "DiskFiles":
        """The disk's files without a sandbox, in the shape of ``sandbox.files``:
        ``read`` (text), ``read_bytes`` and ``write``."""
        return DiskFiles(self)

    def read_file(self, path: str) -> bytes:
        """The bytes of a file of the disk (``disk.files.read_bytes``; ``disk.files.read``
        gives text)."""
        return self.files.read_bytes(path)

    def write_file(self, path: str, data: Union[str, bytes]) -> Dict[str, Any]:
        """``disk.files.write``."""
        return self.files.write(path, data)

    def refresh(self) -> "Disk":
        self.data = dict(self._client.api.request("GET", "/v1/disks/" + _seg(self.id)) or {})
        return self

    def delete(self) -> Answer:
        return Answer(self._client.api.request("DELETE", "/v1/disks/" + _seg(self.id)))


class DiskFiles:
    """A disk's files, read and written without starting a sandbox: ``disk.files``.
    ``path`` resolves inside the disk, symlinks included."""

    def __init__(self, disk: Disk) -> None:
        self._disk = disk

    def _url(self) -> str:
        return "/v1/disks/" + _seg(self._disk.id) + "/files"

    def read_bytes(self, path: str) -> bytes:
        return _get_bytes(self._disk._client.api, self._url(), [("path", path)])

    def read(self, path: str, encoding: str = "utf-8") -> str:
        return self.read_bytes(path).decode(encoding)

    def write(self, path: str, data: Union[str, bytes]) -> Dict[str, Any]:
        """Write a whole file (atomically; missing parents are created)."""
        raw = data.encode() if isinstance(data, str) else bytes(data)
        return self._disk._client.api._call("PUT", self._url(), query=[("path", path)],
                                            raw=raw, content_type="application/octet-stream")


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
