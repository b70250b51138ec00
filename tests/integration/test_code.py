"""The code interpreter: `POST /v1/sandboxes/{id}/code` and its contexts, through the API,
the Python SDK and the CLI; state that lasts within a context and not across them, rich
results, errors, timeouts, bash sessions, and contexts that outlive sbxd."""
import base64
import json
import signal
import threading
import time

import pytest
from sbx import SbxError

PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==")


def code(daemon, sid, **body):
    status, out = daemon.raw("POST", f"/v1/sandboxes/{sid}/code", body=body)
    assert status == 200, out
    return out


def test_state_results_and_errors(daemon, client):
    with client.create(image="default") as sb:
        out = code(daemon, sb.id, code="x = 41\nprint('hi')\nx + 1")
        assert out["results"] == [{"is_main_result": True, "text": "42"}], out
        assert out["logs"] == {"stdout": ["hi\n"], "stderr": []} and out["error"] is None
        assert out["context"] == "python" and out["execution_count"] == 1 and not out["timed_out"]
        # The state lasts: imports, variables, the working directory; output of any kind.
        out = code(daemon, sb.id, code="import os, subprocess, sys\nos.chdir('/tmp')\n"
                                        "subprocess.run(['echo', 'from a child'])\nprint('err', file=sys.stderr)\n"
                                        "os.write(1, b'raw\\n')\nx")
        assert "".join(out["logs"]["stdout"]) == "from a child\nraw\n", out
        assert out["logs"]["stderr"] == ["err\n"] and out["results"][0]["text"] == "41"
        assert code(daemon, sb.id, code="os.getcwd(), os.getuid()")["results"][0]["text"] == "('/tmp', 1000)"
        # Errors: E2B's shape, with the cell's own frames.
        out = code(daemon, sb.id, code="def f():\n    return 1 / 0\nf()")
        err = out["error"]
        assert err["name"] == "ZeroDivisionError" and err["value"] == "division by zero", out
        assert 'File "<cell-' in err["traceback"] and "return 1 / 0" in err["traceback"]
        assert "code_interpreter" not in err["traceback"] and "exec(" not in err["traceback"]
        out = code(daemon, sb.id, code="def broken(:")
        assert out["error"]["name"] == "SyntaxError" and out["results"] == []
        # A cell's stdin is empty: it cannot read the interpreter's requests.
        assert code(daemon, sb.id, code="input()")["error"]["name"] == "EOFError"
        # Rich results, and display().
        out = code(daemon, sb.id, code=(
            "import base64\n"
            "class Pic:\n"
            "    def _repr_png_(self): return base64.b64decode(%r)\n"
            "    def _repr_html_(self): return '<b>pic</b>'\n"
            "    def __repr__(self): return 'Pic()'\n"
            "display({'a': 1})\nPic()") % base64.b64encode(PNG).decode())
        assert len(out["results"]) == 2, out
        shown, main = out["results"]
        assert shown == {"is_main_result": False, "text": "{'a': 1}"}
        assert main["is_main_result"] and main["text"] == "Pic()" and main["html"] == "<b>pic</b>"
        assert base64.b64decode(main["png"]) == PNG
        # A cell's env is for that cell.
        out = code(daemon, sb.id, code="os.environ.get('ONLY_NOW')", env={"ONLY_NOW": "yes"})
        assert out["results"][0]["text"] == "'yes'"
        assert code(daemon, sb.id, code="os.environ.get('ONLY_NOW', 'unset')")["results"][0]["text"] == "'unset'"
        # exit() does not end the context.
        assert code(daemon, sb.id, code="exit(3)")["error"]["name"] == "SystemExit"
        assert code(daemon, sb.id, code="x")["results"][0]["text"] == "41"
        # The context is a background process of the sandbox, as its user.
        procs = [p for p in sb.processes.list() if p.data["cmd"][:1] == ["python3"]]
        assert [p.data["user"] for p in procs] == ["user"]


