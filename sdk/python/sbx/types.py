"""Result types of the sbx SDK: exec results and their timing, and plain JSON answers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Union

__all__ = ["Timing", "ExecResult", "Answer"]


@dataclass
class Timing:
    """Where the time of an exec went, in milliseconds."""

    queue_ms: float = 0.0
    execute_ms: float = 0.0


@dataclass
class ExecResult:
    """The outcome of one command run in a sandbox."""

    exit_code: int
    stdout: Union[str, bytes] = ""  # bytes for an exec with binary=True
    stderr: Union[str, bytes] = ""
    timed_out: bool = False
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    timing: Timing = field(default_factory=Timing)
    cost_usd: float = 0.0
    signal: Optional[int] = None

    @classmethod
    def _from_json(
        cls,
        d: Dict[str, Any],
        stdout: Optional[Union[str, bytes]] = None,
        stderr: Optional[Union[str, bytes]] = None,
    ) -> "ExecResult":
        t = d.get("timing") or {}
        code = d.get("exit_code")
        return cls(
            exit_code=int(code) if code is not None else -1,
            stdout=stdout if stdout is not None else (d.get("stdout") or ""),
            stderr=stderr if stderr is not None else (d.get("stderr") or ""),
            timed_out=bool(d.get("timed_out", False)),
            stdout_truncated=bool(d.get("stdout_truncated", False)),
            stderr_truncated=bool(d.get("stderr_truncated", False)),
            timing=Timing(
                queue_ms=float(t.get("queue_ms") or 0.0),
                execute_ms=float(t.get("execute_ms") or 0.0),
            ),
            cost_usd=float(d.get("cost_usd") or 0.0),
            signal=d.get("signal"),
        )


class Answer:
    """A JSON answer with attribute access (``answer.type``); ``answer.data`` is the dict."""

    def __init__(self, data: Any) -> None:
        self.data = data if isinstance(data, dict) else {}

    def __getattr__(self, key: str) -> Any:
        try:
            return self.__dict__["data"][key]
        except KeyError:
            raise AttributeError(key) from None

    def __repr__(self) -> str:
        return "Answer(%r)" % (self.data,)
