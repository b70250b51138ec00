"""A terminal in the Python SDK: process.attach() over the tty WebSocket."""
import pytest

import sbx


def read_until(term, want):
    got = b""
    while want not in got:
        data = term.recv()
        assert data is not None, f"the terminal ended before {want!r}: {got!r}"
        got += data
    return got


def test_attach_type_resize_exit(daemon, client):
    with client.create(image="busybox") as sb:
        p = sb.processes.start("sh", tty=True, cols=80, rows=24)
        with p.attach() as term:
            term.send("echo $((6 * 7))\n")
            read_until(term, b"42")
            term.resize(100, 30)
            term.send("stty size\n")
            read_until(term, b"30 100")
            term.send(b"exit 5\n")
            assert term.wait() == 5 and term.signal is None
        # Attached again later, the ring's output comes first.
        with p.attach(since=0) as again:
            assert b"42" in b"".join(again) and again.exit_code == 5
        # Under asyncio: the same, awaited, its output an async iterator.
        import asyncio

        async def attach_async():
            async with sbx.AsyncClient(url=daemon.url, api_key=daemon.key) as ac:
                asb = await ac.get(sb.id)
                ap = await asb.processes.start("sh", tty=True)
                term = await ap.attach()
                await term.send("echo $((7 * 6)); exit 3\n")
                got = b""
                async for chunk in term:
                    got += chunk
                assert b"42" in got and term.exit_code == 3
        asyncio.run(attach_async())
        plain = sb.processes.start("sleep 1")
        with pytest.raises(sbx.ConflictError):
            plain.attach()
        with pytest.raises(sbx.NotFoundError):
            sbx.Process(sb, {"pid": 99999}).attach()
