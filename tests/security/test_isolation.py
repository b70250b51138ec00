"""The container wall, as seen from inside by the probe (tests/probe/probe.c)."""
import errno
import json
import os
import signal
import subprocess
import time
import tempfile

import pytest

import sbx
from conftest import PROBE


@pytest.fixture(scope="module", params=[True, False], ids=["no_new_privs", "new_privs"])
def report(daemon, request):
    """The probe's report, from a sandbox with no_new_privs (the default) and from one
    without it (setuid programs work): every refusal must hold in both."""
    c = daemon.client()
    with c.create(image="probe", no_new_privs=request.param) as sb:
        r = sb.exec(["/bin/sbx-probe"], check=True)
        out = json.loads(r.stdout)
        out["asked_no_new_privs"] = request.param
        return out


def status_field(report, name):
    for line in report["status"].splitlines():
        if line.startswith(name + ":"):
            return line.split(":", 1)[1].strip()
    raise KeyError(name)


# Docker's default capabilities less NET_RAW and MKNOD: CHOWN, DAC_OVERRIDE, FOWNER, FSETID,
# KILL, SETGID, SETUID, SETPCAP, NET_BIND_SERVICE, SYS_CHROOT, AUDIT_WRITE, SETFCAP (Docker's
# own bounding set is 0xa80425fb). They hold in the sandbox's user namespace only.
SANDBOX_CAPS = 0xa00405fb


def test_root_has_the_sandbox_capabilities_only_no_new_privs_seccomp_filter(report):
    for cap in ("CapPrm", "CapEff", "CapBnd"):
        assert int(status_field(report, cap), 16) == SANDBOX_CAPS, cap
    for cap in ("CapInh", "CapAmb"):
        assert int(status_field(report, cap), 16) == 0, cap
    assert status_field(report, "NoNewPrivs") == ("1" if report["asked_no_new_privs"] else "0")
    assert status_field(report, "Seccomp") == "2"


def test_root_inside_is_an_unprivileged_host_uid(report, daemon):
    assert report["uid"] == 0
    inside, outside, count = (int(x) for x in report["uid_map"].split())
    assert inside == 0 and outside == daemon.uid_base and count == 65536


def test_only_stdio_is_open(report):
    assert report["fds"].split() == ["0", "1", "2"]


def test_own_pid_namespace_and_hostname(report):
    # The agent (PID 1), its two idle spare handlers, this exec's handler, and the probe.
    assert report["visible_pids"] <= 5
    assert report["hostname"].startswith("sb-")


def test_host_paths_are_not_mounted(report, daemon):
    mounts = report["mounts"]
    # Layer paths are relative to the sandbox's own directory: no host path shows.
    assert daemon.data not in mounts and "/var/" not in mounts
    targets = [l.split()[1] for l in mounts.splitlines()]
    assert targets[0] == "/"
    assert not any(t.startswith(("/var/lib", "/home", "/var/tmp")) for t in targets)


@pytest.mark.parametrize("field", [
    "mount_errno", "unshare_user_errno", "unshare_mount_errno", "unshare_net_errno", "io_uring_errno",
    "bpf_errno", "perf_event_open_errno", "userfaultfd_errno", "keyctl_errno", "af_alg_errno",
    "af_packet_errno", "af_vsock_errno", "personality_errno", "mknod_errno", "ptrace_init_errno",
    "open_init_mem_errno", "sysrq_errno", "core_pattern_errno", "sys_write_errno",
    "raw_inet_errno", "clock_settime_errno", "finit_module_errno", "ambient_sys_admin_errno",
    "chown_run_sbx_errno",
    "sethostname_errno", "kexec_errno", "write_init_exe_errno", "write_self_exe_errno",
])
def test_dangerous_calls_are_refused(report, field):
    assert report[field] != 0, f"{field}: the call succeeded inside the sandbox"


