"""The keepers of background processes (agent/process_keeper.h) against code in the
sandbox: other users cannot reach them, and root squatting their names can neither hang
sbxd nor hide the real processes from it."""
import signal
import time

COUNTER = "i=0; while true; do echo tick $i; i=$((i+1)); sleep 0.05; done"

def test_keepers_refuse_other_users(daemon, client):
    """Another user in the sandbox cannot list, attach to or feed a process's keeper: it
    closes such connections without an answer (root, who can reach the processes
    themselves, gets the keeper's answer)."""
    with client.create(image="default", user="root") as sb:
        p = sb.processes.start(["sleep", "300"])
        probe = f"""
import os, socket, struct, sys
def ask():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    s.connect("\\0sbx-proc/1/{p.pid}")
    got = b""
    try:
        # kProcList (22), which a keeper answers with what it knows.
        s.sendall(struct.pack("<IB3x", 0, 22))
        while True:
            part = s.recv(4096)
            if not part:
                break
            got += part
    except (ConnectionResetError, BrokenPipeError):
        got = b"reset"  # closed before or with the request unread: refused
    s.close()
    return got
print("root", b'"argv"' in ask())
os.setgid(65534); os.setuid(65534)
print("nobody", ask() in (b"", b"reset"))
"""
        r = sb.exec(["python3", "-c", probe], timeout_seconds=30)
        assert r.exit_code == 0, r.stderr
        assert r.stdout == "root True\nnobody True\n", r.stdout
        assert p.info()["state"] == "running"
        p.kill()


SQUATTER = """
import socket, time
last = int(open("/proc/sys/kernel/ns_last_pid").read())
held = []
for n in list(range(last + 1, last + 400)) + [999999, 4000000]:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind("\\0sbx-proc/1/%d" % n)
    s.listen(0)  # never accepts, never answers
    held.append(s)
print("squatting", len(held), flush=True)
time.sleep(100000)
"""


def test_squatted_keeper_names_neither_hang_sbxd_nor_hide_processes(fresh_daemon):
    d = fresh_daemon
    d.cli("image", "build", "default", timeout=1800)  # python3 (from the cached tarball)
    sb = d.client().create(image="default", user="root")
    counter = sb.processes.start(COUNTER)
    squatter = sb.processes.start(["python3", "-c", SQUATTER])
    deadline = time.time() + 30
    while "squatting" not in "".join(e.get("data", "") for e in squatter.output()):
        assert time.time() < deadline and squatter.info()["state"] == "running", list(squatter.output())
        time.sleep(0.1)
    d.stop(signal.SIGKILL)
    d.start()  # within its usual deadline: the list waits for the squatters once, briefly
    sb = d.client().get(sb.id)
    pids = {p.pid for p in sb.processes.list()}
    assert {counter.pid, squatter.pid} <= pids and len(pids) == 2, pids
    again = sb.processes.get(counter.pid)
    text = "".join(e.get("data", "") for e in again.output())
    nums = [int(line.split()[1]) for line in text.splitlines() if line.startswith("tick ")]
    assert nums == list(range(len(nums))) and len(nums) > 5
    # A new process whose pid is squatted is refused with a reason; the sandbox works on.
    status, body = d.raw("POST", f"/v1/sandboxes/{sb.id}/processes", body={"cmd": "sleep 5"})
    assert status in (201, 503), body
    if status == 503:
        assert "name" in body["error"]["message"]
    assert sb.exec("echo fine").stdout == "fine\n"
    d.delete_all()
    d.wait_clean()