def test_contexts(daemon, client):
    with client.create(image="default") as sb:
        code(daemon, sb.id, code="shared = 1")
        status, ctx = daemon.raw("POST", f"/v1/sandboxes/{sb.id}/code/contexts",
                                 body={"language": "python", "cwd": "/tmp", "user": "root"})
        assert status == 201 and ctx["id"].startswith("ctx-") and ctx["cwd"] == "/tmp" and ctx["user"] == "root", ctx
        # Contexts do not share state.
        out = code(daemon, sb.id, code="'shared' in dir(), os.getcwd() if 'os' in dir() else __import__('os').getcwd()",
                   context=ctx["id"])
        assert out["results"][0]["text"] == "(False, '/tmp')" and out["context"] == ctx["id"], out
        code(daemon, sb.id, code="mine = 2", context=ctx["id"])
        status, listed = daemon.raw("GET", f"/v1/sandboxes/{sb.id}/code/contexts")
        assert status == 200 and {c["id"] for c in listed["contexts"]} == {"python", ctx["id"]}
        # A restart empties it, and keeps its id, language, cwd and user.
        status, again = daemon.raw("POST", f"/v1/sandboxes/{sb.id}/code/contexts/{ctx['id']}/restart", body={})
        assert status == 200 and again["id"] == ctx["id"] and again["pid"] != ctx["pid"] and again["user"] == "root"
        out = code(daemon, sb.id, code="'mine' in dir()", context=ctx["id"])
        assert out["results"][0]["text"] == "False" and out["execution_count"] == 1
        # Deleted: gone from the list, and 404 after.
        status, _ = daemon.raw("DELETE", f"/v1/sandboxes/{sb.id}/code/contexts/{ctx['id']}")
        assert status == 200
        status, body = daemon.raw("POST", f"/v1/sandboxes/{sb.id}/code", body={"code": "1", "context": ctx["id"]})
        assert status == 404 and body["error"]["code"] == "not_found", body
        # Bad input: clear errors, and the default context untouched.
        for bad in ({"code": 5}, {}, {"code": "1", "language": "ruby"}, {"code": "1", "context": "Bad/Id"},
                    {"code": "1", "timeout_seconds": 0}, {"code": "1", "context": "python", "language": "bash"},
                    {"code": "1", "extra": True}):
            status, body = daemon.raw("POST", f"/v1/sandboxes/{sb.id}/code", body=bad)
            assert status == 400 and body["error"]["code"] == "invalid_request", (bad, body)
        status, body = daemon.raw("POST", f"/v1/sandboxes/{sb.id}/code/contexts", body={"language": "ruby"})
        assert status == 400
        status, body = daemon.raw("POST", "/v1/sandboxes/sb-nosuch/code", body={"code": "1"})
        assert status == 404
        assert code(daemon, sb.id, code="shared")["results"][0]["text"] == "1"
    # An image without python3 says so.
    with client.create(image="busybox") as sb:
        status, body = daemon.raw("POST", f"/v1/sandboxes/{sb.id}/code", body={"code": "1"})
        assert status == 409 and "python3" in body["error"]["message"], body


def test_timeouts_and_a_dying_interpreter(daemon, client):
    with client.create(image="default") as sb:
        code(daemon, sb.id, code="kept = 'still here'")
        # Interrupted: KeyboardInterrupt, and the state lives on.
        out = code(daemon, sb.id, code="import time\ntime.sleep(60)", timeout_seconds=1)
        assert out["timed_out"] and out["error"]["name"] == "KeyboardInterrupt" and not out["restarted"], out
        assert code(daemon, sb.id, code="kept")["results"][0]["text"] == "'still here'"
        # A cell that ignores the interrupt: its interpreter is replaced, and the answer says so.
        out = code(daemon, sb.id, timeout_seconds=1, code=(
            "import time\nwhile True:\n    try:\n        time.sleep(10)\n    except KeyboardInterrupt:\n        pass"))
        assert out["timed_out"] and out["restarted"] and out["error"]["name"] == "TimeoutError", out
        out = code(daemon, sb.id, code="'kept' in dir()")
        assert out["results"][0]["text"] == "False" and out["execution_count"] == 1
        # An interpreter that exits mid-cell.
        out = code(daemon, sb.id, code="import os\nos._exit(3)")
        assert out["restarted"] and out["error"]["name"] == "ContextDied" and "status 3" in out["error"]["value"]
        assert code(daemon, sb.id, code="1 + 1")["results"][0]["text"] == "2"


def test_bash_sessions(daemon, client):
    with client.create(image="default") as sb:
        out = code(daemon, sb.id, language="bash", code="cd /tmp\nexport GREETING=hello\nf() { echo fn $1; }\necho ok")
        assert out["logs"]["stdout"] == ["ok\n"] and out["context"] == "bash" and out["error"] is None, out
        out = code(daemon, sb.id, language="bash", code='echo $GREETING $(pwd); f 2; echo oops >&2')
        assert "".join(out["logs"]["stdout"]) == "hello /tmp\nfn 2\n" and out["logs"]["stderr"] == ["oops\n"]
        out = code(daemon, sb.id, language="bash", code="false")
        assert out["error"]["name"] == "ExitCodeError" and out["error"]["value"] == "exit status 1"
        out = code(daemon, sb.id, language="bash", code="echo $ONLY_NOW", env={"ONLY_NOW": "1"})
        assert out["logs"]["stdout"] == ["1\n"]
        assert code(daemon, sb.id, language="bash", code="echo x${ONLY_NOW}x")["logs"]["stdout"] == ["xx\n"]
        out = code(daemon, sb.id, language="bash", code="sleep 60; echo not-reached", timeout_seconds=1)
        assert out["timed_out"] and "not-reached" not in "".join(out["logs"]["stdout"]), out
        out = code(daemon, sb.id, language="bash", code="exit 4")
        assert out["error"]["name"] == "ShellExited"
        out = code(daemon, sb.id, language="bash", code="echo ${GREETING:-gone}")
        assert out["logs"]["stdout"] == ["gone\n"]


