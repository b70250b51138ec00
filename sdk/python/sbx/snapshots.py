"""Named snapshots (templates): ``client.snapshots``."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, TYPE_CHECKING

from .http import _seg

if TYPE_CHECKING:
    from .client import Client
    from .types import Answer

__all__ = ["Snapshot", "Snapshots"]


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

    @property
    def user(self) -> str:
        """Who its sandboxes run as when their create names no one: its source's user."""
        return self.data.get("user") or "root"

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
