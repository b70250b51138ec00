"""The code interpreter's data and calls: ``sb.run_code(code)`` (contexts: sbx.contexts).

A context is a long-lived interpreter (Python, or a bash session) inside the sandbox;
what one cell defines, the next one sees. Answers have E2B's execution shape.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, TYPE_CHECKING

from .http import _EXEC_GRACE, _drop_none, _next_event
from .errors import SbxConnectionError, error_from_payload

if TYPE_CHECKING:
    from .sandbox import Sandbox


@dataclass
class Result:
    """One result of a cell: the last expression's value (``is_main_result``), or
    something it displayed. ``text`` is its repr; the rich forms are there when the
    object offers them (``png``, ``jpeg`` and ``pdf`` base64, the others text)."""

    text: Optional[str] = None
    html: Optional[str] = None
    markdown: Optional[str] = None
    svg: Optional[str] = None
    png: Optional[str] = None
    jpeg: Optional[str] = None
    pdf: Optional[str] = None
    latex: Optional[str] = None
    json: Any = None
    javascript: Optional[str] = None
    is_main_result: bool = False

    @classmethod
    def _from_json(cls, d: Dict[str, Any]) -> "Result":
        names = ("text", "html", "markdown", "svg", "png", "jpeg", "pdf", "latex", "json", "javascript")
        return cls(is_main_result=bool(d.get("is_main_result")), **{k: d.get(k) for k in names})

    def formats(self) -> List[str]:
        """The forms this result has besides ``text``."""
        return [k for k in ("html", "markdown", "svg", "png", "jpeg", "pdf", "latex", "json", "javascript")
                if getattr(self, k) is not None]


@dataclass
class ExecutionError:
    name: str
    value: str
    traceback: str


@dataclass
class Execution:
    """What a cell did: ``results``, ``logs`` (``{"stdout": [...], "stderr": [...]}``),
    ``error`` (None if it raised nothing), and ``text``, the main result's text."""

    results: List[Result] = field(default_factory=list)
    logs: Dict[str, List[str]] = field(default_factory=lambda: {"stdout": [], "stderr": []})
    error: Optional[ExecutionError] = None
    execution_count: int = 0
    context: str = ""
    timed_out: bool = False
    restarted: bool = False
    truncated: bool = False  # output past the daemon's cap was left out (not when streamed)

    @property
    def text(self) -> Optional[str]:
        for r in self.results:
            if r.is_main_result:
                return r.text
        return None

    @classmethod
    def _from_json(cls, d: Dict[str, Any]) -> "Execution":
        e = d.get("error")
        logs = d.get("logs") or {}
        return cls(
            results=[Result._from_json(r) for r in d.get("results") or []],
            logs={"stdout": list(logs.get("stdout") or []), "stderr": list(logs.get("stderr") or [])},
            error=ExecutionError(e.get("name", ""), e.get("value", ""), e.get("traceback", "")) if e else None,
            execution_count=int(d.get("execution_count") or 0),
            context=d.get("context") or "",
            timed_out=bool(d.get("timed_out")),
            restarted=bool(d.get("restarted")),
            truncated=bool(d.get("truncated")),
        )


@dataclass
class CodeContext:
    id: str
    language: str
    cwd: str = ""
    user: str = ""
    pid: int = 0

    @classmethod
    def _from_json(cls, d: Dict[str, Any]) -> "CodeContext":
        return cls(d["id"], d.get("language", ""), d.get("cwd", ""), d.get("user", ""), int(d.get("pid") or 0))


def _context_id(context: Any) -> Optional[str]:
    """A context's id, from a CodeContext or the id itself."""
    if context is None:
        return None
    return context.id if isinstance(context, CodeContext) else str(context)


def run_code(
    sb: "Sandbox",
    code: str,
    language: Optional[str] = None,
    context: Any = None,
    env: Optional[Dict[str, str]] = None,
    timeout_seconds: Optional[int] = None,
    on_stdout: Optional[Callable[[str], None]] = None,
    on_stderr: Optional[Callable[[str], None]] = None,
    on_result: Optional[Callable[[Result], None]] = None,
    on_error: Optional[Callable[[ExecutionError], None]] = None,
) -> Execution:
    body = _drop_none({"code": code, "language": language, "context": _context_id(context), "env": dict(env) if env else None,
                       "timeout_seconds": timeout_seconds})
    api = sb._client.api
    # The daemon may wait up to the timeout for earlier cells, start an interpreter (30 s),
    # run the cell, and replace a stuck one (3 s, then 30 s).
    http_timeout = max(api.timeout, 2.0 * float(timeout_seconds or 300) + 63 + _EXEC_GRACE)
    if not (on_stdout or on_stderr or on_result or on_error):
        return Execution._from_json(api._call("POST", sb._path("/code"), body=body, timeout=http_timeout) or {})
    conn, resp = api._open_stream("POST", sb._path("/code"), body, http_timeout)
    ex = Execution()
    try:
        while True:
            ev = _next_event(resp, "code stream")
            if ev is None:
                raise SbxConnectionError("the code stream ended before the cell did")
            kind = ev.get("type")
            if kind == "stdout":
                ex.logs["stdout"].append(ev.get("text", ""))
                if on_stdout:
                    on_stdout(ev.get("text", ""))
            elif kind == "stderr":
                ex.logs["stderr"].append(ev.get("text", ""))
                if on_stderr:
                    on_stderr(ev.get("text", ""))
            elif kind == "result":
                r = Result._from_json(ev)
                ex.results.append(r)
                if on_result:
                    on_result(r)
            elif kind == "error" and "error" in ev:  # the daemon's own error mid-stream
                raise error_from_payload(500, {"error": ev["error"]})
            elif kind == "error":
                ex.error = ExecutionError(ev.get("name", ""), ev.get("value", ""), ev.get("traceback", ""))
                if on_error:
                    on_error(ex.error)
            elif kind == "end":
                ex.execution_count = int(ev.get("execution_count") or 0)
                ex.context = ev.get("context") or ""
                ex.timed_out = bool(ev.get("timed_out"))
                ex.restarted = bool(ev.get("restarted"))
                return ex
    finally:
        conn.close()