def test_sdk_streaming_and_cli(daemon, client, tmp_path):
    with client.create(image="default") as sb:
        seen = []
        ex = sb.run_code("for i in range(3): print(i)\n'done'", on_stdout=seen.append)
        assert "".join(seen) == "0\n1\n2\n" and ex.text == "'done'" and ex.error is None
        ex = sb.run_code("1/0")
        assert ex.error.name == "ZeroDivisionError" and ex.text is None
        ctx = sb.code_contexts.create(language="bash")
        assert sb.run_code("echo $((6*7))", context=ctx).logs["stdout"] == ["42\n"]
        assert ctx.id in [c.id for c in sb.code_contexts.list()]
        sb.code_contexts.delete(ctx)
        with pytest.raises(SbxError):
            sb.run_code("echo", context=ctx)
        # The CLI: -c, a file, a pipe; exit 1 when the cell raised.
        r = daemon.cli("run", sb.id, "-c", "y = 6 * 7\ny")
        assert r.stdout == "42\n", r
        f = tmp_path / "cell.py"
        f.write_text("print(y + 1)\n")
        assert daemon.cli("run", sb.id, str(f)).stdout == "43\n"
        assert daemon.cli("run", sb.id, input="print('piped')\n").stdout == "piped\n"
        r = daemon.cli("run", sb.id, "-c", "raise ValueError('nope')", check=False)
        assert r.returncode == 1 and "ValueError: nope" in r.stderr, r
        # The read-eval-print loop (-i): a line runs at once, a block at its empty line.
        r = daemon.cli("run", "-i", sb.id, input="z = 5\nz * 2\ndef f():\n    return z + 1\n\nf()\n")
        assert r.stdout.count(">>> ") >= 4 and "10\n" in r.stdout and "6\n" in r.stdout and "... " in r.stdout, r
        r = daemon.cli("run", "-i", sb.id, "-c", "1", check=False)
        assert r.returncode == 2
        r = daemon.cli("run", sb.id, "--json", "-c", "y")
        assert json.loads(r.stdout)["results"][0]["text"] == "42"


def test_contexts_outlive_sbxd(fresh_daemon):
    d = fresh_daemon
    d.cli("image", "build", "default", timeout=1800)  # from the cache the shared daemon filled
    sb = d.client().create(image="default")
    code(d, sb.id, code="survivor = 'yes'")
    d.stop(signal.SIGKILL)
    d.start()
    out = code(d, sb.id, code="survivor")
    assert out["results"][0]["text"] == "'yes'" and out["execution_count"] == 2, out
    d.client().get(sb.id).delete()


def test_cells_queue_in_order_and_busy_contexts(daemon, client):
    with client.create(image="default") as sb:
        code(daemon, sb.id, code="order = []")
        # Three cells at once on one context: they run one at a time, in the order they came.
        answers = {}

        def send(i):
            answers[i] = code(daemon, sb.id, code=f"import time\ntime.sleep(0.3)\norder.append({i})\nlen(order)")
        threads = []
        for i in range(3):
            t = threading.Thread(target=send, args=(i,))
            t.start()
            threads.append(t)
            time.sleep(0.1)
        for t in threads:
            t.join()
        assert code(daemon, sb.id, code="order")["results"][0]["text"] == "[0, 1, 2]", answers
        # A restart or a delete while a cell runs: 409, and the cell ends normally.
        status, ctx = daemon.raw("POST", f"/v1/sandboxes/{sb.id}/code/contexts", body={})
        slow = threading.Thread(target=lambda: answers.update(
            slow=code(daemon, sb.id, code="import time\ntime.sleep(1.5)\n'done'", context=ctx["id"])))
        slow.start()
        time.sleep(0.5)
        for method, path in (("POST", "/restart"), ("DELETE", "")):
            status, body = daemon.raw(method, f"/v1/sandboxes/{sb.id}/code/contexts/{ctx['id']}{path}",
                                      body={} if method == "POST" else None)
            assert status == 409 and body["error"]["code"] == "conflict", body
        slow.join()
        assert answers["slow"]["results"][0]["text"] == "'done'"
        # A frozen sandbox with auto_resume: the cell resumes it.
        daemon.raw("PATCH", f"/v1/sandboxes/{sb.id}", body={"auto_resume": True})
        sb.pause()
        assert code(daemon, sb.id, code="len(order)")["results"][0]["text"] == "3"
        assert sb.refresh().state == "running"
