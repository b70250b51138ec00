"""AsyncClient: the Python SDK's names under asyncio, calls running at once."""
import asyncio

import pytest

import sbx


def test_async_client(daemon):
    async def main():
        async with sbx.AsyncClient(url=daemon.url, api_key=daemon.key) as client:
            async with client.create(image="busybox", name="async-one") as sb:
                assert sb.id.startswith("sb-") and sb.state == "running" and sb.name == "async-one"
                r = await sb.exec("echo hi; echo err >&2; exit 3")
                assert (r.stdout, r.stderr, r.exit_code) == ("hi\n", "err\n", 3)
                # Calls run at once, not one after another: the first waits for what the
                # second does (one after another, it would wait until its timeout).
                waiter = sb.exec("while [ ! -e /tmp/go ]; do sleep 0.05; done; echo went", timeout_seconds=20)
                toucher = sb.exec("sleep 0.2; touch /tmp/go")
                w, t = await asyncio.gather(waiter, toucher)
                assert w.stdout == "went\n" and w.exit_code == 0 and t.exit_code == 0
                # Callbacks may be coroutines: they run on this loop.
                seen = []

                async def on_out(chunk):
                    seen.append(chunk)
                await sb.exec("echo streamed", on_stdout=on_out)
                assert "".join(seen) == "streamed\n"
                # Live attributes, files, processes and their async iterators.
                await sb.files.write("/a.txt", "text")
                assert await sb.files.read("/a.txt") == "text"
                p = await sb.processes.start("echo one; echo two")
                out = [ev async for ev in p.output(follow=True)]
                assert "".join(e.get("data", "") for e in out if e["type"] == "stdout") == "one\ntwo\n"
                assert out[-1]["type"] == "exit"
                async with sb.files.watch("/tmp") as w:
                    await sb.exec("touch /tmp/watched")
                    async for ev in w:
                        if ev["path"] == "/tmp/watched":
                            break
                # Errors are the SDK's own.
                with pytest.raises(sbx.NotFoundError):
                    await sb.files.read("/nope")
                with pytest.raises(sbx.NotFoundError):
                    await client.get("sb-0000000000000000")
                # Several sandboxes at once.
                many = await asyncio.gather(*(client.create(image="busybox") for _ in range(3)))
                results = await asyncio.gather(*(m.exec("hostname") for m in many))
                assert [r.stdout.strip() for r in results] == [m.id for m in many]
                await asyncio.gather(*(m.delete() for m in many))
                listed = [s.id for s in await client.list()]
                assert sb.id in listed and not set(m.id for m in many) & set(listed)
                disk = await client.disks.create(name="async-disk")
                await disk.files.write("f", "on disk")
                assert await disk.files.read("f") == "on disk"
                await disk.delete()
            # Leaving `async with` deleted it.
            with pytest.raises(sbx.NotFoundError):
                await client.get(sb.id)
            # The code interpreter: cells and contexts, awaited.
            async with client.create(image="default") as sb:
                await sb.run_code("n = 6")
                ex = await sb.run_code("n * 7")
                assert ex.text == "42" and ex.error is None
                ctx = await sb.code_contexts.create(language="bash")
                assert (await sb.run_code("echo $((n+1))", context=ctx)).logs["stdout"] == ["1\n"]
                assert [c.id for c in await sb.code_contexts.list()] == sorted(["python", ctx.id])
    asyncio.run(main())
