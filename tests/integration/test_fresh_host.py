"""The fresh-host path of the README's set-up: a daemon whose data dir (and its parent)
does not exist yet makes every folder it writes to, with the store and CRIU, and serves
sandboxes at once. (scripts/test.sh rehearses CRIU's build into a cache folder that does
not exist yet.)"""
import os
import shutil
import tempfile

from conftest import CRIU, Daemon, criu_checkpoints


def test_a_daemon_on_a_data_dir_that_does_not_exist_yet_serves_sandboxes():
    parent = tempfile.mkdtemp(prefix="sbx-fresh-", dir="/var/tmp")
    os.chmod(parent, 0o711)
    data = os.path.join(parent, "new", "data")
    assert not os.path.exists(os.path.dirname(data))
    d = Daemon("fresh-host", extra_args=["--store-mb", "1024", "--criu", CRIU], data_dir=data,
               log_path=os.path.join(parent, "sbxd.log"))
    try:
        assert os.path.isfile(os.path.join(data, "api-key"))
        c = d.client()
        sb = c.create(type="small", ttl_seconds=120, no_env=True)
        assert sb.exec("echo hello > /root/f && cat /root/f", check=True).stdout == "hello\n"
        if criu_checkpoints()[0]:
            sb.pause(mode="hibernate")
            sb.resume()
        else:  # CRIU cannot checkpoint on this kernel: sbxd said so and runs without
            assert "container" not in d.raw("GET", "/v1/health", auth=False)[1]["features"]["hibernate_isolation"]
        assert sb.exec("cat /root/f", check=True).stdout == "hello\n"
        sb.delete()
    finally:
        d.destroy()
        shutil.rmtree(parent, ignore_errors=True)