def test_other_abis_kill_the_caller(report):
    # x32 and i386 (int 0x80) entry points are outside the filter: the process dies by SIGSYS.
    assert report["x32_signal"] == 31, report["x32_signal"]
    # A kernel without the i386 entry (seen under a PVM hypervisor) kills an int 0x80 with
    # SIGSEGV before any filter sees it: the same on the host, where nothing filters.
    host = int(subprocess.run([PROBE, "int80"], capture_output=True, text=True, check=True).stdout)
    assert report["int80_signal"] == (31 if host == 0 else host), (report["int80_signal"], host)
    assert host in (0, signal.SIGSEGV), host


def test_clone3_looks_absent(report):
    assert report["clone3_errno"] == errno.ENOSYS


def test_kcore_is_masked(report):
    assert report["kcore_size"] <= 0


def test_host_files_and_processes_are_invisible(daemon):
    secret = tempfile.NamedTemporaryFile(prefix="sbx-secret-", dir="/var/tmp", delete=False)
    secret.write(b"host secret\n")
    secret.close()
    try:
        with daemon.client().create(image="busybox") as sb:
            r = sb.exec(f"cat {secret.name}; cat /proc/1/root{secret.name}; ls /proc/1/root/")
            assert "host secret" not in r.stdout
            r = sb.exec("ps -o pid,comm")
            assert "sbxd" not in r.stdout and "pytest" not in r.stdout
            # kill -9 -1 reaches only the sandbox's own processes (the exec's own agent
            # handler among them, so that exec may end with 503): PID 1, the daemon and
            # other sandboxes live on.
            with daemon.client().create(image="busybox") as other:
                try:
                    sb.exec("kill -9 -1", timeout_seconds=10)
                except sbx.ApiError as e:
                    assert e.status == 503
                assert daemon.raw("GET", "/v1/health")[0] == 200
                # A handler that took the next connection while its SIGKILL was pending
                # drops it (503 once); PID 1 forks fresh ones.
                try:
                    alive = sb.exec("echo alive").stdout
                except sbx.ApiError as e:
                    assert e.status == 503
                    time.sleep(0.2)
                    alive = sb.exec("echo alive").stdout
                assert alive == "alive\n"
                assert other.exec("echo alive").stdout == "alive\n"
    finally:
        os.unlink(secret.name)


def test_sandboxes_cannot_see_each_other(daemon):
    c = daemon.client()
    with c.create(image="busybox") as a, c.create(image="busybox") as b:
        a.exec("echo mine > /root/a-file; sleep 1000 > /dev/null 2>&1 &", check=True)
        r = b.exec("ls /root; ps -o comm")
        assert "a-file" not in r.stdout and "sleep" not in r.stdout


def test_files_written_inside_belong_to_the_sandbox_uid(daemon):
    with daemon.client().create(image="busybox") as sb:
        sb.exec("echo x > /root/owned", check=True)
        st = os.stat(os.path.join(daemon.data, "sandboxes", sb.id, "upper", "root", "owned"))
        assert st.st_uid == daemon.uid_base


SUID_PROBE = ("cp /usr/bin/grep /usr/local/bin/suid-grep && chmod 4755 /usr/local/bin/suid-grep && "
              "setpriv --reuid=65534 --regid=65534 --clear-groups "
              "/usr/local/bin/suid-grep -E '^(Uid|CapEff|CapPrm|CapBnd|NoNewPrivs)' /proc/self/status")


def status_lines(text):
    return {k: v.split()[0] if k != "Uid" else v.split() for k, v in
            (l.split(":\t", 1) for l in text.strip().splitlines())}


