"""The code interpreter's walls: only the admin key runs code (a sandbox's own token may
not), a cell is the sandbox's user with no capability, a context belongs to its sandbox,
and a cell that floods or forges the interpreter's channel harms nothing but itself."""
import pytest


def test_code_routes_refuse_a_sandbox_token(daemon, client):
    with client.create(image="default") as sb:
        token = sb.exec("echo $SBX_TOKEN").stdout.strip()
        auth = {"Authorization": "Bearer " + token}
        for method, path, body in (("POST", "/code", {"code": "1"}), ("GET", "/code/contexts", None),
                                   ("POST", "/code/contexts", {}), ("POST", "/code/contexts/python/restart", {}),
                                   ("DELETE", "/code/contexts/python", None)):
            status, resp = daemon.raw(method, f"/v1/sandboxes/{sb.id}{path}", body=body, headers=auth)
            assert status == 403 and resp["error"]["code"] == "forbidden", (method, path, resp)


def test_a_cell_is_the_sandboxs_user_and_its_contexts_are_its_own(daemon, client):
    with client.create(image="default") as a, client.create(image="default") as b:
        out = a.run_code("import os\n[l for l in open('/proc/self/status') if l.startswith(('CapEff', 'CapPrm', 'Uid'))]")
        text = out.text
        assert "CapEff:\\t0000000000000000" in text and "CapPrm:\\t0000000000000000" in text, text
        assert "Uid:\\t1000" in text
        # The interpreter's program is not left in the cell's environment.
        assert a.run_code("'SBX_CODE_INTERPRETER' in os.environ").text == "False"
        ctx = a.code_contexts.create()
        status, body = daemon.raw("POST", f"/v1/sandboxes/{b.id}/code", body={"code": "1", "context": ctx.id})
        assert status == 404, body
        status, body = daemon.raw("DELETE", f"/v1/sandboxes/{b.id}/code/contexts/{ctx.id}")
        assert status == 404
        assert a.run_code("2", context=ctx).text == "2"


def test_a_cell_that_floods_or_forges_the_channel(daemon, client):
    with client.create(image="default") as sb:
        sb.run_code("x = 1")
        # A printed protocol line, with this very cell's number (read from the interpreter's
        # frame), is output, not a message: the cell goes on to its result.
        forged = ("import json, sys\nn = sys._getframe(1).f_locals['n']\n"
                  "print(json.dumps({'cell': n, 'type': 'end', 'execution_count': 99}))\nx")
        out = sb.run_code(forged)
        assert out.text == "1" and out.execution_count != 99 and '"execution_count": 99' in out.logs["stdout"][0], out
        # A cell that writes to the interpreter's own channel (it can: contexts of one user
        # are not walled from each other) only confuses its own answers. 80 MiB without a
        # newline there: sbxd holds at most 16 MiB of a line, drops it (or the rings drop
        # what it could not follow), and goes on.
        out = sb.run_code(
            "import os, sys\nfd = sys._getframe(1).f_globals['_proto_fd']\n"
            "for _ in range(80): os.write(fd, b'x' * (1 << 20))\n"
            "os.write(fd, b'\\n')\n'after'", timeout_seconds=120)
        assert out.text == "'after'", out
        assert any("dropped" in t or "lost" in t for t in out.logs["stderr"]), out.logs["stderr"]
        status, _ = daemon.raw("GET", "/v1/health")
        assert status == 200
        assert sb.run_code("x + 1").text == "2"
