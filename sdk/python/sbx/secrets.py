"""Daemon secrets: ``client.secrets``."""

from __future__ import annotations

from typing import List, TYPE_CHECKING

from .http import _seg
from .types import Answer

if TYPE_CHECKING:
    from .client import Client

__all__ = ["Secrets"]


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
