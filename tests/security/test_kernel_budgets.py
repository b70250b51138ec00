"""Per-user kernel budgets: one sandbox using up its own leaves every other sandbox's and the
host's whole. The kernel charges inotify instances, pending signals and message-queue bytes
of everything in a user namespace to the namespace's owner; each sandbox's namespace has an
owner uid of its own, a sandbox restored by CRIU (resumed, or copied from memory) too."""
import fcntl
import os
import subprocess
import sys
import textwrap

from conftest import require_hibernate, require_memory

INOTIFY = textwrap.dedent("""
    import ctypes, os, sys, time
    libc = ctypes.CDLL(None, use_errno=True)
    fds = []
    while len(fds) < 100000:
        fd = libc.inotify_init()
        if fd < 0:
            break
        fds.append(fd)
    print(len(fds), os.strerror(ctypes.get_errno()), flush=True)
    if len(sys.argv) > 1:
        open(sys.argv[1], "w").write(str(len(fds)))
        time.sleep(3600)
""")

SIGNALS = textwrap.dedent("""
    import ctypes, os, signal, sys, time
    libc = ctypes.CDLL(None, use_errno=True)
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGRTMIN])
    n = 0
    limit = int(sys.argv[1])
    # sigqueue(): a queued real-time signal fails with EAGAIN once the budget is used up
    # (kill() would drop the extra ones silently).
    while n < limit:
        if libc.sigqueue(os.getpid(), int(signal.SIGRTMIN), ctypes.c_long(n)) != 0:
            print(n, os.strerror(ctypes.get_errno()), flush=True)
            break
        n += 1
    else:
        print(n, "queued", flush=True)
    if len(sys.argv) > 2:
        open(sys.argv[2], "w").write(str(n))
        time.sleep(3600)
""")


def hold(sb, script, *args):
    """Runs `script` in the background in `sb` until it wrote its count; returns the count."""
    sb.files.write("/tmp/hog.py", script)
    sb.exec(["sh", "-c", "python3 /tmp/hog.py " + " ".join(args) + " /tmp/hog.count >/dev/null 2>&1 &"], check=True)
    r = sb.exec("for i in $(seq 200); do [ -s /tmp/hog.count ] && break; sleep 0.1; done; cat /tmp/hog.count",
                timeout_seconds=30)
    return int(r.stdout)


def host_run(script, *args):
    out = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=60)
    return out.stdout.split()


def sandbox_pid(daemon, sid):
    """A host pid of a process inside sandbox `sid` (from its cgroup)."""
    for d in (f"/sys/fs/cgroup/pids/{daemon.cgroup_parent}/{sid}", f"/sys/fs/cgroup/{daemon.cgroup_parent}/{sid}"):
        if os.path.exists(d + "/cgroup.procs"):
            with open(d + "/cgroup.procs") as f:
                return int(f.readline())
    raise AssertionError("no cgroup for " + sid)


def ns_owner(pid):
    """The host uid that owns the user namespace of `pid` (ioctl NS_GET_OWNER_UID)."""
    fd = os.open(f"/proc/{pid}/ns/user", os.O_RDONLY)
    try:
        buf = bytearray(4)
        fcntl.ioctl(fd, 0xB704, buf)
        return int.from_bytes(buf, sys.byteorder)
    finally:
        os.close(fd)


def test_each_sandbox_namespace_has_an_owner_of_its_own(daemon):
    c = daemon.client()
    with c.create(image="busybox") as a, c.create(image="busybox") as b:
        owners = {ns_owner(sandbox_pid(daemon, sb.id)) for sb in (a, b)}
        assert len(owners) == 2 and 0 not in owners, owners
        # Outside the sandboxes' own uids.
        assert all(not daemon.uid_base <= o < daemon.uid_base + 65536 for o in owners), owners


