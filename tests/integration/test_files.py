"""The files API of a running sandbox: read, write, list, stat, mkdir, move, delete and
tar archives, served by the sandbox's agent with every path resolved inside its root."""
import http.client
import io
import os
import subprocess
import tarfile
import threading
import time
import zlib

import pytest

import sbx
from conftest import SBX


def tar_bytes(entries, gz=False):
    """entries: (TarInfo-like dict, data or None)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz" if gz else "w", format=tarfile.PAX_FORMAT) as tf:
        for info, data in entries:
            ti = tarfile.TarInfo(info["name"])
            ti.type = info.get("type", tarfile.REGTYPE)
            ti.linkname = info.get("linkname", "")
            ti.mode = info.get("mode", 0o644)
            if ti.type in (tarfile.CHRTYPE, tarfile.BLKTYPE):
                ti.devmajor, ti.devminor = 1, 3
            if data is not None:
                ti.size = len(data)
                tf.addfile(ti, io.BytesIO(data))
            else:
                tf.addfile(ti)
    return buf.getvalue()


def put_archive(d, sid, path, data):
    return d.raw("PUT", f"/v1/sandboxes/{sid}/archive?path={path}", body=data,
                 headers={"Content-Type": "application/x-tar"})


def test_write_read_stat_list_move_remove(daemon, client):
    with client.create(image="busybox") as sb:
        blob = os.urandom(5 << 20) + b"\x00tail"
        w = sb.files.write("/data/deep/blob.bin", blob)
        assert w.type == "file.written" and w.size_bytes == len(blob)
        assert sb.files.read_bytes("/data/deep/blob.bin") == blob
        # What the command line sees is the same file, owned by the sandbox's user.
        out = sb.exec("md5sum /data/deep/blob.bin; stat -c '%u %g %a' /data/deep/blob.bin").stdout.split("\n")
        import hashlib
        assert out[0].split()[0] == hashlib.md5(blob).hexdigest()
        assert out[1] == "0 0 644"
        # Modes: set as asked, without setuid/setgid/sticky.
        sb.files.write("/data/run.sh", "#!/bin/sh\necho ran\n", mode=0o6755)
        st = sb.files.stat("/data/run.sh")
        assert st["type"] == "file" and st["mode"] == 0o755 and st["size"] == 19
        assert sb.exec("/data/run.sh").stdout == "ran\n"
        # Text round trip (str in, str out) and overwrite.
        sb.files.write("/tmp/a.py", "print(1)")
        assert sb.files.read("/tmp/a.py") == "print(1)"
        sb.files.write("/tmp/a.py", "print(2)")
        assert sb.files.read("/tmp/a.py") == "print(2)"
        # mkdir, list with depth, symlinks listed as such.
        assert sb.files.mkdir("/data/x/y").created is True
        assert sb.files.mkdir("/data/x/y").created is False
        sb.exec("ln -s /etc/passwd /data/link")
        names = {e["path"]: e for e in sb.files.list("/data", depth=3)}
        assert names["/data/deep"]["type"] == "dir"
        assert names["/data/deep/blob.bin"]["size"] == len(blob)
        assert names["/data/x/y"]["type"] == "dir"
        assert names["/data/link"]["type"] == "symlink" and names["/data/link"]["target"] == "/etc/passwd"
        assert names["/data/run.sh"]["mtime"].endswith("Z")
        assert [e["name"] for e in sb.files.list("/data")] == ["deep", "link", "run.sh", "x"]
        # move: refuses to replace unless asked.
        sb.files.write("/data/b.txt", "B")
        with pytest.raises(sbx.ConflictError):
            sb.files.move("/data/run.sh", "/data/b.txt")
        sb.files.move("/data/run.sh", "/data/b.txt", overwrite=True)
        assert sb.files.read("/data/b.txt").startswith("#!/bin/sh") and not sb.files.exists("/data/run.sh")
        # remove: a non-empty folder needs recursive.
        with pytest.raises(sbx.ConflictError):
            sb.files.remove("/data/x")
        sb.files.remove("/data/x", recursive=True)
        sb.files.remove("/data/link")
        assert not sb.files.exists("/data/x") and not sb.files.exists("/data/link")
        assert sb.exec("test -e /etc/passwd && echo kept").stdout == "kept\n"
        with pytest.raises(sbx.NotFoundError):
            sb.files.remove("/data/nothing")


def test_file_calls_run_as_the_user_named(daemon, client):
    """user= makes a file call run as that sandbox user: the kernel checks each access as
    theirs, and what it makes (files, folders) is theirs; names and uids alike."""
    with client.create(image="default") as sb:
        f = sb.files
        f.write("/home/user/notes/a.txt", "mine", user="user")
        f.mkdir("/home/user/made", user="1000")
        for p in ("/home/user/notes", "/home/user/notes/a.txt", "/home/user/made"):
            st = f.stat(p)
            assert (st["uid"], st["gid"], st["owner"], st["group"]) == (1000, 1000, "user", "user"), (p, st)
        assert f.read("/home/user/notes/a.txt", user="user") == "mine"
        # Where the user may not go, the kernel says no (and nothing is made).
        for call in (lambda: f.write("/root/planted", "x", user="user"), lambda: f.read("/etc/shadow", user="user"),
                     lambda: f.list("/root", user="user"), lambda: f.remove("/etc/passwd", user="user"),
                     lambda: f.mkdir("/opt/x", user="user"), lambda: f.move("/etc/passwd", "/etc/moved", user="user")):
            with pytest.raises(sbx.SbxError) as e:
                call()
            assert e.value.status == 403 and "ermission denied" in str(e.value), e.value
        assert not f.exists("/root/planted", user="root") and f.exists("/etc/passwd") and not f.exists("/opt/x")
        # Root, named, still reads what the user may not, and owns what it writes; a call
        # that names no one runs as the sandbox's default user (`user` here).
        assert f.read("/etc/shadow", user="root").startswith("root:")
        f.write("/tmp/r.txt", "r", user="root")
        assert f.stat("/tmp/r.txt")["owner"] == "root"
        f.write("/tmp/u.txt", "u")
        assert f.stat("/tmp/u.txt")["owner"] == "user"
        with pytest.raises(sbx.SbxError) as e:
            f.read("/etc/shadow")
        assert e.value.status == 403
        with pytest.raises(sbx.NotFoundError):
            f.read("/etc/passwd", user="nosuchuser")


def test_bad_requests_are_clear_and_change_nothing(daemon, client):
    with client.create(image="busybox") as sb:
        sid = sb.id
        sb.files.write("/keep.txt", "keep")
        sb.exec("mkfifo /tmp/fifo")
        cases = [
            ("GET", f"/v1/sandboxes/{sid}/files", 400),                          # no path
            ("GET", f"/v1/sandboxes/{sid}/files?path=relative", 400),
            ("GET", f"/v1/sandboxes/{sid}/files?path=/nope", 404),
            ("GET", f"/v1/sandboxes/{sid}/files?path=/etc", 400),                 # a folder
            ("GET", f"/v1/sandboxes/{sid}/files?path=/tmp/fifo", 400),            # never hangs
            ("GET", f"/v1/sandboxes/{sid}/files?path=/dev/zero", 400),            # not regular
            ("GET", f"/v1/sandboxes/{sid}/files/list?path=/&depth=0", 400),
            ("GET", f"/v1/sandboxes/{sid}/files/list?path=/&depth=x", 400),
            ("GET", f"/v1/sandboxes/{sid}/files/list?path=/keep.txt", 400),
            ("PUT", f"/v1/sandboxes/{sid}/files?path=/x&mode=99", 400),
            ("PUT", f"/v1/sandboxes/{sid}/files?path=/etc", 400),                 # a folder
            ("PUT", f"/v1/sandboxes/{sid}/files?path=/", 400),
            ("PUT", f"/v1/sandboxes/{sid}/files?path=/a%00b", 400),
            ("PUT", f"/v1/sandboxes/{sid}/files?path=/no/such/dir/f&parents=false", 404),
            ("DELETE", f"/v1/sandboxes/{sid}/files?path=/", 400),
            ("DELETE", f"/v1/sandboxes/{sid}/files?path=/keep.txt&recursive=maybe", 400),
            ("GET", "/v1/sandboxes/nosuch/files?path=/x", 404),
        ]
        for method, path, want in cases:
            status, body = daemon.raw(method, path, body=b"x" if method == "PUT" else None)
            assert status == want, (method, path, status, body)
            assert body["error"]["code"] in ("invalid_request", "not_found"), body
        status, body = daemon.raw("POST", f"/v1/sandboxes/{sid}/files/mkdir", body={"path": "/a", "bogus": 1})
        assert status == 400
        status, body = daemon.raw("POST", f"/v1/sandboxes/{sid}/files/move", body={"from": "/keep.txt", "to": 3})
        assert status == 400
        assert sb.files.read("/keep.txt") == "keep"
        assert sb.exec("echo alive").stdout == "alive\n"
        # A stopped sandbox: 409, its files untouched.
        sb.stop()
        status, body = daemon.raw("GET", f"/v1/sandboxes/{sid}/files?path=/keep.txt")
        assert status == 409 and body["error"]["code"] == "conflict"
        sb.start()
        assert sb.files.read("/keep.txt") == "keep"


def test_paths_never_leave_the_sandbox(daemon, client, tmp_path):
    host_sentinel = tmp_path / "sentinel"
    host_sentinel.write_text("host")
    with client.create(image="busybox") as sb:
        sb.exec(f"mkdir -p /t && ln -s / /t/root && ln -s /proc/self/root /t/proc_root && "
                f"ln -s ../../../../../../.. /t/up && ln -s {tmp_path} /t/hostdir")
        # Writes through links land inside the sandbox, never on the host.
        sb.files.write("/t/root/escaped-1", "x")
        sb.files.write("/t/up/escaped-2", "x")
        sb.files.write(f"{tmp_path}/" + "../" * 12 + "escaped-3", "x")
        sb.files.write("/t/hostdir/sentinel", "overwritten")
        assert host_sentinel.read_text() == "host"
        for n in ("escaped-1", "escaped-2", "escaped-3"):
            assert not os.path.exists("/" + n)
            assert sb.files.read("/" + n) == "x"
        assert sb.files.read(f"{tmp_path}/sentinel") == "overwritten"  # the sandbox's own copy
        # Magic links (/proc/PID/root, /proc/PID/fd) are refused outright.
        status, body = daemon.raw("GET", f"/v1/sandboxes/{sb.id}/files?path=/t/proc_root/etc/hostname")
        assert status == 400, body
        status, body = daemon.raw("GET", f"/v1/sandboxes/{sb.id}/files?path=/proc/1/root/etc/hostname")
        assert status in (400, 403), body
        # Reading through a link to / gives the sandbox's files, not the host's.
        sb.exec("mkdir -p /etc && echo mine > /etc/marker-file")
        assert sb.files.read("/t/root/etc/marker-file") == "mine\n"
        assert not os.path.exists("/etc/marker-file")


@pytest.mark.container_wall("gVisor's kernel has no RENAME_EXCHANGE: the race cannot be made there")
def test_rename_exchange_race_during_1000_transfers(daemon, client, tmp_path):
    """A loop inside the sandbox swaps a real folder with a symlink to / (renameat2
    RENAME_EXCHANGE) while 1,000 uploads and downloads go through that folder."""
    host_sentinel = tmp_path / "sentinel"
    host_sentinel.write_text("host")
    marker = "race-" + os.urandom(4).hex()
    with client.create(image="default", user="root") as sb:  # python3 for renameat2
        sb.exec(f"mkdir -p /race/d {tmp_path} && echo inside > {tmp_path}/sentinel && ln -s {tmp_path} /race/l")
        swapper = (
            "import ctypes,os\n"
            "libc=ctypes.CDLL(None,use_errno=True)\n"
            "while True: libc.renameat2(-100,b'/race/d',-100,b'/race/l',2)\n"
        )
        sb.files.write("/race/swap.py", swapper)
        sb.exec("nohup python3 /race/swap.py >/dev/null 2>&1 &")
        time.sleep(0.3)
        assert sb.exec("grep -l swap.py /proc/[0-9]*/cmdline").stdout.strip()
        # The swap really happens: /race/d is sometimes the link.
        kinds = {sb.files.stat("/race/d")["type"] for _ in range(50)}
        assert kinds == {"dir", "symlink"}, kinds
        errors = 0
        for i in range(500):
            try:
                sb.files.write(f"/race/d/sentinel", f"{marker}-{i}")
            except sbx.ApiError:
                errors += 1
            try:
                sb.files.read("/race/d/sentinel")
            except sbx.ApiError:
                errors += 1
        # Whatever each call resolved, it was inside the sandbox.
        assert host_sentinel.read_text() == "host"
        assert not any(marker in open(p, errors="replace").read()
                       for p in [str(host_sentinel)] if os.path.exists(p))
        got = sb.exec(f"cat /race/d/sentinel /race/l/sentinel {tmp_path}/sentinel").stdout
        assert marker in got
        assert errors < 1000


def test_aborted_upload_leaves_no_partial_file(daemon, client):
    with client.create(image="busybox") as sb:
        sb.files.write("/up/file", "old")
        c = http.client.HTTPConnection("127.0.0.1", daemon.port, timeout=10)
        c.putrequest("PUT", f"/v1/sandboxes/{sb.id}/files?path=/up/file")
        c.putheader("Authorization", "Bearer " + daemon.key)
        c.putheader("Content-Length", str(10 << 20))
        c.endheaders()
        c.send(b"n" * (1 << 20))
        c.close()  # gone after 1 MiB of 10
        time.sleep(0.5)
        assert sb.files.read("/up/file") == "old"
        assert sb.exec("ls -a /up").stdout.split() == [".", "..", "file"]
        # An upload without credentials is refused before the body is read.
        status, body = daemon.raw("PUT", f"/v1/sandboxes/{sb.id}/files?path=/up/x", body=b"x", auth=False)
        assert status == 401


def test_archives_round_trip_and_hostile_tars(daemon, client, tmp_path):
    src = tmp_path / "src"
    (src / "sub" / "deeper").mkdir(parents=True)
    (src / "a.txt").write_text("A")
    (src / "sub" / "b.bin").write_bytes(os.urandom(300000))
    (src / "sub" / "deeper" / ("long-" + "n" * 150)).write_text("long name")
    os.symlink("a.txt", src / "link")
    os.chmod(src / "a.txt", 0o600)
    with client.create(image="busybox") as sb:
        assert sb.files.upload_dir(str(src), "/w").type == "archive.extracted"
        assert sb.files.read("/w/a.txt") == "A"
        assert sb.files.stat("/w/a.txt")["mode"] == 0o600
        assert sb.files.stat("/w/link")["target"] == "a.txt"
        out = tmp_path / "out"
        sb.files.download_dir("/w", str(out))
        assert (out / "sub" / "b.bin").read_bytes() == (src / "sub" / "b.bin").read_bytes()
        assert (out / "sub" / "deeper" / ("long-" + "n" * 150)).read_text() == "long name"
        assert os.readlink(out / "link") == "a.txt"
        # gzip is accepted.
        data = tar_bytes([({"name": "g/z.txt"}, b"zipped")], gz=True)
        status, body = put_archive(daemon, sb.id, "/w", data)
        assert status == 200 and body["files"] == 1, body
        assert sb.files.read("/w/g/z.txt") == "zipped"

        hostile = [
            ([({"name": "../evil"}, b"x")], 400),
            ([({"name": "/abs"}, b"x")], 400),
            ([({"name": "ok/../../evil"}, b"x")], 400),
            ([({"name": "out", "type": tarfile.SYMTYPE, "linkname": "/etc"}, None)], 400),
            ([({"name": "out", "type": tarfile.SYMTYPE, "linkname": "../../etc"}, None)], 400),
            ([({"name": "hl", "type": tarfile.LNKTYPE, "linkname": "../../etc/passwd"}, None)], 400),
            ([({"name": "dev", "type": tarfile.CHRTYPE}, None)], 400),
            ([({"name": "fifo", "type": tarfile.FIFOTYPE}, None)], 400),
        ]
        for entries, want in hostile:
            status, body = put_archive(daemon, sb.id, "/h", tar_bytes(entries))
            assert status == want, (entries, body)
        # A link inside the folder is fine; a later entry cannot write through it to
        # outside: the link points inside, and writes resolve beneath the folder.
        status, body = put_archive(daemon, sb.id, "/h2", tar_bytes([
            ({"name": "in", "type": tarfile.SYMTYPE, "linkname": "sub"}, None),
            ({"name": "sub/f"}, b"via"),
        ]))
        assert status == 200, body
        assert sb.exec("cat /h2/in/f; ls /etc/passwd").stdout == "via/etc/passwd\n"
        # Garbage and truncated archives are refused.
        status, body = put_archive(daemon, sb.id, "/h3", b"not a tar" * 100)
        assert status == 400, body
        good = tar_bytes([({"name": "t"}, b"x" * 5000)])
        status, body = put_archive(daemon, sb.id, "/h3", good[:1500])
        assert status == 400, body
        assert sb.exec("echo alive").stdout == "alive\n"


def test_tar_bombs_stop_at_the_disk_limit(daemon, client):
    with client.create(image="busybox", resources={"disk_mb": 16}) as sb:
        assert sb.data["resources"]["disk_mb"] == 16
        # A header claiming more than the disk holds: refused before any byte.
        hdr = tarfile.TarInfo("huge")
        hdr.size = 1 << 40
        raw = hdr.tobuf(format=tarfile.GNU_FORMAT)
        status, body = put_archive(daemon, sb.id, "/bomb", raw + b"\0" * 4096)
        assert status == 413 and body["error"]["code"] == "too_large", body
        # A gzip that inflates to far more than the disk: stopped at the limit.
        z = zlib.compressobj(9, zlib.DEFLATED, 31)
        chunk = b"\0" * (1 << 20)
        data = tar_bytes([({"name": "small"}, b"ok")])[:-1024]  # no end marker
        hdr = tarfile.TarInfo("zeros")
        hdr.size = 200 << 20
        gz = z.compress(data) + z.compress(hdr.tobuf(format=tarfile.USTAR_FORMAT))
        for _ in range(200):
            gz += z.compress(chunk)
        gz += z.flush()
        assert len(gz) < 1 << 20
        status, body = put_archive(daemon, sb.id, "/bomb", gz)
        assert status == 413, body
        # One file bigger than the disk: the same.
        status, body = daemon.raw("PUT", f"/v1/sandboxes/{sb.id}/files?path=/big", body=b"\0" * (17 << 20))
        assert status == 413, body
        assert not sb.files.exists("/big")
        assert sb.exec("echo alive").stdout == "alive\n"


def test_files_wake_a_paused_sandbox_and_tokens_cannot_use_them(daemon, client):
    with client.create(image="busybox") as sb:
        sb.files.write("/p.txt", "paused?")
        sb.pause()
        assert sb.files.read("/p.txt") == "paused?"
        assert sb.refresh().state == "running"
        token = sb.exec("echo -n $SBX_TOKEN").stdout
        for method, path in [("GET", f"/v1/sandboxes/{sb.id}/files?path=/p.txt"),
                             ("PUT", f"/v1/sandboxes/{sb.id}/files?path=/p.txt"),
                             ("GET", f"/v1/sandboxes/{sb.id}/files/list?path=/"),
                             ("GET", f"/v1/sandboxes/{sb.id}/archive?path=/"),
                             ("PUT", f"/v1/sandboxes/{sb.id}/archive?path=/")]:
            status, body = daemon.raw(method, path, body=b"x" if method == "PUT" else None,
                                      headers={"Authorization": "Bearer " + token})
            assert status == 403, (method, path, body)
        assert sb.files.read("/p.txt") == "paused?"


def test_cli_cp_files_and_folders_both_ways(daemon, client, tmp_path):
    src = tmp_path / "tree"
    (src / "in").mkdir(parents=True)
    (src / "in" / "f.txt").write_text("folder file")
    one = tmp_path / "one.bin"
    one.write_bytes(os.urandom(100000))
    with client.create(image="busybox") as sb:
        daemon.cli("cp", str(one), f"{sb.id}:/dst/one.bin")
        assert sb.files.read_bytes("/dst/one.bin") == one.read_bytes()
        daemon.cli("cp", str(one), f"{sb.id}:/dst")  # into a folder: keeps the name
        assert sb.files.stat("/dst/one.bin")["size"] == 100000
        daemon.cli("cp", str(src), f"{sb.id}:/tree")
        assert sb.files.read("/tree/in/f.txt") == "folder file"
        back = tmp_path / "back"
        back.mkdir()
        daemon.cli("cp", f"{sb.id}:/dst/one.bin", str(back))
        assert (back / "one.bin").read_bytes() == one.read_bytes()
        daemon.cli("cp", f"{sb.id}:/tree", str(tmp_path / "tree2"))
        assert (tmp_path / "tree2" / "in" / "f.txt").read_text() == "folder file"
        p = daemon.cli("cp", f"{sb.id}:/missing", str(back), check=False)
        assert p.returncode != 0 and "no such file" in p.stderr.lower(), p.stderr
        p = daemon.cli("cp", str(one), str(back), check=False)
        assert p.returncode != 0 and "exactly one side" in p.stderr


def test_cli_cp_follows_docker_cp(daemon, client, tmp_path):
    """docker cp's rules: into an existing folder goes the folder itself (SRC/. its
    contents), a missing destination becomes it, a destination ending in / must exist,
    a folder never lands on a file; and sbx says what it copied."""
    env_cwd = tmp_path / "here"
    env_cwd.mkdir()
    src = tmp_path / "proj"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "a.txt").write_text("a")
    with client.create(image="busybox") as sb:
        sb.exec("mkdir -p /root/src/deep /work && echo s > /root/src/deep/s.txt && echo f > /root/file", check=True)
        p = subprocess.run([SBX, "cp", f"{sb.id}:/root/src", "."], cwd=env_cwd, capture_output=True, text=True,
                           env=dict(os.environ, SBX_URL=daemon.url, SBX_API_KEY=daemon.key), stdin=subprocess.DEVNULL)
        assert p.returncode == 0, p.stderr
        assert (env_cwd / "src" / "deep" / "s.txt").read_text() == "s\n"
        assert "copied folder" in p.stderr and str(env_cwd / "src") in p.stderr or "./src" in p.stderr, p.stderr
        into = tmp_path / "into"
        into.mkdir()
        daemon.cli("cp", f"{sb.id}:/root/src/.", str(into))  # the contents
        assert (into / "deep" / "s.txt").exists() and not (into / "src").exists()
        p = daemon.cli("cp", f"{sb.id}:/root/file", str(tmp_path / "nowhere") + "/", check=False)
        assert p.returncode == 1 and "does not exist" in p.stderr
        (tmp_path / "plain").write_text("x")
        p = daemon.cli("cp", f"{sb.id}:/root/src", str(tmp_path / "plain"), check=False)
        assert p.returncode == 1 and "onto the file" in p.stderr
        # Uploads, the same rules.
        out = daemon.cli("cp", str(src), f"{sb.id}:/work")
        assert sb.files.read("/work/proj/sub/a.txt") == "a" and "copied folder" in out.stderr
        daemon.cli("cp", str(src) + "/.", f"{sb.id}:/work")
        assert sb.files.read("/work/sub/a.txt") == "a"
        daemon.cli("cp", str(src), f"{sb.id}:/fresh")  # missing: becomes the folder
        assert sb.files.read("/fresh/sub/a.txt") == "a"
        p = daemon.cli("cp", str(src / "sub" / "a.txt"), f"{sb.id}:/nope/", check=False)
        assert p.returncode == 1 and "does not exist" in p.stderr
        p = daemon.cli("cp", str(src), f"{sb.id}:/root/file", check=False)
        assert p.returncode == 1 and "onto the file" in p.stderr
        p = daemon.cli("cp", str(src), "relative:path", check=False)
        assert p.returncode != 0


def test_cli_cp_dash_is_a_tar_on_stdout_and_from_stdin(daemon, client, tmp_path):
    """As docker cp: `ID:PATH -` writes a tar of PATH (a file, a folder as itself, PATH/.
    its contents); `- ID:DIR` unpacks a tar from stdin into a folder that exists."""
    env = dict(os.environ, SBX_URL=daemon.url, SBX_API_KEY=daemon.key)

    def cp(*args, data=None):
        return subprocess.run([SBX, "cp", *args], input=data, capture_output=True, env=env,
                              stdin=None if data is not None else subprocess.DEVNULL)

    def members(out):
        assert out.returncode == 0, out.stderr
        return tarfile.open(fileobj=io.BytesIO(out.stdout))

    with client.create(image="busybox") as sb:
        sb.exec("mkdir -p /root/src/deep && echo s > /root/src/deep/s.txt && printf 'f\\0\\377' > /root/file",
                check=True)
        t = members(cp(f"{sb.id}:/root/src", "-"))
        assert "src/deep/s.txt" in t.getnames() and t.extractfile("src/deep/s.txt").read() == b"s\n"
        t = members(cp(f"{sb.id}:/root/file", "-"))
        assert t.getnames() == ["file"] and t.extractfile("file").read() == b"f\0\377"
        names = members(cp(f"{sb.id}:/root/src/.", "-")).getnames()
        assert "./deep/s.txt" in names and not any(n.startswith("src") for n in names), names
        assert not (tmp_path / "-").exists() and not os.path.exists("-")
        # A tar made here, unpacked into a folder of the sandbox.
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for name, data in (("data/x.txt", b"x\n"), ("data/sub/y.bin", os.urandom(5000))):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        p = cp("-", f"{sb.id}:/root", data=buf.getvalue())
        assert p.returncode == 0 and b"copied an archive from stdin" in p.stderr, p.stderr
        assert sb.files.read("/root/data/x.txt") == "x\n" and sb.files.stat("/root/data/sub/y.bin")["size"] == 5000
        # Into a folder that does not exist, or onto a file: refused, nothing made.
        for dest in ("/nope", "/root/file"):
            p = cp("-", f"{sb.id}:{dest}", data=buf.getvalue())
            assert p.returncode == 1 and b"must be a folder that exists" in p.stderr, p.stderr
        assert sb.exec("test -e /nope").exit_code != 0