def test_setuid_binaries_gain_nothing(daemon):
    """A setuid-root copy of grep, run by nobody inside: it stays nobody with no
    capabilities (no_new_privs is set, and the root is mounted nosuid besides)."""
    with daemon.client().create(image="default", user="root") as sb:
        r = sb.exec(SUID_PROBE, check=True)
        lines = status_lines(r.stdout)
        assert lines["Uid"] == ["65534"] * 4, lines
        assert lines["CapEff"] == lines["CapPrm"] == "0000000000000000", lines
        assert int(lines["CapBnd"], 16) == SANDBOX_CAPS
        assert lines["NoNewPrivs"] == "1"
        mounts = sb.exec("grep ' / ' /proc/self/mounts").stdout
        assert "nosuid" in mounts.split()[3].split(",")


def test_with_no_new_privs_off_setuid_reaches_sandbox_root_and_no_further(daemon):
    """With no_new_privs false, su and sudo-style programs work: the setuid-root grep run by
    nobody becomes root of the sandbox, with the sandbox's capabilities and no more, in
    the same user namespace (root there is an unprivileged host uid)."""
    with daemon.client().create(image="default", user="root", no_new_privs=False) as sb:
        assert sb.data["no_new_privs"] is False
        r = sb.exec(SUID_PROBE, check=True)
        lines = status_lines(r.stdout)
        assert lines["Uid"] == ["65534", "0", "0", "0"], lines
        assert int(lines["CapEff"], 16) == int(lines["CapPrm"], 16) == SANDBOX_CAPS, lines
        assert int(lines["CapBnd"], 16) == SANDBOX_CAPS
        assert lines["NoNewPrivs"] == "0"
        uid_map = sb.exec("cat /proc/self/uid_map").stdout.split()
        assert uid_map == ["0", str(daemon.uid_base), "65536"]
        # The filter holds as before: no mount, no new namespaces, no module loading.
        r = sb.exec(["python3", "-c", "import ctypes, os; libc = ctypes.CDLL(None, use_errno=True); "
                     "print(libc.unshare(0x10000000), ctypes.get_errno(), libc.mount(b'none', b'/mnt', b'tmpfs', 0, None), ctypes.get_errno())"])
        assert r.stdout.split() == ["-1", "1", "-1", "1"], r.stdout


def test_the_agent_serves_nobody_inside_the_sandbox(daemon):
    """The agent listens on an abstract socket name in the sandbox's own network namespace
    (nothing of it on a host path, so that a checkpoint holds none). Code in the sandbox
    can dial that name, but the agent closes every connection from inside the sandbox's
    pid namespace unread: only sbxd, outside it, is served. Nobody inside can take the
    name, and the agent's binary in /run/sbx is read-only."""
    code = r'''
import errno, socket, struct
answers = []
for _ in range(50):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect("\0sbx-agent")
    s.settimeout(5)
    try:
        s.sendall(struct.pack("<IB3x", 0, 9))   # a ping frame
        answers.append(s.recv(100))             # closed unread: EOF, or a reset
    except (ConnectionResetError, BrokenPipeError):
        answers.append(b"")
    s.close()
print("answers", set(answers))
t = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    t.bind("\0sbx-agent")
    print("bound")
except OSError as e:
    print("bind", errno.errorcode[e.errno])
import glob
agent = glob.glob("/run/sbx/sbx-agent-*")[0]
try:
    open(agent, "ab")
    print("writable")
except OSError as e:
    print("write", errno.errorcode[e.errno])
for line in open("/proc/self/mountinfo"):
    f = line.split()
    if f[4] == "/run/sbx":
        print("mount", "ro" in f[5].split(","), "nosuid" in f[5].split(","))
'''
    with daemon.client().create(image="default", user="root") as sb:
        r = sb.exec(["python3", "-c", code])
        assert r.exit_code == 0, r.stderr
        lines = r.stdout.splitlines()
        assert lines[:2] == ["answers {b''}", "bind EADDRINUSE"], r.stdout
        assert lines[2] in ("write EACCES", "write EROFS") and lines[3] == "mount True True", r.stdout
        # The refused dials cost nothing: the agent still serves sbxd.
        assert sb.exec("echo fine").stdout == "fine\n"
