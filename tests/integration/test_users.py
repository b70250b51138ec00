"""Commands as another user of the sandbox: `"user"` on exec and background processes, in
the API, the CLI (`-u`) and the Python SDK; the `default` image's user `user` (uid 1000),
who runs what names no one; the sandbox's `user`, chosen at create."""
import json
import os
import subprocess

import pytest
from sbx import SbxError

from conftest import ISOLATION, SBX


def run(daemon, sid, **body):
    status, out = daemon.raw("POST", f"/v1/sandboxes/{sid}/exec", body=body)
    assert status == 200, out
    return out


def test_default_image_user(daemon, client):
    with client.create(image="default") as sb:
        out = run(daemon, sb.id, cmd="id; echo $HOME $USER $LOGNAME; pwd; touch ~/made && stat -c %U:%G ~/made",
                  user="user")
        assert out["stdout"] == ("uid=1000(user) gid=1000(user) groups=1000(user)\n"
                                 "/home/user user user\n/home/user\nuser:user\n"), out
        # The sandbox's default is that user: a call without `user` runs as it too.
        assert sb.user == "user"
        out = run(daemon, sb.id, cmd="id -u; echo $HOME; pwd")
        assert out["stdout"] == "1000\n/home/user\n/home/user\n", out
        # Root, when a call says `root` or `0`.
        for body in ({"user": "root"}, {"user": "0"}):
            out = run(daemon, sb.id, cmd="id -u; echo $HOME; pwd", **body)
            assert out["stdout"] == "0\n/root\n/root\n", (body, out)
        # The sandbox's or the exec's env wins over the user's HOME; cwd as asked.
        out = run(daemon, sb.id, cmd="echo $HOME; pwd", user="user", env={"HOME": "/tmp"}, cwd="/tmp")
        assert out["stdout"] == "/tmp\n/tmp\n"
        # Its groups: the primary one and those that list it.
        run(daemon, sb.id, cmd="groupadd -g 2000 team && usermod -aG team user", user="root")
        assert run(daemon, sb.id, cmd="id -G", user="user")["stdout"] == "1000 2000\n"
        # A user with no home directory starts in / (nobody's home is /nonexistent).
        out = run(daemon, sb.id, cmd="id -un; pwd; echo $HOME", user="nobody")
        assert out["stdout"] == "nobody\n/\n/nonexistent\n"
        # Root's files stay root's.
        out = run(daemon, sb.id, cmd="cat /etc/shadow; echo x >> /etc/passwd", user="user")
        assert out["exit_code"] != 0 and out["stderr"].count("Permission denied") == 2, out


def test_unknown_and_invalid_users(daemon, client):
    with client.create(image="busybox") as sb:
        out = run(daemon, sb.id, cmd="true", user="nosuch")
        assert out["exit_code"] == 127
        assert out["stderr"] == "sbx: user nosuch: no user \"nosuch\" in the sandbox's /etc/passwd\n"
        assert sb.user == "root"  # an image without `user` keeps root
        for bad in ("a:b", "Root", "x" * 40, "-u", "1.5", "4294967295", ""):
            status, body = daemon.raw("POST", f"/v1/sandboxes/{sb.id}/exec", body={"cmd": "true", "user": bad})
            if bad == "":
                assert status == 200 and body["exit_code"] == 0  # empty: root, as if not given
                continue
            assert status == 400 and body["error"]["code"] == "invalid_request", (bad, body)
            assert "invalid user" in body["error"]["message"]
        status, body = daemon.raw("POST", f"/v1/sandboxes/{sb.id}/exec", body={"cmd": "true", "user": 7})
        assert status == 400
        # A uid the sandbox's user namespace does not map cannot be taken on: said, and
        # the sandbox goes on. A VM's kernel has no such namespace: any uid is its own.
        out = run(daemon, sb.id, cmd="id -u", user="70000")
        if ISOLATION == "microvm":
            assert out["exit_code"] == 0 and out["stdout"] == "70000\n", out
        else:
            assert out["exit_code"] == 127 and "cannot become user 70000" in out["stderr"], out
        assert run(daemon, sb.id, cmd="id -u")["stdout"] == "0\n"


