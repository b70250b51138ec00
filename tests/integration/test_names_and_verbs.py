"""Docker's habits: a name or a unique id prefix wherever an id goes (API and CLI, sandboxes
and disks), usage errors that exit 2 with a "did you mean", and the everyday verbs
(kill, update, image rm, version, ls -q / --filter / -m)."""
import io
import json
import os
import secrets
import tarfile
import time

from conftest import busybox_applets


def test_sandboxes_by_name_and_by_id_prefix(daemon, client):
    tag = secrets.token_hex(4)
    a = client.create(image="busybox", name=f"web-{tag}")
    b = client.create(image="busybox")
    try:
        for ref in (a.id, f"web-{tag}", a.id[:10], a.id[3:12]):
            status, body = daemon.raw("GET", f"/v1/sandboxes/{ref}")
            assert status == 200 and body["id"] == a.id, (ref, body)
        status, body = daemon.raw("POST", f"/v1/sandboxes/web-{tag}/exec", body={"cmd": "echo by-name"})
        assert status == 200 and body["stdout"] == "by-name\n"
        # "sb-" begins every id: ambiguous, and nothing happens.
        status, body = daemon.raw("POST", "/v1/sandboxes/sb-/stop")
        assert status == 400 and body["error"]["message"].startswith("ambiguous"), body
        assert a.refresh().state == "running" and b.refresh().state == "running"
        status, body = daemon.raw("GET", f"/v1/sandboxes/no-such-{tag}")
        assert status == 404 and f"no-such-{tag}" in body["error"]["message"]
        # An id wins over a name that looks like another sandbox's id.
        c = client.create(image="busybox", name=b.id[:12])
        try:
            status, body = daemon.raw("GET", f"/v1/sandboxes/{b.id}")
            assert body["id"] == b.id
            status, body = daemon.raw("GET", f"/v1/sandboxes/{b.id[:12]}")
            assert body["id"] == c.id  # a name comes before a prefix
        finally:
            c.delete()
        # A sandbox's token reaches its own sandbox by name, and learns nothing of others:
        # another's name, an ambiguous prefix and a missing name are refused alike.
        token = a.exec("echo $SBX_TOKEN").stdout.strip()
        hdr = {"Authorization": "Bearer " + token}
        status, body = daemon.raw("GET", f"/v1/sandboxes/web-{tag}", headers=hdr, auth=False)
        assert status == 200 and body["id"] == a.id
        answers = {daemon.raw("GET", f"/v1/sandboxes/{ref}", headers=hdr, auth=False)[0]
                   for ref in (b.id, b.id[:10], "sb-", f"no-such-{tag}")}
        assert answers == {403}
    finally:
        a.delete()
        b.delete()


def test_disks_by_name_and_prefix(daemon, client):
    tag = secrets.token_hex(4)
    status, disk = daemon.raw("POST", "/v1/disks", body={"name": f"data-{tag}", "size_mb": 64})
    assert status == 201, disk
    try:
        status, _ = daemon.raw("PUT", f"/v1/disks/data-{tag}/files?path=note.txt", body="kept\n")
        assert status == 200
        for ref in (disk["id"], f"data-{tag}", disk["id"][:8], disk["id"][3:10]):
            status, body = daemon.raw("GET", f"/v1/disks/{ref}/files?path=note.txt")
            assert status == 200 and body == "kept\n", (ref, body)
        r = daemon.cli("disk", "exec", f"data-{tag}", "--", "cat note.txt")
        assert r.stdout == "kept\n"
    finally:
        daemon.raw("DELETE", f"/v1/disks/data-{tag}")
    assert daemon.raw("GET", f"/v1/disks/{disk['id']}")[0] == 404


def test_cli_usage_errors_exit_2(daemon, client):
    r = daemon.cli("exce", "x", check=False)
    assert r.returncode == 2 and 'did you mean "exec"' in r.stderr, r.stderr
    r = daemon.cli("ls", "--bogus", check=False)
    assert r.returncode == 2
    with client.create(image="busybox") as a, client.create(image="busybox") as b:
        r = daemon.cli("get", "sb-", check=False)
        assert r.returncode == 2 and "ambiguous" in r.stderr
        r = daemon.cli("exec", "sb-", "--", "true", check=False)
        assert r.returncode == 2 and "ambiguous" in r.stderr
        r = daemon.cli("update", a.id, "--public", "yes", check=False)
        assert r.returncode == 2 and "true or false" in r.stderr
        r = daemon.cli("update", a.id, check=False)
        assert r.returncode == 2
        # A command's own failure stays 1; sbx's own failures in exec stay 125.
        assert daemon.cli("exec", a.id[:12], "--", "false", check=False).returncode == 1
        assert daemon.cli("exec", "no-such-box", "--", "true", check=False).returncode == 125


