"""The asyncio client: ``AsyncClient``, with the names of ``Client``, awaited.

    import asyncio
    from sbx import AsyncClient

    async def main():
        async with AsyncClient() as client:
            async with client.create(image="busybox") as sb:
                r = await sb.exec("echo hi")
                async for ev in (await sb.processes.start("ls /")).output(follow=True):
                    print(ev)

    asyncio.run(main())

Every call of the synchronous SDK runs on a worker thread of the client's own pool (at
most ``max_workers`` calls in flight, each on its own connection from the pool of
keep-alive connections), so the event loop never blocks on sbxd, and the two clients can
never disagree: one implementation, two ways to call it. Objects come back wrapped
(``Sandbox``, ``Files``, ``Process``, ``Disk``...): their methods are coroutines, their
properties (``id``, ``state``, ``data``) plain values, and their iterators (process
output, file watches, exec streams) async iterators.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import inspect
from typing import Any, Callable, Optional

from .client import Client
from .http import DEFAULT_TIMEOUT

__all__ = ["AsyncClient"]

# The SDK's modules whose objects have methods that talk to sbxd (the rest, such as
# ExecResult or Answer, are plain data and come back as they are).
_LIVE_MODULES = ("sbx.client", "sbx.sandbox", "sbx.files", "sbx.processes", "sbx.disk",
                 "sbx.snapshots", "sbx.images", "sbx.secrets", "sbx.http", "sbx.terminal", "sbx.contexts")


def _is_live(value: Any) -> bool:
    return type(value).__module__ in _LIVE_MODULES and not isinstance(value, type)


class _Runner:
    """Runs synchronous calls on the client's worker threads."""

    def __init__(self, max_workers: int) -> None:
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers, thread_name_prefix="sbx-aio")

    async def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.pool, functools.partial(fn, *args, **kwargs))

    def wrap(self, value: Any) -> Any:
        """What a synchronous call returned, as the async side sees it."""
        if inspect.isgenerator(value) or (_is_live(value) and hasattr(value, "__next__")):
            return _AsyncIterator(self, value)
        if _is_live(value):
            return _Async(self, value)
        if isinstance(value, list) and any(_is_live(v) for v in value):
            return [self.wrap(v) for v in value]
        return value


def _on_loop(fn: Callable[..., Any], loop: asyncio.AbstractEventLoop) -> Callable[..., Any]:
    def call(*args: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(fn(*args), loop).result()
    return call


class _Call:
    """A pending call: ``await`` it for its result, or ``async with`` it when the result
    is a context manager (``async with client.create(...) as sb``)."""

    def __init__(self, runner: _Runner, fn: Callable[..., Any], args: Any, kwargs: Any) -> None:
        self._runner, self._fn, self._args, self._kwargs = runner, fn, args, kwargs
        self._entered: Any = None

    async def _result(self) -> Any:
        # Callbacks (exec's on_stdout, on_stderr) are called on the worker thread; a
        # coroutine function is run on this loop instead, the worker waiting for it.
        loop = asyncio.get_running_loop()
        kwargs = {k: _on_loop(v, loop) if inspect.iscoroutinefunction(v) else v for k, v in self._kwargs.items()}
        return self._runner.wrap(await self._runner.run(self._fn, *self._args, **kwargs))

    def __await__(self) -> Any:
        return self._result().__await__()

    def __aiter__(self) -> Any:
        """``async for ev in p.output(follow=True)``: the call, then its iterator."""
        return self._iterate()

    async def _iterate(self) -> Any:
        it = await self._result()
        if not isinstance(it, _AsyncIterator):
            raise TypeError("%s does not return an iterator" % getattr(self._fn, "__name__", "this call"))
        try:
            async for value in it:
                yield value
        finally:
            await it.aclose()

    async def __aenter__(self) -> Any:
        self._entered = await self._result()
        return await self._entered.__aenter__()

    async def __aexit__(self, *exc: Any) -> Any:
        return await self._entered.__aexit__(*exc)


class _Async:
    """An SDK object seen from asyncio: methods are coroutines (``_Call``), live
    attributes (``sb.files``) are wrapped in turn, plain values pass through."""

    def __init__(self, runner: _Runner, obj: Any) -> None:
        object.__setattr__(self, "_runner", runner)
        object.__setattr__(self, "_obj", obj)

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._obj, name)
        if inspect.ismethod(value) or inspect.isfunction(value):
            return functools.wraps(value)(lambda *a, **kw: _Call(self._runner, value, a, kw))
        return self._runner.wrap(value)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._obj, name, value)

    def __repr__(self) -> str:
        return "Async" + repr(self._obj)

    @property
    def sync(self) -> Any:
        """The synchronous object behind this one."""
        return self._obj

    def __aiter__(self) -> "_AsyncIterator":
        """An iterable SDK object (a Terminal's output): its iterator, stepped on a worker."""
        if not hasattr(self._obj, "__iter__"):
            raise TypeError("%s is not iterable" % type(self._obj).__name__)
        return _AsyncIterator(self._runner, iter(self._obj))

    async def __aenter__(self) -> "_Async":
        if hasattr(self._obj, "__enter__"):
            await self._runner.run(self._obj.__enter__)
        return self

    async def __aexit__(self, *exc: Any) -> Any:
        if hasattr(self._obj, "__exit__"):
            return await self._runner.run(self._obj.__exit__, *exc)
        return None


class _AsyncIterator:
    """A blocking iterator of the SDK (process output, a file watch) as an async one: each
    step waits on a worker thread. ``aclose()`` (or leaving ``async with``) stops it."""

    def __init__(self, runner: _Runner, it: Any) -> None:
        self._runner = runner
        self._it = it

    def __aiter__(self) -> "_AsyncIterator":
        return self

    async def __anext__(self) -> Any:
        done = object()
        value = await self._runner.run(next, self._it, done)
        if value is done:
            raise StopAsyncIteration
        return self._runner.wrap(value)

    async def aclose(self) -> None:
        close = getattr(self._it, "close", None)
        if close is None:
            return
        try:
            close()  # a watch's close wakes the worker blocked on it; a generator's ends it
        except ValueError:
            pass  # a generator a worker is inside: it ends at its next line

    async def __aenter__(self) -> "_AsyncIterator":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()


class AsyncClient(_Async):
    """The asyncio twin of :class:`sbx.Client`: the same arguments and names, every call
    awaited. ``max_workers`` bounds the calls in flight at once (each holds a worker
    thread while sbxd works on it: a long exec or a followed output holds one to its
    end). ``async with AsyncClient() as client`` closes it at the end."""

    def __init__(self, url: Optional[str] = None, api_key: Optional[str] = None,
                 timeout: float = DEFAULT_TIMEOUT, max_workers: int = 64) -> None:
        super().__init__(_Runner(max_workers), Client(url=url, api_key=api_key, timeout=timeout))

    async def close(self) -> None:
        """Closes the idle connections and lets the worker threads go."""
        self._obj.close()
        self._runner.pool.shutdown(wait=False)

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()