def test_processes_cli_and_sdk(daemon, client):
    env = dict(os.environ, SBX_URL=daemon.url, SBX_API_KEY=daemon.key)
    with client.create(image="default") as sb:
        p = sb.processes.start("id -un; pwd", user="user")
        assert p.data["user"] == "user"
        assert p.data["cwd"] == "/home/user"  # the user's home, chosen inside
        p.wait(timeout=30)
        text = "".join(ev.get("data", "") for ev in p.output() if ev.get("type") == "stdout")
        assert text == "user\n/home/user\n"
        # A home the user cannot enter: it starts in /, and says so.
        sb.exec("chown root /home/user && chmod 700 /home/user", user="root")
        q = sb.processes.start("pwd; sleep 30", user="user")
        assert q.data["cwd"] == "/", q.data
        assert [x.data["cwd"] for x in sb.processes.list() if x.pid == q.pid] == ["/"]
        q.kill()
        sb.exec("chown user /home/user && chmod 755 /home/user", user="root")
        assert [x.data["user"] for x in sb.processes.list() if x.pid == p.pid] == ["user"]
        root = sb.processes.start("sleep 300", user="root")
        assert root.data["user"] == "root"
        # A user's process cannot signal root's.
        out = sb.exec(f"kill {root.pid}", user="user")
        assert out.exit_code != 0 and "not permitted" in out.stderr
        root.kill()
        # The SDK's exec.
        assert sb.exec("id -u", user="user").stdout == "1000\n"
        assert sb.exec("id -u", user="user", binary=True).stdout == b"1000\n"
        # The CLI: exec -u, exec -i -u (a background process), spawn -u.
        r = subprocess.run([SBX, "exec", "-u", "user", sb.id, "--", "id", "-un"], env=env, capture_output=True,
                           text=True, timeout=60)
        assert (r.returncode, r.stdout) == (0, "user\n"), r.stderr
        r = subprocess.run([SBX, "exec", "-i", "--user", "user", sb.id, "--", "sh", "-c", "cat; id -u"],
                           input="in\n", env=env, capture_output=True, text=True, timeout=60)
        assert (r.returncode, r.stdout) == (0, "in\n1000\n"), r.stderr
        r = subprocess.run([SBX, "spawn", "-u", "user", sb.id, "--", "sleep 30"], env=env, capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        pid = int(r.stdout)
        assert sb.exec(f"stat -c %U /proc/{pid}").stdout == "user\n"


def test_sandbox_default_user(daemon, client):
    """`user` at create: who runs what names no one, in exec, processes, files and the
    CLI; checked against the image; kept by forks and templates."""
    env = dict(os.environ, SBX_URL=daemon.url, SBX_API_KEY=daemon.key)
    def ids():
        status, body = daemon.raw("GET", "/v1/sandboxes")
        assert status == 200
        return {s["id"] for s in body["sandboxes"]}

    before = ids()
    # A name the image does not have is refused, and nothing is made.
    for user, image in (("nosuch", "default"), ("user", "busybox"), ("Bad:name", "default")):
        status, body = daemon.raw("POST", "/v1/sandboxes", body={"image": image, "user": user})
        assert status == 400 and body["error"]["code"] == "invalid_request", (user, body)
        assert user.split(":")[0] in body["error"]["message"]
    status, body = daemon.raw("POST", "/v1/sandboxes", body={"image": "default", "user": 5})
    assert status == 400
    assert ids() == before

    with client.create(image="default") as sb:
        # Files as that user: its home is its own, root's places are not.
        sb.files.write("/home/user/mine.txt", "hi")
        assert sb.exec("stat -c %U:%G /home/user/mine.txt").stdout == "user:user\n"
        with pytest.raises(SbxError) as err:
            sb.files.write("/root/no.txt", "x")
        assert "ermission denied" in str(err.value)
        sb.files.write("/root/yes.txt", "x", user="root")
        assert sb.exec("cat /root/yes.txt", user="root").stdout == "x"
        # A background process, and the CLI's exec.
        p = sb.processes.start("id -un")
        assert p.data["user"] == "user"
        r = subprocess.run([SBX, "exec", sb.id, "--", "id", "-un"], env=env, capture_output=True, text=True,
                           timeout=60)
        assert (r.returncode, r.stdout) == (0, "user\n"), r.stderr
        # A template of it keeps its user, unless a create names another.
        assert sb.snapshot("users-tmpl").user == "user"
        try:
            with client.create(from_="users-tmpl") as t:
                assert t.user == "user" and t.exec("id -un").stdout == "user\n"
            with client.create(from_="users-tmpl", user="root") as t:
                assert t.user == "root" and t.exec("id -un").stdout == "root\n"
        finally:
            daemon.raw("DELETE", "/v1/snapshots/users-tmpl")

    # Root by choice, through the CLI.
    r = subprocess.run([SBX, "create", "--image", "default", "-u", "root", "--json"], env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    made = json.loads(r.stdout)
    try:
        assert made["user"] == "root"
        sb = client.get(made["id"])
        assert sb.exec("id -u").stdout == "0\n"
        sb.files.write("/root/ok.txt", "x")
        # A template of a root sandbox holds root's files: its sandboxes run as root.
        assert sb.snapshot("users-root-tmpl").user == "root"
        try:
            with client.create(from_="users-root-tmpl") as t:
                assert t.user == "root" and t.exec("cat ~/ok.txt").stdout == "x"
        finally:
            daemon.raw("DELETE", "/v1/snapshots/users-root-tmpl")
        forks = sb.fork(1)
        try:
            assert forks[0].user == "root" and forks[0].exec("id -u").stdout == "0\n"
        finally:
            for f in forks:
                f.delete()
    finally:
        client.get(made["id"]).delete()

    # Another user of the image, or a uid.
    with client.create(image="default", user="nobody") as sb:
        assert sb.user == "nobody" and sb.exec("id -un").stdout == "nobody\n"
    with client.create(image="busybox", user="4242") as sb:
        assert sb.user == "4242" and sb.exec("id -u").stdout == "4242\n"


def test_disks_template_builds_and_copies_choose_their_user(daemon, client, tmp_path):
    """A sandbox that mounts disks runs as root (the disks' owner, as their calls) unless
    told; `sbx template build -u` picks the steps' user and the template keeps the
    sandbox's; `sbx cp -u` reads and writes as that user."""
    disk = client.disks.create(size_mb=64)
    try:
        disk.exec("echo kept > note")
        with client.create(image="default", disks=[{"id": disk.id, "mount_path": "/mnt/work"}]) as sb:
            assert sb.user == "root"
            assert sb.exec("echo more >> /mnt/work/note && id -u").stdout == "0\n"
        with client.create(image="default", user="user", disks=[{"id": disk.id, "mount_path": "/mnt/work"}]) as sb:
            assert sb.user == "user" and sb.exec("cat /mnt/work/note").stdout == "kept\nmore\n"
            assert sb.exec("touch /mnt/work/x").exit_code != 0  # root's disk: read-only to user
    finally:
        disk.delete()

    # Steps as root (apt's places), the template as the image's user.
    r = daemon.cli("template", "build", "users-built", "--image", "default", "-u", "root",
                   "--run", "id -un > /etc/built-by && mkdir -p /opt/tool && touch /opt/tool/ok",
                   "--run", "test -w /root")
    try:
        snap = client.snapshots.get("users-built")
        assert snap.user == "user"
        with client.create(from_="users-built") as t:
            assert t.exec("id -un; cat /etc/built-by; ls /opt/tool").stdout == "user\nroot\nok\n"
    finally:
        daemon.raw("DELETE", "/v1/snapshots/users-built")
    # Without -u the steps run as the sandbox's user: root's places are closed to them.
    r = daemon.cli("template", "build", "users-denied", "--image", "default", "--run", "touch /etc/nope",
                   check=False)
    assert r.returncode != 0 and "step 1 failed" in r.stderr, r.stderr
    status, _ = daemon.raw("GET", "/v1/snapshots/users-denied")
    assert status == 404

    # sbx cp: as the sandbox's user by default, as another with -u.
    src = tmp_path / "conf.txt"
    src.write_text("c\n")
    with client.create(image="default") as sb:
        daemon.cli("cp", str(src), f"{sb.id}:/home/user/conf.txt")
        assert sb.exec("stat -c %U /home/user/conf.txt").stdout == "user\n"
        r = daemon.cli("cp", str(src), f"{sb.id}:/etc/app.conf", check=False)
        assert r.returncode != 0 and "ermission denied" in r.stderr, r.stderr
        daemon.cli("cp", "-u", "root", str(src), f"{sb.id}:/etc/app.conf")
        assert sb.exec("stat -c %U /etc/app.conf; cat /etc/app.conf").stdout == "root\nc\n"
        sb.exec("mkdir /root/secret && echo s > /root/secret/f", user="root")
        r = daemon.cli("cp", f"{sb.id}:/root/secret", str(tmp_path / "out"), check=False)
        assert r.returncode != 0, r.stdout
        daemon.cli("cp", "--user", "root", f"{sb.id}:/root/secret", str(tmp_path / "out"))
        assert (tmp_path / "out" / "f").read_text() == "s\n"
