"""Resource attacks stay inside their sandbox; the daemon keeps answering others."""
import threading
import time


def test_fork_bomb_stops_at_the_pids_limit(daemon):
    c = daemon.client()
    with c.create(image="busybox", resources={"pids": 64}) as bomb, c.create(image="busybox") as other:
        # A script, so every process of the bomb is named "bomb".
        bomb.exec("printf '#!/bin/sh\\nb() { b | b & }; b; sleep 60\\n' > /bin/bomb; chmod +x /bin/bomb", check=True)
        result = {}

        def run():
            result["r"] = bomb.exec(["/bin/bomb"], timeout_seconds=5)

        t = threading.Thread(target=run)
        t.start()
        time.sleep(1)
        # Meanwhile another sandbox is served.
        t0 = time.time()
        assert other.exec("echo alive", timeout_seconds=10).stdout == "alive\n"
        assert time.time() - t0 < 5
        t.join(timeout=60)
        r = result["r"]
        assert r.timed_out
        assert "can't fork" in r.stderr or "Resource temporarily unavailable" in r.stderr
        # The timeout killed the bomb's whole tree: its sandbox works again.
        assert bomb.exec("echo ok").stdout == "ok\n"
        assert bomb.exec("ps -o comm | grep -c '^bomb' || true").stdout.strip() == "0"


def test_memory_bomb_is_killed_by_its_own_limit(daemon):
    c = daemon.client()
    with c.create(image="default", resources={"memory_mb": 64}) as sb:
        r = sb.exec(["python3", "-c", "a = bytearray(512 * 1024 * 1024); print('allocated')"], timeout_seconds=60)
        assert r.exit_code == 137 and r.signal == 9
        assert "allocated" not in r.stdout
        # The sandbox survives (the agent is not the victim) and stays usable.
        assert sb.exec("echo fine").stdout == "fine\n"


def test_timed_out_exec_leaves_no_descendant(daemon):
    with daemon.client().create(image="busybox") as sb:
        r = sb.exec("echo partial; echo err >&2; sleep 1000 & (setsid sleep 1001 &); sleep 1002",
                    timeout_seconds=1)
        assert r.timed_out and r.exit_code == 124
        assert r.stdout == "partial\n" and r.stderr == "err\n"
        ps = sb.exec("ps -o comm,args").stdout
        assert "sleep" not in ps, ps


def test_background_process_outlives_a_normal_exec(daemon):
    with daemon.client().create(image="busybox") as sb:
        sb.exec("sleep 1000 > /dev/null 2>&1 &", check=True)
        assert "sleep 1000" in sb.exec("ps -o args").stdout


def test_orphans_are_reaped(daemon):
    with daemon.client().create(image="busybox") as sb:
        sb.exec("for i in $(seq 200); do (true &) ; done", check=True, timeout_seconds=30)
        time.sleep(0.3)
        ps = sb.exec("ps -o stat,comm").stdout
        assert " Z" not in ps and "\nZ" not in ps, ps
