"""``sb.code_contexts``: the code interpreter's contexts of a sandbox."""

from __future__ import annotations

from typing import Any, List, Optional, TYPE_CHECKING

from .code import CodeContext, _context_id
from .http import _drop_none, _seg

if TYPE_CHECKING:
    from .sandbox import Sandbox


class CodeContexts:
    """``sb.code_contexts``: ``create(language=, cwd=, user=)``, ``list()``,
    ``restart(ctx)``, ``delete(ctx)`` (a context or its id)."""

    def __init__(self, sandbox: "Sandbox") -> None:
        self._sb = sandbox

    def _path(self, suffix: str = "") -> str:
        return self._sb._path("/code/contexts" + suffix)

    def create(self, language: str = "python", cwd: Optional[str] = None, user: Optional[str] = None) -> CodeContext:
        body = _drop_none({"language": language, "cwd": cwd, "user": user})
        return CodeContext._from_json(self._sb._client.api.request("POST", self._path(), body=body))

    def list(self) -> List[CodeContext]:
        d = self._sb._client.api.request("GET", self._path()) or {}
        return [CodeContext._from_json(c) for c in d.get("contexts") or []]

    def restart(self, context: Any) -> CodeContext:
        cid = _context_id(context)
        return CodeContext._from_json(self._sb._client.api.request("POST", self._path("/" + _seg(cid) + "/restart"), body={}))

    def delete(self, context: Any) -> Any:
        cid = _context_id(context)
        return self._sb._client.api.request("DELETE", self._path("/" + _seg(cid)))
