"""HTTP client for the sbx daemon (standard library only): the entry point, ``Client``."""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Tuple, Union

from .disk import Disk, Disks
from .files import Files
from .http import DEFAULT_DATA_DIR, DEFAULT_TIMEOUT, DEFAULT_URL, Api, _default_api_key, _drop_none, _seg
from .images import Images
from .processes import Process, Processes
from .sandbox import Sandbox
from .secrets import Secrets
from .snapshots import Snapshot, Snapshots
from .types import Answer, ExecResult, Timing

# The entry point, and (re-exported) what this module held before the SDK was split into
# modules, so that ``from sbx.client import Sandbox`` keeps working.
__all__ = ["Client", "Answer", "Api", "DEFAULT_DATA_DIR", "DEFAULT_TIMEOUT", "DEFAULT_URL", "Disk", "Disks",
           "ExecResult", "Files", "Images", "Process", "Processes", "Sandbox", "Secrets", "Snapshot",
           "Snapshots", "Timing"]


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
        no_new_privs: Optional[bool] = None,
        user: Optional[str] = None,
        **extra: Any,
    ) -> Sandbox:
        """Create a sandbox. Only the arguments given are sent.

        ``from_`` maps to the API's ``from`` field (``**{"from": ...}`` works
        too); ``network`` may be a mode string (``"none"``, ``"outbound"``) or a
        ``{"mode": ..., "allow": [...], "deny": [...]}`` dict.
        ``no_new_privs=False`` lets setuid programs (su, sudo) work inside.
        ``user`` is who commands and file operations run as when a call names no
        one (default: ``"user"`` where the image has that user, else ``"root"``).
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
                "no_new_privs": no_new_privs,
                "user": user,
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
