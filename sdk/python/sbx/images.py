"""Root images: ``client.images``."""

from __future__ import annotations

import os
from typing import Any, Dict, List, TYPE_CHECKING

from .http import _seg

if TYPE_CHECKING:
    from .http import Api

__all__ = ["Images"]


class Images:
    """Image management: ``client.images``."""

    def __init__(self, api: Api) -> None:
        self._api = api

    def list(self) -> List[Dict[str, Any]]:
        d = self._api.request("GET", "/v1/images") or {}
        return list(d.get("images") or [])

    def delete(self, name: str) -> None:
        """Delete image ``name``; ConflictError while a sandbox or snapshot starts from it."""
        self._api.request("DELETE", "/v1/images/" + _seg(name))

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
