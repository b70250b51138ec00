"""Fixtures for the integration and security tests: real sbxd daemons that the tests
start themselves, each on a private port, data dir and uid range, driven through the
Python SDK, the CLI and raw HTTP. Needs root (namespaces, cgroups)."""
from __future__ import annotations

import fcntl
import hashlib
import http.client
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import tarfile
import tempfile
import time

import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # netlab

# `sbx exec` sends piped or redirected input as the command's stdin: the tests' commands
# get none unless a test gives it, whatever stdin the suite itself was started with.
_devnull = os.open(os.devnull, os.O_RDONLY)
os.dup2(_devnull, 0)
os.close(_devnull)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("SBX_BUILD_DIR", os.path.join(ROOT, "build"))
SBXD = os.path.join(BUILD, "sbxd")
SBX = os.path.join(BUILD, "sbx")
PROBE = os.path.join(BUILD, "sbx-probe")
# CRIU for pause mode "hibernate": scripts/test.sh builds it (scripts/build-criu.sh) and
# exports its path; daemons that need it fail to start without it (never a skip).
# The wall every test daemon's sandboxes run on unless a test names one: the suite runs
# once on the container wall, and a reduced set again on gVisor (scripts/test.sh).
ISOLATION = os.environ.get("SBX_TEST_ISOLATION", "container")
RUNSC = os.environ.get("SBX_RUNSC") or os.path.join(os.environ.get("SBX_CACHE_DIR", "/var/cache/sbx"), "runsc", "runsc")
# The microVM wall's guest kernel (scripts/vm/guest.sh; scripts/test.sh exports it). Every
# test daemon boots its VMs under TCG (this host's KVM may boot no guest).
MICROVM_KERNEL = os.environ.get("SBX_MICROVM_KERNEL", "")
CRIU = os.environ.get("SBX_CRIU") or os.path.join(os.environ.get("SBX_CACHE_DIR", "/var/cache/sbx"), "criu", "criu")

# Each test run takes its own stretch of host uids (20 M, picked by its pid), so that two
# runs on one machine (a developer's beside CI's) never share sandbox or owner uids.
_next_uid_base = [300000 + (os.getpid() % 100) * 20_000_000]  # sbxd takes bases up to 2^31
# Two runs whose pids are equal modulo 100 would pick the same stretch: each daemon's three
# ranges are claimed by an exclusive lock on a file here, held until the run ends (the
# kernel drops a dead run's locks, so no claim outlives its run and two runs never both
# take one over).
UID_CLAIMS = "/run/sbx-test-uids"
_claims = []  # the open, locked claim files: closed only by the run's exit


def pids_with_uids(ranges):
    """Host pids whose real uid is in one of the [lo, hi) ranges."""
    pids = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("Uid:"):
                        uid = int(line.split()[1])
                        if any(lo <= uid < hi for lo, hi in ranges):
                            pids.append(int(p))
                        break
        except (OSError, ValueError):
            pass  # gone meanwhile
    return pids


