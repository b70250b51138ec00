"""The store under a tenant that fills its disk: no sandbox's quota can take the whole
store, the sum of quotas can be held to the store's size, checkpoints are counted before
they are written, and bad sizes leave everything as it was."""
import pytest

from conftest import Daemon, require_hibernate

FILL = "dd if=/dev/zero of=/root/fill bs=1M 2>&1; sync"


@pytest.fixture()
def small_store():
    d = Daemon("store", extra_args=["--store-mb", "1024", "--criu", __import__("conftest").CRIU])
    try:
        yield d
    finally:
        d.destroy()


@pytest.fixture()
def committed_store():
    d = Daemon("store1", extra_args=["--store-mb", "1024", "--store-overcommit", "1"])
    try:
        yield d
    finally:
        d.destroy()


def health_store(d):
    status, body = d.raw("GET", "/v1/health", auth=False)
    assert status == 200
    return body["store"]


def test_one_sandbox_at_its_quota_leaves_the_store_to_others(small_store):
    d = small_store
    require_hibernate(d)
    c = d.client()
    store = health_store(d)
    assert 1000 <= store["size_mb"] <= 1024 and store["committed_mb"] == 0 and store["overcommit"] is None
    # More than the store can give one sandbox: the caller's error, and nothing is made.
    status, body = d.raw("POST", "/v1/sandboxes", body={"image": "busybox", "resources": {"disk_mb": 1024}})
    assert status == 400 and body["error"]["code"] == "invalid_request", body
    assert "store" in body["error"]["message"]
    assert d.sandboxes() == []
    # A type's default is brought within the store.
    with c.create(image="busybox") as hog, c.create(image="busybox", resources={"disk_mb": 600}) as other:
        disk = hog.data["resources"]["disk_mb"]
        assert disk <= store["size_mb"] - store["reserve_mb"]
        assert health_store(d)["committed_mb"] == disk + 600
        r = hog.exec(FILL, timeout_seconds=120)
        assert "Disk quota exceeded" in r.stdout or "No space left" in r.stdout, r.stdout
        written = int(hog.exec("du -m /root/fill | cut -f1").stdout)
        assert written > 600
        # The other sandbox still writes (within its own quota).
        r = other.exec("dd if=/dev/zero of=/root/mine bs=1M count=32 2>&1 && sync")
        assert r.exit_code == 0, r.stdout
        # A checkpoint that does not fit with the reserve free is refused first; the
        # sandbox runs on.
        hog.exec("rm /root/fill; sync", check=True)
        hog.exec("dd if=/dev/urandom of=/tmp/big bs=1M count=200 2>&1", check=True)
        other.exec("dd if=/dev/zero of=/root/more bs=1M count=580 2>&1; sync", timeout_seconds=120)
        status, body = d.raw("POST", f"/v1/sandboxes/{hog.id}/pause", body={"mode": "hibernate"})
        if status == 200:
            raise AssertionError(f"hibernate passed with {health_store(d)}")
        assert status == 503 and "free space" in body["error"]["message"], body
        assert hog.exec("echo alive").stdout == "alive\n"
        # With room again, it hibernates.
        other.exec("rm -f /root/more; sync", check=True)
        hog.pause(mode="hibernate")
        hog.resume()
        assert hog.exec("wc -c < /tmp/big").stdout.strip() == str(200 << 20)


def test_overcommit_one_holds_the_sum_of_quotas_to_the_store(committed_store):
    d = committed_store
    c = d.client()
    store = health_store(d)
    usable = store["size_mb"] - store["reserve_mb"]
    assert store["overcommit"] == 1
    half = usable // 2
    with c.create(image="busybox", resources={"disk_mb": half}) as hog, \
            c.create(image="busybox", resources={"disk_mb": half}) as other:
        assert health_store(d)["committed_mb"] == 2 * half
        status, body = d.raw("POST", "/v1/sandboxes", body={"image": "busybox", "resources": {"disk_mb": 32}})
        assert status == 429 and body["error"]["code"] == "quota_exceeded", body
        assert len(d.sandboxes()) == 2
        r = hog.exec(FILL, timeout_seconds=120)
        assert "Disk quota exceeded" in r.stdout, r.stdout
        # Every quota can be filled at once.
        r = other.exec(f"dd if=/dev/zero of=/root/mine bs=1M count={half - 40} 2>&1 && sync", timeout_seconds=120)
        assert r.exit_code == 0, r.stdout
    assert health_store(d)["committed_mb"] == 0
