"""Daemon restarts (clean and kill -9) keep running sandboxes usable; cycles leak nothing."""
import signal


def test_kill9_then_restart_keeps_running_sandboxes(fresh_daemon):
    d = fresh_daemon
    c = d.client()
    sb = c.create(image="busybox", name="survives")
    sb.exec("echo before > /root/f; sleep 1000 > /dev/null 2>&1 &", check=True)
    stopped = c.create(image="busybox")
    stopped.stop()
    d.stop(signal.SIGKILL)
    assert d.processes(), "the sandbox must outlive its daemon"
    d.start()
    c = d.client()
    got = c.get(sb.id)
    assert got.state == "running"
    assert got.exec("cat /root/f").stdout == "before\n"
    assert "sleep 1000" in got.exec("ps -o args").stdout
    assert c.get(stopped.id).state == "stopped"
    # Still fully managed: delete cleans everything.
    d.delete_all()
    d.wait_clean()


def test_restart_cleans_orphans(fresh_daemon):
    d = fresh_daemon
    c = d.client()
    sb = c.create(image="busybox")
    d.stop(signal.SIGKILL)
    # A sandbox whose processes died while sbxd was down is marked error, with a reason.
    import os, time
    for pid in d.processes():
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass  # gone already: killing the init ends the rest of its namespace
    deadline = time.time() + 10
    while d.processes() and time.time() < deadline:
        time.sleep(0.05)
    # A directory and a cgroup nobody owns.
    os.makedirs(os.path.join(d.data, "sandboxes", "sb-orphan00000000", "upper"))
    os.makedirs(f"/sys/fs/cgroup/pids/sbx-{d.instance}/sb-orphan11111111")
    d.start()
    c = d.client()
    got = c.get(sb.id)
    assert got.state == "error" and got.data["error"]
    assert "sb-orphan00000000" not in d.sandbox_dirs()
    assert "sb-orphan11111111" not in d.cgroups()
    got.start()
    assert got.exec("echo back").stdout == "back\n"


def test_200_create_exec_delete_cycles_leave_nothing(fresh_daemon):
    d = fresh_daemon
    c = d.client()
    fds_before = len(__import__("os").listdir(f"/proc/{d.proc.pid}/fd"))
    for i in range(200):
        sb = c.create(image="busybox")
        assert sb.exec(["echo", str(i)]).stdout == f"{i}\n"
        sb.delete()
    d.wait_clean(timeout=60)
    assert not d.host_mounts()
    fds_after = len(__import__("os").listdir(f"/proc/{d.proc.pid}/fd"))
    assert fds_after <= fds_before + 4, (fds_before, fds_after)