def claim_uid_base():
    """The next base of three uid ranges that no other live test run holds and no process
    runs in (a range where one does is what an interrupted run's daemons left)."""
    os.makedirs(UID_CLAIMS, exist_ok=True)
    while True:
        base = _next_uid_base[0]
        _next_uid_base[0] += 3 * 65536
        fd = os.open(os.path.join(UID_CLAIMS, str(base)), os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())  # for a reader: which run holds it
        _claims.append(fd)
        if not pids_with_uids([(base, base + 3 * 65536)]):
            return base


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Daemon:
    """One sbxd process on its own data dir, port and uid range."""

    def __init__(self, name: str, extra_args=(), data_dir=None, log_path=None):
        self.extra_args = list(extra_args)
        if os.geteuid() != 0:
            pytest.fail("the integration tests need root (run them through scripts/test.sh)")
        if data_dir is None:
            data_dir = tempfile.mkdtemp(prefix=f"sbx-{name}-", dir="/var/tmp")
            os.chmod(data_dir, 0o711)
        self.data = data_dir  # may not exist yet: sbxd makes it
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        # Each daemon takes three ranges: its sandboxes' uids, just above them the uids that
        # own their user namespaces (sbxd's default --owner-uid-base), and above those the
        # uids its VMs' QEMUs run as. The next daemon starts above all three, so that no
        # daemon's sandboxes run as another's namespace owners or VMs.
        self.uid_base = claim_uid_base()
        self.proc: subprocess.Popen | None = None
        self.log_path = log_path or os.path.join(self.data, "sbxd.log")
        self.start()
        with open(os.path.join(self.data, "api-key")) as f:
            self.key = f.read().strip()

    @property
    def instance(self) -> str:
        return hashlib.sha256(os.path.realpath(self.data).encode()).hexdigest()[:8]

    def start(self):
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [SBXD, "--listen", f"127.0.0.1:{self.port}", "--socket", os.path.join(self.data, "sbxd.sock"),
             "--data-dir", self.data, "--uid-base", str(self.uid_base), "--default-image", "busybox",
             # No test's sandbox sends a packet unless the test asks for a network.
             *([] if any(a.startswith("--default-network") for a in self.extra_args) else ["--default-network", "none"]),
             "--runsc", RUNSC, "--microvm-accel", "tcg",
             *(["--microvm-kernel", MICROVM_KERNEL] if MICROVM_KERNEL else []),
             *([] if ISOLATION == "container" or any(a.startswith("--default-isolation") for a in self.extra_args)
               else ["--default-isolation", ISOLATION]),
             *self.extra_args],
            stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        # Up to a minute: the first sbxd after a boot tests CRIU (20 s where a dump hangs).
        deadline = time.time() + 60
        last = None
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sbxd exited with {self.proc.returncode}: {self.log()}")
            try:
                if self.raw("GET", "/v1/health", auth=False, timeout=10)[0] == 200:
                    return
            except OSError as e:
                last = e
            time.sleep(0.05)
        raise RuntimeError(f"sbxd did not answer (last: {last!r}); {self.why_silent()}; log: {self.log()}")

    def why_silent(self) -> str:
        """What a daemon that does not answer is doing: its threads' kernel waits, and any
        firewall rule naming its port (a packet dropped before it is a connect timeout)."""
        out = []
        pid = self.proc.pid if self.proc else None
        try:
            for t in sorted(os.listdir(f"/proc/{pid}/task")):
                with open(f"/proc/{pid}/task/{t}/comm") as f, open(f"/proc/{pid}/task/{t}/wchan") as w:
                    out.append(f"{t}:{f.read().strip()}@{w.read().strip() or '-'}")
        except OSError:
            pass
        nft = shutil.which("nft", path="/usr/sbin:/sbin:/usr/bin")
        if nft:
            rules = subprocess.run([nft, "list", "ruleset"], capture_output=True, text=True).stdout
            out += [f"nft: {l.strip()}" for l in rules.splitlines() if str(self.port) in l]
        return "threads " + " ".join(out)

    def log(self) -> str:
        with open(self.log_path, errors="replace") as f:
            return f.read()[-4000:]

    def stop(self, sig=signal.SIGTERM):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=30)
        self.proc = None

    def raw(self, method, path, body=None, headers=None, auth=True, timeout=60):
        """One HTTP request on a fresh connection: (status, parsed JSON or text)."""
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        h = dict(headers or {})
        if auth:
            h.setdefault("Authorization", "Bearer " + getattr(self, "key", ""))
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        data = r.read()
        c.close()
        try:
            return r.status, json.loads(data)
        except ValueError:
            return r.status, data.decode(errors="replace")

    def client(self):
        import sbx
        return sbx.Client(url=self.url, api_key=self.key)

    def cli(self, *args, check=True, timeout=120, input=None):
        env = dict(os.environ, SBX_URL=self.url, SBX_API_KEY=self.key)
        p = subprocess.run([SBX, *args], env=env, capture_output=True, text=True, timeout=timeout, input=input)
        if check and p.returncode != 0:
            raise AssertionError(f"sbx {' '.join(args)} exited {p.returncode}: {p.stderr}")
        return p

    def sandboxes(self):
        status, body = self.raw("GET", "/v1/sandboxes")
        assert status == 200, body
        return body["sandboxes"]

    def delete_all(self):
        for s in self.sandboxes():
            self.raw("DELETE", f"/v1/sandboxes/{s['id']}")

    @property
    def cgroup_parent(self) -> str:
        """The cgroup folder of this daemon's sandboxes on the suite's wall (each wall has
        its own, below every hierarchy's root)."""
        return f"sbx-{self.instance}" + ("" if ISOLATION == "container" else f"-{ISOLATION}")

    # What the kernel holds for this daemon: for leak checks.
    def cgroups(self):
        out = set()
        for parent in (f"sbx-{self.instance}", f"sbx-{self.instance}-gvisor", f"sbx-{self.instance}-microvm"):
            for ctl in ("memory", "pids", "cpu", "freezer"):
                d = f"/sys/fs/cgroup/{ctl}/{parent}"
                if os.path.isdir(d):
                    out |= {n for n in os.listdir(d) if os.path.isdir(os.path.join(d, n))}
            d = f"/sys/fs/cgroup/{parent}"
            if os.path.isdir(d) and os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
                out |= {n for n in os.listdir(d) if os.path.isdir(os.path.join(d, n))}
        return out

    def sandbox_dirs(self):
        return set(os.listdir(os.path.join(self.data, "sandboxes")))

    def processes(self):
        """Host pids running under this daemon's sandbox uid range, or as one of its VMs'
        QEMUs and relays."""
        vms = self.uid_base + 2 * 65536
        return pids_with_uids([(self.uid_base, self.uid_base + 65536), (vms, vms + 65536)])

    def host_mounts(self):
        with open("/proc/self/mountinfo") as f:
            return [l for l in f if self.data in l]

    def sandbox_mounts(self):
        """Host mounts under the data dir other than the daemon's own cgroup-favor one
        (kept for its life): what sandboxes and disks left."""
        return [l for l in self.host_mounts() if l.split()[4] != os.path.join(self.data, "cgroup-favor")]

    def wait_clean(self, timeout=30):
        """Waits until teardown left nothing: no row, dir, cgroup or process."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            if not self.sandboxes() and not self.sandbox_dirs() and not self.cgroups() and not self.processes():
                return
            time.sleep(0.05)
        raise AssertionError(f"leftovers: rows={self.sandboxes()} dirs={self.sandbox_dirs()} "
                             f"cgroups={self.cgroups()} procs={self.processes()}\n" + self.describe_processes())

    def describe_processes(self):
        """Each process of the daemon's uid ranges: pid, parent, uids, state, pid namespace,
        cgroups and command line (for a failure's message: which sandbox or helper a
        leftover belongs to)."""
        out = []
        for pid in sorted(self.processes()):
            try:
                ns = os.readlink(f"/proc/{pid}/ns/pid")
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                with open(f"/proc/{pid}/status") as f:
                    uids = next((l.split()[1:] for l in f if l.startswith("Uid:")), [])
                with open(f"/proc/{pid}/cgroup") as f:
                    cg = ";".join(l.strip() for l in f if "freezer" in l or "pids" in l or l.startswith("0::"))
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmd = f.read().replace(b"\0", b" ").decode(errors="replace")[:80]
                out.append(f"  pid {pid} ppid {fields[1]} uids {'/'.join(uids)} state {fields[0]} {ns} [{cg}] {cmd}")
            except OSError:
                pass
        return "\n".join(out)

    def metric(self, name: str) -> float:
        status, text = self.raw("GET", "/metrics")
        for line in text.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        raise KeyError(name)

    def destroy(self):
        try:
            if self.proc and "--pool-size" not in self.extra_args:
                self.delete_all()
                self.wait_clean(timeout=30)
        finally:
            self.stop()
            # Sandboxes that outlived a crashed daemon: their cgroups hold them.
            # runsc joins the gVisor wall's groups in every v1 hierarchy (blkio, cpuset...).
            hierarchies = [h for h in os.listdir("/sys/fs/cgroup") if os.path.isdir(f"/sys/fs/cgroup/{h}")]
            for ctl, wall in ((c, w) for c in hierarchies for w in ("", "-gvisor", "-microvm")):
                base = f"/sys/fs/cgroup/{ctl}/sbx-{self.instance}{wall}"
                if not os.path.isdir(base):
                    continue
                for n in os.listdir(base):
                    d = os.path.join(base, n)
                    if os.path.isdir(d):
                        try:
                            with open(os.path.join(d, "cgroup.procs")) as f:
                                for pid in f.read().split():
                                    os.kill(int(pid), signal.SIGKILL)
                        except OSError:
                            pass
                        for _ in range(200):
                            try:
                                os.rmdir(d)
                                break
                            except OSError:
                                time.sleep(0.01)
                try:
                    os.rmdir(base)
                except OSError:
                    pass
            # VMs' taps outlive their QEMU (sbxd removes them at a stop): a crashed
            # daemon's stay. They are named by the table's tag.
            tag = f"sx{self.instance[:5]}-"
            for link in os.listdir("/sys/class/net"):
                if link.startswith(tag) and os.path.exists(f"/sys/class/net/{link}/tun_flags"):
                    subprocess.run(["ip", "link", "del", link], check=False, capture_output=True)
            # Its firewall table (sbxd keeps it across restarts for its sandboxes).
            nft = shutil.which("nft", path="/usr/sbin:/sbin:/usr/bin") or "nft"  # a test may have changed PATH
            subprocess.run([nft, "delete", "table", "inet", f"sbx_{self.instance[:5]}"],
                           check=False, capture_output=True)
            # Disks are host mounts under the data dir: unmount them before removing it.
            for line in self.host_mounts():
                target = line.split()[4]
                subprocess.run(["umount", "-l", target], check=False)
            shutil.rmtree(self.data, ignore_errors=True)


_criu_verdict = []


def criu_checkpoints():
    """(True, "") when CRIU can checkpoint a process on this kernel, else (False, why): the
    suite's own test, a dump of a throwaway `sleep`, independent of sbxd's. On some kernels
    `criu check` passes and a dump never ends (seen on a 6.18 kernel); sbxd then turns
    hibernate off, and the tests of hibernate check that instead (require_hibernate)."""
    if _criu_verdict:
        return _criu_verdict[0]
    verdict = (True, "")
    d = tempfile.mkdtemp(prefix="sbx-criu-test-", dir="/tmp")
    p = subprocess.Popen(["/bin/sleep", "120"], start_new_session=True, stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        r = subprocess.run([CRIU, "dump", "-t", str(p.pid), "-D", d, "-o", "dump.log", "-v1"],
                           capture_output=True, text=True, timeout=20)
        if r.returncode != 0:
            verdict = (False, f"a CRIU dump of a test process failed (exit {r.returncode}): {r.stderr[-300:]}")
    except subprocess.TimeoutExpired:
        verdict = (False, "a CRIU dump of a test process did not end within 20 s")
    except OSError as e:
        verdict = (False, f"CRIU at {CRIU} cannot run: {e}")
    finally:
        p.kill()
        p.wait()
        shutil.rmtree(d, ignore_errors=True)
    _criu_verdict.append(verdict)
    return verdict


# The walls whose memory templates test_memory_templates.py tests (the microVM's: test_microvm.py).
MEMORY_WALLS = ["gvisor", "container"]


def require_memory(daemon, wall):
    """Goes on when `wall` keeps memory here: gVisor always, the container wall where CRIU
    checkpoints on this kernel. Otherwise checks that a capture with memory is refused
    clearly, the sandbox running on, and skips with the reason."""
    features = daemon.client().health()["features"]
    if wall == "gvisor":
        assert "gvisor" in features["memory_isolation"], features
        return
    ok, why = criu_checkpoints()
    if ok:
        assert "container" in features["memory_isolation"], features
        return
    assert "container" not in features["memory_isolation"], features
    with daemon.client().create(image="busybox", isolation=wall) as sb:
        status, body = daemon.raw("POST", f"/v1/sandboxes/{sb.id}/fork", body={"memory": True})
        assert status == 409 and "needs CRIU" in body["error"]["message"], body
        assert sb.exec("echo up").stdout == "up\n"
    pytest.skip("the container wall keeps no memory here: " + why)


def require_hibernate(d):
    """Goes on when the wall under test can hibernate: the microVM wall always (QEMU saves
    the VM), the gVisor wall always (runsc checkpoint), the container wall when CRIU can
    checkpoint on this kernel (and then `d` must
    offer it). Otherwise checks that `d` says the wall has no hibernate and refuses one
    cleanly, leaving the sandbox running, and skips the rest of the test with the reason
    (pytest -ra lists it)."""
    features = d.raw("GET", "/v1/health", auth=False)[1]["features"]
    if ISOLATION in ("microvm", "gvisor"):
        assert ISOLATION in features["hibernate_isolation"] and features["hibernate"] is True, features
        return
    ok, why = criu_checkpoints()
    if ok:
        assert features["hibernate"] is True, "CRIU checkpoints here, but sbxd offers no hibernate: " + d.log()[-2000:]
        assert ISOLATION in features["hibernate_isolation"], features
        return
    assert ISOLATION not in features["hibernate_isolation"], features
    c = d.client()
    sb = c.create(image="busybox")
    try:
        status, body = d.raw("POST", f"/v1/sandboxes/{sb.id}/pause", body={"mode": "hibernate"})
        # The container wall needs CRIU.
        assert status == 400 and "checkpoint on this kernel" in body["error"]["message"], body
        assert sb.refresh().state == "running"
        assert sb.exec("echo alive").stdout == "alive\n"
    finally:
        sb.delete()
    pytest.skip("hibernate is not available on the " + ISOLATION + " wall here (" + why + "): sbxd refuses it "
                "cleanly (checked); the hibernate path itself cannot be tested on this machine")


def busybox_applets():
    out = subprocess.run(["/bin/busybox", "--list-full"], capture_output=True, text=True, check=True).stdout
    return [a for a in out.split() if a and a != "bin/busybox"]


def probe_image_tar() -> bytes:
    """A busybox root with our probe binary at /bin/sbx-probe."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for d in ("bin", "sbin", "usr", "usr/bin", "usr/sbin", "etc", "root", "tmp", "proc", "sys", "dev"):
            info = tarfile.TarInfo(d)
            info.type = tarfile.DIRTYPE
            info.mode = 0o1777 if d == "tmp" else 0o755
            t.addfile(info)
        t.add("/bin/busybox", arcname="bin/busybox")
        t.add(PROBE, arcname="bin/sbx-probe")
        for a in busybox_applets():
            info = tarfile.TarInfo(a)
            info.type = tarfile.SYMTYPE
            info.linkname = "/bin/busybox"
            t.addfile(info)
    return buf.getvalue()


