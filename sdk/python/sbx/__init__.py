"""Python SDK for the sbx sandbox daemon.

    from sbx import Client
    client = Client()
    with client.create(image="busybox", ttl_seconds=600) as sb:
        print(sb.exec("echo hello", check=True).stdout)

``AsyncClient`` (sbx.aio) has the same names for asyncio: ``await sb.exec(...)``.
"""

from .aio import AsyncClient
from .client import Client
from .code import CodeContext, Execution, ExecutionError, Result
from .contexts import CodeContexts
from .disk import Disk, Disks
from .files import Files, FileWatch
from .http import Api
from .images import Images
from .processes import Process, Processes
from .sandbox import Sandbox
from .secrets import Secrets
from .snapshots import Snapshot, Snapshots
from .terminal import Terminal
from .types import Answer, ExecResult, Timing
from .errors import (
    ApiError,
    AuthError,
    ConflictError,
    ExecError,
    ExecTimeoutError,
    InvalidRequestError,
    NotFoundError,
    QuotaExceededError,
    SbxConnectionError,
    SbxError,
)

__version__ = "0.1.0"

__all__ = [
    "__version__",
    "Client",
    "AsyncClient",
    "FileWatch",
    "Terminal",
    "Sandbox",
    "Files",
    "Process",
    "Processes",
    "ExecResult",
    "Timing",
    "CodeContext",
    "CodeContexts",
    "Execution",
    "ExecutionError",
    "Result",
    "Images",
    "Snapshot",
    "Snapshots",
    "Answer",
    "Disk",
    "Disks",
    "Secrets",
    "Api",
    "SbxError",
    "SbxConnectionError",
    "ApiError",
    "InvalidRequestError",
    "AuthError",
    "NotFoundError",
    "QuotaExceededError",
    "ConflictError",
    "ExecTimeoutError",
    "ExecError",
]