def check_restored_owner(daemon, sb, other_owner):
    """A sandbox that CRIU restored: its namespace has an owner of its own (not host root,
    not a sandbox uid, not `other_owner`), its own host name, the non-root process it had,
    and using up its inotify instances leaves host root's whole."""
    owner = ns_owner(sandbox_pid(daemon, sb.id))
    assert owner not in (0, other_owner) and not daemon.uid_base <= owner < daemon.uid_base + 65536, owner
    assert sb.exec("hostname").stdout.strip() == sb.id
    owners = sb.exec("for p in /proc/[0-9]*; do [ \"$(cat $p/comm 2>/dev/null)\" = sleep ] && stat -c %U $p; done").stdout
    assert owners.split() == ["user"], owners
    assert hold(sb, INOTIFY) > 0
    assert int(host_run(INOTIFY)[0]) > 0


def test_a_sandbox_resumed_from_hibernation_keeps_a_namespace_owner_of_its_own(daemon):
    """Restored as root, a resumed sandbox could hold every inotify instance of host root."""
    require_hibernate(daemon)
    with daemon.client().create(image="default") as sb:
        before = ns_owner(sandbox_pid(daemon, sb.id))
        # A process of a non-root user: its ids are restored by a restore without root.
        sb.exec(["sh", "-c", "sleep 600 >/dev/null 2>&1 &"], check=True)
        sb.pause(mode="hibernate")
        sb.resume()
        check_restored_owner(daemon, sb, None)
        assert before != 0


def test_a_copy_from_a_memory_template_has_a_namespace_owner_of_its_own(daemon):
    require_memory(daemon, "container")
    c = daemon.client()
    with c.create(image="default") as src:
        src.exec(["sh", "-c", "sleep 600 >/dev/null 2>&1 &"], check=True)
        src.snapshot("budget-mem", memory=True)
        try:
            with c.create(from_="budget-mem") as cp:
                check_restored_owner(daemon, cp, ns_owner(sandbox_pid(daemon, src.id)))
        finally:
            daemon.raw("DELETE", "/v1/snapshots/budget-mem")


def test_inotify_instances_used_up_in_one_sandbox_leave_others_and_the_host_theirs(daemon):
    c = daemon.client()
    with c.create(image="default") as hog, c.create(image="default") as other:
        got = hold(hog, INOTIFY)
        assert got > 0
        # The hog reached its own ceiling ...
        assert hog.exec(["python3", "-c", INOTIFY]).stdout.split()[0] == "0"
        # ... and nobody else is charged for it.
        assert int(other.exec(["python3", "-c", INOTIFY]).stdout.split()[0]) >= min(got, 64)
        assert int(host_run(INOTIFY)[0]) > 0


def test_pending_signals_used_up_in_one_sandbox_leave_others_and_the_host_theirs(daemon):
    c = daemon.client()
    with c.create(image="default") as hog, c.create(image="default") as other:
        got = hold(hog, SIGNALS, "1000000")
        # Bounded by the sandbox's RLIMIT_SIGPENDING, far below the host's.
        limit = int(hog.exec(["python3", "-c", "import resource; print(resource.getrlimit(resource.RLIMIT_SIGPENDING)[1])"]).stdout)
        assert 0 < got <= limit < 100000
        assert other.exec(["python3", "-c", SIGNALS, "1000"]).stdout.split()[:2] == ["1000", "queued"]
        assert host_run(SIGNALS, "1000")[:2] == ["1000", "queued"]


def test_sandbox_code_cannot_raise_its_file_limit_or_lower_its_oom_score(daemon):
    with daemon.client().create(image="busybox") as sb:
        hard = int(sb.exec("ulimit -Hn").stdout)
        assert 64 <= hard <= 4096 and int(sb.exec("ulimit -n").stdout) <= 1024
        r = sb.exec(f"ulimit -Hn {hard * 2}")
        assert r.exit_code != 0
        # Opening files stops at the limit, in the sandbox only.
        r = sb.exec("i=0; while [ $i -lt 5000 ]; do exec 3</dev/null || break; i=$((i+1)); done; echo done")
        assert r.exit_code == 0
        # The agent is shielded from the OOM killer; that floor does not pass to the tenant.
        assert sb.exec("cat /proc/self/oom_score_adj").stdout.strip() == "0"
        r = sb.exec("echo -500 > /proc/self/oom_score_adj")
        assert r.exit_code != 0
        assert sb.exec("cat /proc/self/oom_score_adj").stdout.strip() == "0"