@pytest.fixture(scope="session")
def daemon():
    """A shared daemon with the busybox, probe and default images, on a store (btrfs with
    per-sandbox quotas and file-system snapshots) and with CRIU (hibernate); the daemons of
    single tests run without either, so both ways are covered."""
    d = Daemon("it", extra_args=["--store-mb", "4096", "--criu", CRIU])
    try:
        status, body = d.raw("POST", "/v1/images/probe", body=probe_image_tar(),
                             headers={"Content-Type": "application/x-tar"})
        assert status == 201, body
        # The default image through the CLI: reuses the cached debootstrap tarball,
        # or builds it once (a few minutes) into the cache dir.
        d.cli("image", "build", "default", timeout=1800)
        yield d
    finally:
        d.destroy()


@pytest.fixture()
def fresh_daemon():
    """A daemon of the test's own (for restarts and leak counts)."""
    d = Daemon("fresh")
    try:
        yield d
    finally:
        d.destroy()


@pytest.fixture()
def client(daemon):
    return daemon.client()


@pytest.fixture(scope="session")
def net_lab():
    """The test network (tests/netlab.py): an "internet" namespace on this machine."""
    import netlab
    lab = netlab.Lab()
    try:
        yield lab.start()
    finally:
        lab.stop()


@pytest.fixture(scope="session")
def net_daemon(net_lab):
    """A daemon whose sandboxes reach out by default (the only one: every other test's
    daemon runs with --default-network none), in a subnet of its own, resolving through
    the lab's DNS server, with a small cap on each sandbox's connections and CRIU."""
    import netlab
    subnet = f"10.252.{os.getpid() % 250}.0/24"
    d = Daemon("net", extra_args=["--default-network", "outbound", "--net-subnet", subnet,
                                  "--dns-upstream", netlab.DNS, "--net-max-conns", "16", "--criu", CRIU])
    d.subnet = subnet
    try:
        d.cli("image", "build", "default", timeout=1800)
        yield d
    finally:
        d.destroy()


