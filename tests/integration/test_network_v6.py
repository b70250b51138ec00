"""Sandboxes' IPv6: the same rules as IPv4, against the lab network of tests/netlab.py
(its IPv6 addresses are routed by the host into the lab namespace; nothing is sent to any
address off this machine). Each sandbox has a /127 of sbxd's IPv6 subnet, masqueraded on
the way out as IPv4 is."""
import ipaddress
import json

import pytest

import netlab

PROBE6 = r"""
import json, socket, sys, urllib.request
out = {}
for a in sys.argv[1:]:
    kind, _, arg = a.partition(":")
    try:
        if kind == "dns6":
            out[a] = socket.getaddrinfo(arg, 80, socket.AF_INET6)[0][4][0]
        elif kind == "http":
            out[a] = urllib.request.urlopen("http://" + arg, timeout=3).read().decode().strip()
    except Exception as e:
        out[a] = "ERR " + type(e).__name__ + ": " + str(e)
print(json.dumps(out))
"""

RECORDS = {
    "web.lab.test": [netlab.WEB],
    "v6only.test": {"aaaa": [netlab.WEB6]},
    "dual.test": {"a": [netlab.WEB], "aaaa": [netlab.WEB6]},
    "rebind6.test": {"aaaa": [netlab.PRIVATE_WEB6]},
}


def probe(sb, *targets):
    r = sb.exec(["python3", "-c", PROBE6, *targets], timeout_seconds=60)
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)


def ok(result):
    return not result.startswith("ERR")


def url(addr, path):
    return f"http:[{addr}]/{path}"


@pytest.fixture()
def lab(net_lab):
    net_lab.set_records(RECORDS)
    return net_lab


@pytest.fixture()
def c(net_daemon):
    return net_daemon.client()


def test_ipv6_outbound_is_masqueraded_like_ipv4(c, lab, net_daemon):
    with c.create(image="default") as sb:
        addr6 = ipaddress.IPv6Address(sb.network["address6"])
        # A unique local address of sbxd's own (made from its IPv4 subnet), odd: the even
        # one below it is the host's end.
        assert addr6 in ipaddress.IPv6Network("fc00::/7") and int(addr6) % 2 == 1
        got = probe(sb, url(netlab.WEB6, "v6-plain"), "dns6:v6only.test", "http:v6only.test/v6-by-name")
        assert got[url(netlab.WEB6, "v6-plain")] == f"hello from {netlab.WEB6}"
        assert got["dns6:v6only.test"] == netlab.WEB6
        assert ok(got["http:v6only.test/v6-by-name"]), got
        # The lab saw the host's address on its link, not the sandbox's.
        seen = [l.split() for l in lab.http_log().splitlines() if "/v6-plain" in l]
        assert seen and all(s[1] == lab.host_addr6 for s in seen), seen
        # The sandbox's own view: eth0 holds the address, the default route goes to the host.
        r = sb.exec("cat /proc/net/if_inet6; cat /proc/net/ipv6_route")
        assert addr6.exploded.replace(":", "") in r.stdout
        # It hears no router advertisements (gVisor's kernel has no such setting: it takes none).
        ra = sb.exec("f=/proc/sys/net/ipv6/conf/eth0/accept_ra; if test -e $f; then cat $f; else echo none; fi")
        assert ra.stdout.strip() == ("none" if sb.data["isolation"] == "gvisor" else "0")


def test_ipv6_allow_and_deny_by_cidr_and_live_changes(c, lab):
    with c.create(image="default", network={"allow": [f"{netlab.WEB6}/128"]}) as sb:
        got = probe(sb, url(netlab.WEB6, "allow6"), url(netlab.WEB6_B, "not-allowed6"), f"http:{netlab.WEB}/v4-not")
        assert ok(got[url(netlab.WEB6, "allow6")]), got
        assert not ok(got[url(netlab.WEB6_B, "not-allowed6")]) and not ok(got[f"http:{netlab.WEB}/v4-not"]), got
        assert "/not-allowed6" not in lab.http_log() and "/v4-not" not in lab.http_log()
        # Live: deny one of the two, allow everything else.
        sb.set_network(deny=[netlab.WEB6_B])
        got = probe(sb, url(netlab.WEB6, "live6"), url(netlab.WEB6_B, "denied6"), f"http:{netlab.WEB}/v4-now")
        assert ok(got[url(netlab.WEB6, "live6")]) and ok(got[f"http:{netlab.WEB}/v4-now"]), got
        assert not ok(got[url(netlab.WEB6_B, "denied6")]), got
        assert "/denied6" not in lab.http_log()
        # A whole range denied by an IPv6 CIDR.
        sb.set_network(deny=["2001:db8:100::/48"])
        got = probe(sb, url(netlab.WEB6, "range6"), f"http:{netlab.WEB}/v4-still")
        assert not ok(got[url(netlab.WEB6, "range6")]) and ok(got[f"http:{netlab.WEB}/v4-still"]), got
        # None: nothing, in either family.
        sb.set_network("none")
        assert sb.network["address6"] is None
        assert not ok(probe(sb, url(netlab.WEB6, "none6"))[url(netlab.WEB6, "none6")])
        assert "/range6" not in lab.http_log() and "/none6" not in lab.http_log()


def test_ipv6_allow_by_name_learns_aaaa_answers_and_refuses_rebinding(c, lab):
    with c.create(image="default", network={"allow": ["v6only.test", "rebind6.test", "*.lab.test"]}) as sb:
        got = probe(sb, "http:v6only.test/learned6", url(netlab.WEB6_B, "unlearned6"), "dns6:rebind6.test")
        assert ok(got["http:v6only.test/learned6"]), got
        # An address no permitted name resolved to stays shut.
        assert not ok(got[url(netlab.WEB6_B, "unlearned6")]), got
        # A permitted name pointing at a private IPv6 address gets no answer.
        assert not ok(got["dns6:rebind6.test"]), got
        assert not ok(probe(sb, url(netlab.PRIVATE_WEB6, "rebound6"))[url(netlab.PRIVATE_WEB6, "rebound6")])
        log = lab.http_log()
        assert "/learned6" in log and "/unlearned6" not in log and "/rebound6" not in log


def test_ipv6_for_serverless_calls_and_forks(c, lab):
    with c.create(image="default", network={"deny": [netlab.WEB6_B]}) as sb:
        fork = sb.fork()
        try:
            assert fork.network["address6"] not in (None, sb.network["address6"])
            got = probe(fork, url(netlab.WEB6, "fork6"), url(netlab.WEB6_B, "fork-denied6"))
            assert ok(got[url(netlab.WEB6, "fork6")]) and not ok(got[url(netlab.WEB6_B, "fork-denied6")]), got
        finally:
            fork.delete()
    disk = c.disks.create(name="v6disk", size_mb=64)
    try:
        r = disk.exec(["python3", "-c", PROBE6, url(netlab.WEB6, "serverless6")], image="default",
                      network={"allow": [netlab.WEB6]})
        assert r.exit_code == 0 and ok(json.loads(r.stdout)[url(netlab.WEB6, "serverless6")]), r.stdout + r.stderr
    finally:
        disk.delete()
    assert "/serverless6" in lab.http_log() and "/fork-denied6" not in lab.http_log()
