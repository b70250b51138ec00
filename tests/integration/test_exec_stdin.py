"""An exec with stdin answers as soon as its command ends (the frames of its input arrive
with the request, before the agent's first wait), never after a keep-alive interval."""
import json

from conftest import Daemon


def stream_lines(d, sid, body):
    status, text = d.raw("POST", f"/v1/sandboxes/{sid}/exec", body=body,
                         headers={"Accept": "application/x-ndjson"})
    assert status == 200, text
    if isinstance(text, dict):  # one line only (no output): the helper parsed it already
        return [text]
    return [json.loads(line) for line in text.splitlines()]


def test_exec_with_stdin_answers_before_any_keepalive():
    # A short keep-alive: with the old bug the agent sat on the request's stdin frames
    # until the keep-alive interval passed, so a keep-alive line came before the output.
    d = Daemon("stdin", extra_args=["--keepalive-ms", "300"])
    try:
        with d.client().create(image="busybox") as sb:
            # The test can see keep-alives: a quiet command longer than the interval gets one.
            lines = stream_lines(d, sb.id, {"cmd": "sleep 1; echo late"})
            assert {"type": "keepalive"} in lines

            for stdin in ("piped\n", "", "x" * 300000):
                lines = stream_lines(d, sb.id, {"cmd": "cat", "stdin": stdin})
                assert {"type": "keepalive"} not in lines, lines[:3]
                assert "".join(l["data"] for l in lines if l["type"] == "stdout") == stdin
                assert lines[-1]["type"] == "exit" and lines[-1]["exit_code"] == 0
            # The same through the SDK's buffered exec.
            assert sb.exec("wc -c", stdin="abc").stdout.strip() == "3"
    finally:
        d.destroy()