def pytest_configure(config):
    config.addinivalue_line("markers", "container_wall(why): the test asserts how the container wall works; "
                                       "the other walls' legs leave it out (why: what differs there)")
    config.addinivalue_line("markers", "not_on(wall, why): the leg of that wall leaves the test out (why: what "
                                       "that wall does instead, or lacks: docs/API.md says so)")


def pytest_collection_modifyitems(config, items):
    """On the gVisor and microVM legs, the tests of the container wall's own mechanics
    are deselected (not skipped), and so are those marked not_on that wall: each says, in
    its mark, what the wall does instead."""
    if ISOLATION == "container":
        return
    keep, drop = [], []
    for item in items:
        off = item.get_closest_marker("container_wall") or any(
            m.args and m.args[0] == ISOLATION for m in item.iter_markers("not_on"))
        (drop if off else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A test that failed on a connect that timed out (a SYN nobody answered) gets what
    can explain it beside its report: the host's firewall rules that drop by port, the
    listeners' accept queues, and the kernel's counts of dropped SYNs."""
    outcome = yield
    rep = outcome.get_result()
    if not rep.failed or "Errno 110" not in str(rep.longrepr):
        return
    lines = []
    for argv in (["nft", "list", "ruleset"], ["ss", "-ltn"]):
        tool = shutil.which(argv[0], path="/usr/sbin:/sbin:/usr/bin:/bin")
        if not tool:
            lines.append(f"({argv[0]} is not installed)")
            continue
        try:
            got = subprocess.run([tool] + argv[1:], capture_output=True, text=True, timeout=30).stdout
        except (OSError, subprocess.SubprocessError) as e:
            lines.append(f"({argv[0]}: {e})")
            continue
        if argv[0] == "nft":
            got = "\n".join(l.strip() for l in got.splitlines() if l.startswith("table") or ("dport" in l and "drop" in l))
        lines += got.splitlines()
    try:
        with open("/proc/net/netstat") as f:
            head, values = f.readline().split(), f.readline().split()
        lines += [f"{k} {v}" for k, v in zip(head, values) if k in ("ListenOverflows", "ListenDrops", "TCPReqQFullDrop")]
    except OSError:
        pass
    rep.sections.append(("why the connect timed out", "\n".join(lines)))
