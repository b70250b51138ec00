"""A memory template's copies hold nothing that reaches its source. Every command gets
SBX_SANDBOX_ID and SBX_TOKEN in its environment, and a memory capture keeps the
environments of the processes it saves: a capture kills the token it saved (the source's
token has a new generation), and every sandbox's /run/sbx.env ($SBX_ENV_FILE) names the
sandbox it is now, with its live token, for the processes that outlive a capture (a
code context reads it before each cell)."""
import pytest

from conftest import MEMORY_WALLS as WALLS, require_memory

KEEP = "sh -c 'while true; do sleep 1; done' >/dev/null 2>&1 &"


def kept_env(sb):
    """The environment of the kept loop: {name: value}."""
    script = ("for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null | grep -q '^sh -c while' "
              "&& { tr '\\0' '\\n' < $p/environ; exit 0; }; done; exit 1")
    r = sb.exec(["sh", "-c", script])
    assert r.exit_code == 0, ("the kept process is gone", r)
    return dict(l.split("=", 1) for l in r.stdout.splitlines() if "=" in l)


def self_env(sb):
    text = sb.exec(["cat", "/run/sbx.env"]).stdout
    return dict(l.split("=", 1) for l in text.splitlines() if "=" in l)


def reads(daemon, token, sid, path=""):
    return daemon.raw("GET", f"/v1/sandboxes/{sid}{path}", headers={"Authorization": "Bearer " + token})[0]


@pytest.mark.parametrize("wall", [*WALLS, "microvm"])
def test_a_copys_kept_processes_hold_no_token_of_the_source(client, daemon, wall):
    if wall == "microvm":  # QEMU saves a VM's memory wherever the wall runs
        assert "microvm" in daemon.client().health()["features"]["memory_isolation"]
    else:
        require_memory(daemon, wall)
    with client.create(image="busybox", isolation=wall) as src:
        src.exec(["sh", "-c", KEEP], check=True)
        before = kept_env(src)
        assert before["SBX_SANDBOX_ID"] == src.id and reads(daemon, before["SBX_TOKEN"], src.id) == 200
        assert self_env(src) == {"SBX_SANDBOX_ID": src.id, "SBX_TOKEN": before["SBX_TOKEN"]}
        name = f"copy-tokens-{wall}-{src.id}"
        src.snapshot(name, memory=True)
        try:
            # The token the capture saved is dead, at the source too; the source's file
            # and its next commands have the new one.
            assert reads(daemon, before["SBX_TOKEN"], src.id) == 401
            now = src.exec(["sh", "-c", "echo $SBX_TOKEN"]).stdout.strip()
            assert now != before["SBX_TOKEN"] and reads(daemon, now, src.id) == 200
            assert self_env(src) == {"SBX_SANDBOX_ID": src.id, "SBX_TOKEN": now}
            with client.create(from_=name, isolation=wall) as cp:
                held = kept_env(cp)
                # What the copy's kept process holds reaches nothing: not the source, not its ports.
                assert held["SBX_TOKEN"] == before["SBX_TOKEN"]
                assert reads(daemon, held["SBX_TOKEN"], src.id) == 401
                assert reads(daemon, held["SBX_TOKEN"], cp.id) == 401
                assert reads(daemon, held["SBX_TOKEN"], src.id, "/ports/8000/") == 401
                # Its file names the copy, with the copy's live token.
                mine = self_env(cp)
                assert mine["SBX_SANDBOX_ID"] == cp.id
                assert reads(daemon, mine["SBX_TOKEN"], cp.id) == 200
                assert reads(daemon, mine["SBX_TOKEN"], src.id) == 403
        finally:
            daemon.raw("DELETE", f"/v1/snapshots/{name}")


def test_a_code_context_in_a_copy_sees_the_copy(client, daemon):
    require_memory(daemon, "container")
    with client.create(image="default", isolation="container") as src:
        first = src.run_code("import os; print(os.environ['SBX_SANDBOX_ID'])")
        assert "".join(first.logs["stdout"]).strip() == src.id, first
        name = f"copy-tokens-code-{src.id}"
        src.snapshot(name, memory=True)
        try:
            with client.create(from_=name, isolation="container") as cp:
                got = cp.run_code("import os; print(os.environ['SBX_SANDBOX_ID'], os.environ['SBX_TOKEN'])")
                sid, token = "".join(got.logs["stdout"]).split()
                assert sid == cp.id, got
                assert reads(daemon, token, cp.id) == 200
        finally:
            daemon.raw("DELETE", f"/v1/snapshots/{name}")
