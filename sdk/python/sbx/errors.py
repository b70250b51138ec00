"""Exception classes raised by the sbx SDK."""

from __future__ import annotations

from typing import Any, Dict, Optional

__all__ = [
    "SbxError",
    "SbxConnectionError",
    "ApiError",
    "InvalidRequestError",
    "AuthError",
    "NotFoundError",
    "ConflictError",
    "ExecTimeoutError",
    "ExecError",
    "error_from_payload",
]

# Error code -> HTTP status, as documented by the daemon.
_CODE_STATUS = {
    "invalid_request": 400,
    "unauthorized": 401,
    "forbidden": 403,
    "not_found": 404,
    "conflict": 409,
    "too_large": 413,
    "quota_exceeded": 429,
    "internal": 500,
    "unavailable": 503,
    "exec_timeout": 504,
}


class SbxError(Exception):
    """Base class of every error raised by the SDK."""


class SbxConnectionError(SbxError):
    """The daemon could not be reached, or the connection broke mid-request."""


class ApiError(SbxError):
    """The daemon answered with an error (non-2xx status or a streamed error event)."""

    def __init__(self, status: int, code: str, message: str) -> None:
        self.status = status
        self.code = code
        self.message = message
        super().__init__("%s (%s): %s" % (code, status, message))


class InvalidRequestError(ApiError):
    """HTTP 400 / invalid_request."""


class AuthError(ApiError):
    """HTTP 401 or 403 / unauthorized or forbidden."""


class NotFoundError(ApiError):
    """HTTP 404 / not_found."""


class ConflictError(ApiError):
    """HTTP 409 / conflict."""


class QuotaExceededError(ApiError):
    """HTTP 429 / quota_exceeded: past a daemon quota; nothing was changed."""


class ExecTimeoutError(ApiError):
    """HTTP 504 / exec_timeout."""


class ExecError(SbxError):
    """A command run with ``check=True`` exited with a non-zero code."""

    def __init__(self, result: Any, tail_chars: int = 2000) -> None:
        self.result = result
        parts = ["command exited with code %s" % (result.exit_code,)]
        if result.signal is not None:
            parts.append("signal %s" % (result.signal,))
        if result.timed_out:
            parts.append("timed out")
        msg = ", ".join(parts)
        stderr = result.stderr or ""
        if stderr:
            tail = stderr[-tail_chars:]
            if len(stderr) > tail_chars:
                tail = "..." + tail
            msg += "; stderr:\n" + tail.rstrip("\n")
        super().__init__(msg)


def _class_for(status: int, code: str) -> type:
    if code == "invalid_request" or status == 400:
        return InvalidRequestError
    if code in ("unauthorized", "forbidden") or status in (401, 403):
        return AuthError
    if code == "not_found" or status == 404:
        return NotFoundError
    if code == "conflict" or status == 409:
        return ConflictError
    if code == "quota_exceeded" or status == 429:
        return QuotaExceededError
    if code == "exec_timeout" or status == 504:
        return ExecTimeoutError
    return ApiError


def error_from_payload(status: Optional[int], payload: Any, fallback: str = "") -> ApiError:
    """Build the right ApiError subclass from a status and a decoded error body.

    ``payload`` may be the whole body (``{"error": {...}}``), the inner error
    object, or anything else (then ``fallback`` is used as the message).
    """
    err: Dict[str, Any] = {}
    if isinstance(payload, dict):
        inner = payload.get("error")
        if isinstance(inner, dict):
            err = inner
        elif "code" in payload or "message" in payload:
            err = payload
    code = str(err.get("code") or "")
    message = str(err.get("message") or fallback or "")
    if status is None:
        status = _CODE_STATUS.get(code, 500)
    if not code:
        for name, st in _CODE_STATUS.items():
            if st == status:
                code = name
                break
        else:
            code = "http_%d" % status
    if not message:
        message = "request failed with HTTP status %d" % status
    cls = _class_for(status, code)
    exc = cls(status, code, message)
    # The whole body stays reachable: a serverless 504 carries the partial output.
    exc.payload = payload
    return exc