def test_cli_ls_update_kill_version(daemon, client):
    tag = secrets.token_hex(4)
    with client.create(image="busybox", name=f"ml-{tag}", metadata={"team": f"ml{tag}"}) as a, \
            client.create(image="busybox", metadata={"team": f"web{tag}"}) as b:
        assert daemon.cli("ls", "-q", "-m", f"team=ml{tag}").stdout.split() == [a.id]
        assert daemon.cli("ls", "-q", "--filter", f"name=ml-{tag}").stdout.split() == [a.id]
        ids = daemon.cli("ls", "-q").stdout.split()
        assert a.id in ids and b.id in ids and all(i.startswith("sb-") for i in ids)
        out = json.loads(daemon.cli("--json", "update", f"ml-{tag}", "--ttl", "7200", "--public", "true").stdout)
        assert out["id"] == a.id and out["public"] is True
        assert a.refresh().data["public"] is True
        pid = daemon.cli("spawn", f"ml-{tag}", "--", "sleep", "300").stdout.strip()
        daemon.cli("kill", f"ml-{tag}", pid)
        info = a.processes.get(int(pid)).wait(timeout=10)
        assert info["signal"] == 9
        pid = daemon.cli("spawn", a.id, "--", "sleep", "300").stdout.strip()
        daemon.cli("kill", a.id, pid, "TERM")
        assert a.processes.get(int(pid)).wait(timeout=10)["signal"] == 15
    v = daemon.cli("version").stdout
    assert v.startswith("client: sbx ") and "server: sbxd " in v
    out = json.loads(daemon.cli("--json", "version").stdout)
    assert out["client"] == out["server"]
    r = daemon.cli("--url", "http://127.0.0.1:9", "version", check=False)
    assert r.returncode == 1 and "client: sbx" in r.stdout and "unreachable" in r.stdout


def tiny_image_tar() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for d in ("bin", "tmp", "proc", "sys", "dev", "root", "etc"):
            info = tarfile.TarInfo(d)
            info.type = tarfile.DIRTYPE
            info.mode = 0o755
            t.addfile(info)
        t.add("/bin/busybox", arcname="bin/busybox")
        for a in busybox_applets():
            if a.startswith("bin/"):
                info = tarfile.TarInfo(a)
                info.type = tarfile.SYMTYPE
                info.linkname = "/bin/busybox"
                t.addfile(info)
    return buf.getvalue()


def test_image_rm_refuses_while_used(daemon, client, tmp_path):
    name = f"tiny-{secrets.token_hex(3)}"
    tar = tmp_path / "tiny.tar"
    tar.write_bytes(tiny_image_tar())
    daemon.cli("image", "import", name, str(tar))
    before = set(os.listdir(os.path.join(daemon.data, "images")))
    sb = client.create(image=name)
    sb.exec("echo x > /root/f")
    snap = f"{name}-snap"
    sb.snapshot(snap)
    sb.stop()
    r = daemon.cli("image", "rm", name, check=False)
    assert r.returncode == 1 and f"sandbox {sb.id}" in r.stderr and f"snapshot {snap}" in r.stderr, r.stderr
    status, body = daemon.raw("DELETE", f"/v1/images/{name}")
    assert status == 409 and body["error"]["code"] == "conflict"
    assert sb.start().exec("cat /root/f").stdout == "x\n"  # refused, and nothing changed
    sb.delete()
    client.api.delete_named_snapshot(snap)
    assert daemon.cli("image", "rm", name).stdout.strip() == name
    assert name not in [i["name"] for i in client.images.list()]
    after = set(os.listdir(os.path.join(daemon.data, "images")))
    assert len(before - after) == 1 and not any(d.startswith(name + "-") for d in after)
    assert daemon.raw("DELETE", f"/v1/images/{name}")[0] == 404
    client.images.import_tar(name, str(tar))  # the SDK's way, too
    client.images.delete(name)
    assert name not in [i["name"] for i in client.images.list()]
    r = daemon.cli("image", "rm", "no/such", check=False)
    assert r.returncode == 1


def test_stats_api_and_cli(daemon, client):
    with client.create(image="busybox", name=f"busy-{secrets.token_hex(3)}") as sb:
        sb.exec("(while :; do :; done) >/dev/null 2>&1 & sleep 0.2", check=True)
        status, a = daemon.raw("GET", f"/v1/sandboxes/{sb.id}/stats")
        assert status == 200, a
        assert a["id"] == sb.id and a["state"] == "running" and a["processes"] >= 2
        assert a["memory_bytes"] > 0 and a["memory_limit_bytes"] == sb.data["resources"]["memory_mb"] << 20
        assert a["pids_limit"] == sb.data["resources"]["pids"] and a["disk_bytes"] is None and a["network"] is None
        time.sleep(0.3)
        status, b = daemon.raw("GET", f"/v1/sandboxes/{sb.name}/stats")
        assert b["cpu_ns"] > a["cpu_ns"] and b["read_at_ms"] >= a["read_at_ms"]
        out = json.loads(daemon.cli("--json", "stats", sb.id).stdout)
        assert len(out) == 1 and out[0]["id"] == sb.id and out[0]["cpu_percent"] > 5, out
        table = daemon.cli("stats", "--no-stream", sb.name).stdout.splitlines()
        assert table[0].split()[:3] == ["ID", "STATE", "CPU"] and table[1].startswith(sb.id)
        # Its own token reads it; frozen it is still measured; hibernated or stopped it is not.
        token = sb.exec("echo $SBX_TOKEN").stdout.strip()
        assert daemon.raw("GET", f"/v1/sandboxes/{sb.id}/stats", headers={"Authorization": "Bearer " + token},
                          auth=False)[0] == 200
        sb.pause(mode="freeze")
        assert daemon.raw("GET", f"/v1/sandboxes/{sb.id}/stats")[0] == 200
        sb.resume()
        sb.stop()
        status, body = daemon.raw("GET", f"/v1/sandboxes/{sb.id}/stats")
        assert status == 409 and "nothing of it runs" in body["error"]["message"]
        r = daemon.cli("stats", "--no-stream", sb.id, check=False)
        assert r.returncode == 1
