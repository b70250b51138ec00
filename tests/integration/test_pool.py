"""The warm pool: creates claim booted, warmed sandboxes that are indistinguishable from
cold ones; the pool refills, follows templates, and leaves nothing behind."""
import os
import signal
import time

import pytest

from conftest import Daemon


@pytest.fixture()
def pooled():
    d = Daemon("pool", extra_args=["--pool-size", "2"])
    try:
        yield d
    finally:
        d.destroy()


def wait_pool(d, n, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if d.metric("sbx_pool_ready") >= n:
            return
        time.sleep(0.05)
    raise AssertionError(f"pool did not reach {n}: {d.metric('sbx_pool_ready')}")


def test_claimed_sandbox_is_indistinguishable_from_a_cold_one(pooled):
    d = pooled
    c = d.client()
    a = c.create(image="busybox", env={"SECRET": "tenant-a"}, name="tenant-a")
    a.exec("echo private > /root/a-file; echo tmp > /tmp/a-tmp; sleep 1000 > /dev/null 2>&1 &", check=True)
    wait_pool(d, 2)
    claims = d.metric("sbx_pool_claims_total")
    b = c.create(image="busybox", name="tenant-b", metadata={"t": "b"}, resources={"memory_mb": 128})
    assert d.metric("sbx_pool_claims_total") == claims + 1
    r = b.exec('ls -A /root /tmp; echo "[$SECRET]"; hostname; ps -o comm | sort | uniq -c')
    assert "a-file" not in r.stdout and "a-tmp" not in r.stdout
    assert "[]" in r.stdout and b.id in r.stdout
    assert "sleep" not in r.stdout
    got = c.get(b.id)
    assert got.data["name"] == "tenant-b" and got.data["metadata"] == {"t": "b"}
    assert got.data["resources"]["memory_mb"] == 128
    limit = open(f"/sys/fs/cgroup/memory/{d.cgroup_parent}/{b.id}/memory.limit_in_bytes").read().strip()
    assert int(limit) == 128 << 20
    # Billing starts at the claim.
    assert got.data["billed_seconds"] < 5
    a.delete()
    b.delete()
    # The pool refills, and pooled sandboxes are never listed.
    wait_pool(d, 2)
    assert d.sandboxes() == []


def test_pool_follows_templates_and_drops_them(pooled):
    d = pooled
    c = d.client()
    with c.create(image="busybox") as src:
        src.exec("echo baked > /root/baked", check=True)
        src.snapshot("pool-tmpl")
    c.create(from_="pool-tmpl").delete()
    wait_pool(d, 4)  # two for busybox, two for the template
    claims = d.metric("sbx_pool_claims_total")
    with c.create(from_="pool-tmpl") as t:
        assert d.metric("sbx_pool_claims_total") == claims + 1
        assert t.exec("cat /root/baked").stdout == "baked\n"
    c.api.delete_named_snapshot("pool-tmpl")
    deadline = time.time() + 30
    while d.metric("sbx_pool_ready") > 2 and time.time() < deadline:
        time.sleep(0.05)
    assert d.metric("sbx_pool_ready") <= 2


def test_restart_removes_pooled_sandboxes(pooled):
    d = pooled
    c = d.client()
    c.create(image="busybox").delete()
    wait_pool(d, 2)
    d.stop(signal.SIGKILL)
    d.extra_args = []  # no pool after the restart
    d.start()
    deadline = time.time() + 30
    while (d.processes() or d.cgroups() or d.sandbox_dirs()) and time.time() < deadline:
        time.sleep(0.05)
    assert not d.processes() and not d.cgroups() and not d.sandbox_dirs()
    assert d.sandboxes() == []


def test_forks_do_not_seed_the_pool(pooled):
    d = pooled
    c = d.client()
    with c.create(image="busybox") as src:
        for _ in range(3):
            src.fork().delete()
    time.sleep(1.5)
    # Only the image's key is kept warm; no refill chases a fork's deleted layer.
    assert d.metric("sbx_pool_ready") <= 2
    assert "filling the pool" not in d.log()


def test_repeated_calls_on_a_disk_claim_sandboxes_with_it_bound(pooled):
    d = pooled
    c = d.client()
    disk = c.disks.create(size_mb=16)
    disk.exec("echo first > f", image="busybox", check=True)  # teaches the pool this disk
    wait_pool(d, 2)
    claims = d.metric("sbx_pool_claims_total")
    r = disk.exec("cat f; echo again > g", image="busybox")
    assert r.stdout == "first\n" and d.metric("sbx_pool_claims_total") == claims + 1
    assert disk.exec("cat g", image="busybox").stdout == "again\n"
    # Deleting the disk first gives back the warm sandboxes that hold it.
    disk.delete()
    deadline = time.time() + 30
    while d.metric("sbx_pool_ready") > 0 and time.time() < deadline:
        time.sleep(0.05)
    assert d.metric("sbx_pool_ready") == 0
