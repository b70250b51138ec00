"""DNS over TCP from a sandbox: redirected to sbxd's resolver whatever server it names,
judged by the same rules as over UDP, and asked upstream over TCP (so an answer too big
for UDP arrives whole). Against the lab network of tests/netlab.py only."""
import json
import socket

import pytest

import netlab

# Sends each query (name, type) over one TCP connection to HOST:53 and prints, per query,
# the response code and the addresses answered.
TCP_DNS = r"""
import json, socket, struct, sys
host, names = sys.argv[1], sys.argv[2:]
s = socket.create_connection((host, 53), timeout=5)
f = s.makefile("rb")
out = []
for i, name in enumerate(names):
    q = struct.pack(">HHHHHH", 0x4000 + i, 0x0100, 1, 0, 0, 0)
    q += b"".join(bytes([len(l)]) + l.encode() for l in name.split(".")) + b"\0" + struct.pack(">HH", 1, 1)
    s.sendall(struct.pack(">H", len(q)) + q)
for i, name in enumerate(names):
    n = struct.unpack(">H", f.read(2))[0]
    m = f.read(n)
    qid, flags, qd, an = struct.unpack(">HHHH", m[:8])
    at = 12
    while m[at]:
        at += 1 + m[at]
    at += 5
    addrs = []
    for _ in range(an):
        at += 2  # a pointer to the question's name
        typ, cls, ttl, rdlen = struct.unpack(">HHIH", m[at:at + 10])
        at += 10
        if typ == 1:
            addrs.append(socket.inet_ntoa(m[at:at + rdlen]))
        at += rdlen
    out.append({"id_ok": qid == 0x4000 + i, "rcode": flags & 0xf, "addrs": addrs, "size": n})
print(json.dumps(out))
"""

BIG = [f"198.51.100.{i}" for i in range(100, 200)] + [netlab.WEB]


@pytest.fixture()
def lab(net_lab):
    net_lab.set_records({"big.test": BIG, "web.lab.test": [netlab.WEB], "other.test": [netlab.WEB]})
    return net_lab


@pytest.fixture()
def c(net_daemon):
    return net_daemon.client()


def tcp_dns(sb, server, *names):
    r = sb.exec(["python3", "-c", TCP_DNS, server, *names], timeout_seconds=60)
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)


def test_dns_over_tcp_answers_whole_and_by_the_rules(c, lab, net_daemon):
    with c.create(image="default", network={"allow": ["big.test", "web.lab.test"]}) as sb:
        resolver = sb.exec("awk '/^nameserver/ {print $2; exit}' /etc/resolv.conf").stdout.strip()
        # One connection, three queries (RFC 7766): a big answer (101 addresses, about
        # 1.7 KB, more than classic UDP's 512 bytes), a permitted name, a refused one.
        big, web, other = tcp_dns(sb, resolver, "big.test", "web.lab.test", "other.test")
        assert big["id_ok"] and big["rcode"] == 0 and sorted(big["addrs"]) == sorted(BIG) and big["size"] > 512
        assert web["rcode"] == 0 and web["addrs"] == [netlab.WEB]
        assert other["rcode"] == 5 and other["addrs"] == []  # REFUSED, not asked upstream
        log = lab.dns_log()
        # sbxd asked the lab over TCP, from the host; the refused name never left.
        assert any(l.endswith(" big.test tcp") for l in log.splitlines()), log
        assert "other.test" not in log
        # Addresses learned over TCP open the allow list as over UDP.
        r = sb.exec(["python3", "-c", f"import urllib.request as u; print(u.urlopen('http://{netlab.WEB}/after-tcp-dns', timeout=3).read().decode())"])
        assert r.exit_code == 0 and "hello" in r.stdout, r.stderr
        # Any server's port 53 is sbxd's resolver: the lab's own DNS address, one in the
        # lab's range where nothing listens; the query is judged the same.
        for server in (netlab.DNS, "198.51.100.99"):
            (a,) = tcp_dns(sb, server, "other.test")
            assert a["rcode"] == 5, (server, a)


def test_the_resolvers_tcp_port_is_the_sandboxes_only(net_daemon):
    """Its TCP port (a port of its own) takes no connection from the host."""
    with open(f"{net_daemon.data}/network/resolver-tcp-port") as f:
        port = int(f.read())
    # Something listens there (sbxd), and the firewall drops the host's connection: it
    # times out rather than being refused.
    with pytest.raises(socket.timeout):
        socket.create_connection(("127.0.0.1", port), timeout=2)
