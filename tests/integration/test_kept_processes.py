"""Background processes that the agent keeps: they live through a kill -9 of sbxd and a
hibernation, sbxd follows them again with the same pids, and their output goes on with
no gap beyond what the ring held."""
import signal
import time

import pytest

from conftest import CRIU, Daemon, require_hibernate

COUNTER = "i=0; while true; do echo tick $i; i=$((i+1)); sleep 0.05; done"


def ticks(proc, since=0):
    """The numbers of every tick line in the process's ring from `since`, and its events."""
    events = list(proc.output(since=since))
    text = "".join(e["data"] for e in events if e["type"] == "stdout")
    nums = [int(line.split()[1]) for line in text.splitlines() if line.startswith("tick ")]
    return nums, events


def wait_for(pred, timeout=20):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return False


def test_kill9_of_sbxd_keeps_processes_and_their_output(fresh_daemon):
    d = fresh_daemon
    c = d.client()
    sb = c.create(image="busybox")
    counter = sb.processes.start(COUNTER)
    reader = sb.processes.start("read line; echo got $line; exit 7")
    quick = sb.processes.start("sleep 0.5; echo finished while sbxd was away; exit 5")
    time.sleep(0.3)
    cmd = counter.info()["cmd"]
    d.stop(signal.SIGKILL)
    time.sleep(1.5)  # the counter goes on, and `quick` ends, with no sbxd
    d.start()
    c = d.client()
    sb = c.get(sb.id)
    listed = {p.pid: p for p in sb.processes.list()}
    assert set(listed) == {counter.pid, reader.pid, quick.pid}
    again = sb.processes.get(counter.pid)
    assert again.data["state"] == "running" and again.data["cmd"] == cmd
    nums, events = ticks(again)
    # No gap: every tick from 0 on, including those printed while sbxd was down.
    assert nums == list(range(len(nums))) and len(nums) >= 20, nums[:5]
    assert not any(e["type"] == "gap" for e in events)
    # And it goes on live.
    seen = []
    for e in again.output(follow=True, since=again.info()["next_seq"]):
        if e["type"] == "stdout":
            seen += [int(line.split()[1]) for line in e["data"].splitlines()]
        if len(seen) >= 3:
            break
    assert seen[0] > nums[-1]
    # The one that ended meanwhile: its exit and all its output.
    q = sb.processes.get(quick.pid)
    assert q.wait(timeout=10)["exit_code"] == 5
    assert "".join(e["data"] for e in q.output() if e["type"] == "stdout") == "finished while sbxd was away\n"
    # Stdin and signals reach the processes sbxd found again.
    r = sb.processes.get(reader.pid)
    r.send_stdin("hello\n")
    assert r.wait(timeout=10)["exit_code"] == 7
    assert "".join(e["data"] for e in r.output() if e["type"] == "stdout") == "got hello\n"
    again.kill()
    assert again.wait(timeout=10)["signal"] == 9
    # A second restart finds nothing left running and forgets nothing it reported.
    d.stop()
    d.start()
    assert [p.pid for p in d.client().get(sb.id).processes.list()] == []
    d.delete_all()
    d.wait_clean()


@pytest.mark.skipif(not CRIU, reason="hibernate needs CRIU (scripts/build-criu.sh)")
def test_hibernate_and_restore_with_a_background_and_a_tty_process():
    d = Daemon("kept-hib", extra_args=["--criu", CRIU])
    try:
        require_hibernate(d)
        c = d.client()
        sb = c.create(image="busybox")
        counter = sb.processes.start(COUNTER)
        shell = sb.processes.start(["sh"], tty=True, cols=100, rows=30)
        shell.send_stdin("echo one-$((40+2))\n")
        assert wait_for(lambda: "one-42" in "".join(e.get("data", "") for e in shell.output()))
        time.sleep(0.3)
        assert sb.pause(mode="hibernate").data["pause_mode"] == "hibernate"
        before, _ = ticks(counter)
        # While hibernated: the table still shows them, and refuses what needs the agent.
        assert {p.pid for p in sb.processes.list()} == {counter.pid, shell.pid}
        status, body = d.raw("POST", f"/v1/sandboxes/{sb.id}/processes/{counter.pid}/signal", body={"signal": "TERM"})
        assert status == 409 and body["error"]["code"] == "conflict", body
        time.sleep(0.5)
        assert ticks(counter)[0] == before  # a hibernated counter does not count
        sb.resume()
        assert counter.info()["state"] == "running" and shell.info()["state"] == "running"
        # Same pids, the count goes on from where it stood, with no gap.
        assert wait_for(lambda: len(ticks(counter)[0]) > len(before) + 3)
        nums, events = ticks(counter)
        assert nums == list(range(len(nums))) and not any(e["type"] == "gap" for e in events)
        # The terminal answers, with its size kept.
        shell.send_stdin("stty size; echo two-$((40+3))\n")
        assert wait_for(lambda: "two-43" in "".join(e.get("data", "") for e in shell.output()))
        assert "30 100" in "".join(e.get("data", "") for e in shell.output())
        shell.resize(120, 40)
        shell.send_stdin("stty size\n")
        assert wait_for(lambda: "40 120" in "".join(e.get("data", "") for e in shell.output()))
        # A second cycle, then the processes end as usual.
        sb.pause(mode="hibernate")
        sb.resume()
        shell.send_stdin("exit 3\n")
        assert shell.wait(timeout=10)["exit_code"] == 3
        counter.signal("TERM")
        assert counter.wait(timeout=10)["signal"] == signal.SIGTERM
        # sbxd restarted while the sandbox is hibernated: the resume finds the processes.
        late = sb.processes.start("sleep 0.2; echo late; sleep 1000")
        sb.pause(mode="hibernate")
        d.stop(signal.SIGKILL)
        d.start()
        sb = d.client().get(sb.id)
        sb.resume()
        found = sb.processes.get(late.pid)
        assert found.info()["state"] == "running"
        assert wait_for(lambda: "late\n" in "".join(e.get("data", "") for e in found.output()))
        sb.delete()
        d.wait_clean()
    finally:
        d.destroy()


def test_a_stop_after_a_hibernate_ends_the_processes_sbxd_let_go_of(daemon, client):
    require_hibernate(daemon)
    with client.create(image="busybox") as sb:
        p = sb.processes.start(["sleep", "300"])
        sb.pause(mode="hibernate")
        assert p.info()["state"] == "running"
        sb.stop()
        info = p.info()
        assert info["state"] == "exited" and "stopped" in info["error"], info
        assert p.wait(timeout=5)["state"] == "exited"  # a follower is not left waiting
        sb.start()
        assert [q.pid for q in sb.processes.list() if q.data["state"] == "running"] == []
