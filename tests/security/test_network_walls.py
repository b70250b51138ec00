"""The walls every sandbox with a network has, whatever its rules: the host (its
addresses, its loopback services, sbxd's API), cloud metadata, other sandboxes and
private ranges stay out of reach, over IPv4 and IPv6; no raw sockets, no other source address.
Against the lab network of tests/netlab.py only (nothing leaves this machine)."""
import ipaddress
import json
import socket
import threading
import time

import pytest

import netlab

PROBE = r"""
import json, socket, sys
out = {}
for a in sys.argv[1:]:
    host, port = a.rsplit(":", 1)
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=3).close()
        out[a] = "connected"
    except Exception as e:
        out[a] = "ERR " + type(e).__name__
print(json.dumps(out))
"""


class Listener:
    """A TCP listener on the host standing in for the host's services: counts what reaches it."""

    def __init__(self, addr):
        self.sock = socket.socket(socket.AF_INET6 if ":" in addr else socket.AF_INET)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((addr, 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            c.close()

    def close(self):
        self.sock.close()


@pytest.fixture()
def c(net_daemon, net_lab):
    return net_daemon.client()


def connects(sb, *targets):
    r = sb.exec(["python3", "-c", PROBE, *targets], timeout_seconds=60)
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)


def test_host_services_metadata_and_private_ranges_are_closed(c, net_daemon, net_lab):
    any_host = Listener("0.0.0.0")
    loop = Listener("127.0.0.1")
    seen = len(net_lab.http_log())  # the log is the session's: only what follows is this test's
    try:
        # Whatever the rules allow, even everything: the host and metadata stay closed.
        with c.create(image="default", network={"allow": ["0.0.0.0/0", "169.254.0.0/16", "127.0.0.0/8"]}) as sb:
            gateway = sb.network["address"].rsplit(".", 1)[0] + "." + str(int(sb.network["address"].rsplit(".", 1)[1]) - 1)
            got = connects(sb, f"{net_lab.host_addr}:{any_host.port}", f"{gateway}:{any_host.port}",
                           f"{gateway}:{net_daemon.port}", f"{net_lab.host_addr}:{net_daemon.port}",
                           f"{netlab.METADATA}:80", f"127.0.0.1:{loop.port}", f"{netlab.WEB}:80")
            assert got.pop(f"{netlab.WEB}:80") == "connected"  # the rules are not the wall
            assert all(v.startswith("ERR") for v in got.values()), got
        with c.create(image="default") as sb:
            got = connects(sb, f"{netlab.PRIVATE_WEB}:80", f"{netlab.METADATA}:80", f"{net_lab.host_addr}:{any_host.port}")
            assert all(v.startswith("ERR") for v in got.values()), got
        assert any_host.accepted == 0 and loop.accepted == 0
        log = net_lab.http_log()[seen:]
        assert netlab.METADATA + " " not in log and netlab.PRIVATE_WEB + " " not in log
    finally:
        any_host.close()
        loop.close()


def test_the_resolver_port_is_closed_to_the_host_over_udp_only(net_daemon):
    """The resolver's UDP port answers sandboxes only; the same number over TCP is not
    sbxd's, and a host program listening there (another daemon's API, say) is reached."""
    with open(f"{net_daemon.data}/network/resolver-port") as f:
        port = int(f.read())
    query = bytes.fromhex("abcd01000001000000000000") + b"\x07example\x03com\x00" + bytes.fromhex("00010001")
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.settimeout(1)
    try:
        u.sendto(query, ("127.0.0.1", port))
        with pytest.raises(socket.timeout):
            u.recvfrom(512)
    finally:
        u.close()
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", port))
    srv.listen(1)
    srv.settimeout(5)
    try:
        cl = socket.create_connection(("127.0.0.1", port), timeout=5)
        conn, _ = srv.accept()
        cl.sendall(b"ping")
        assert conn.recv(4) == b"ping"
        conn.close()
        cl.close()
    finally:
        srv.close()


def test_sandboxes_cannot_reach_each_other(c):
    with c.create(image="default") as a, c.create(image="default", network={"allow": ["0.0.0.0/0"]}) as b:
        a.exec("nohup python3 -m http.server 8000 >/dev/null 2>&1 &")
        a.exec("for i in $(seq 50); do python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", 8000), 1)' && break; sleep 0.1; done")
        got = connects(b, f"{a.network['address']}:8000")
        assert got[f"{a.network['address']}:8000"].startswith("ERR")
        # Nor take another's address (no CAP_NET_ADMIN): the kernel's answer to RTM_NEWADDR.
        code = f"""
import socket, struct
s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)
addr = socket.inet_aton("{a.network['address']}")
body = struct.pack("BBBBI", socket.AF_INET, 32, 0, 0, socket.if_nametoindex("eth0"))
body += struct.pack("HH", 8, 2) + addr + struct.pack("HH", 8, 1) + addr
s.send(struct.pack("IHHII", 16 + len(body), 20, 0x1 | 0x4 | 0x200 | 0x400, 1, 0) + body)
print(struct.unpack("i", s.recv(4096)[16:20])[0])
"""
        assert b.exec(["python3", "-c", code]).stdout.strip() in ("-1", "-13")  # EPERM (gVisor: EACCES)


def test_no_raw_sockets_no_spoofing(c):
    code = r"""
import socket, sys
for fam, kind, proto in ((socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW),
                         (socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_RAW),
                         (socket.AF_PACKET, socket.SOCK_RAW, 0)):
    try:
        socket.socket(fam, kind, proto)
        print("opened")
    except (PermissionError, OSError) as e:  # EPERM without CAP_NET_RAW; the filter may say EAFNOSUPPORT
        print("refused" if e.errno in (1, 13, 97) else "errno%d" % e.errno)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    s.setsockopt(socket.SOL_IP, 19, 1)  # IP_TRANSPARENT: send from any address
    s.bind(("198.51.100.7", 0))  # not the sandbox's (gVisor takes the option, then refuses this)
    print("transparent")
except OSError:
    print("refused")
"""
    with c.create(image="default") as sb:
        r = sb.exec(["python3", "-c", code])
        out = r.stdout.split() + [r.stderr[-300:]] * bool(r.exit_code)
        assert out == ["refused"] * 4, out


# Sandbox B: a UDP "connection" to the lab's pong port; prints every datagram that
# reaches its socket in the next seconds.
LISTEN = r"""
import socket, sys, time
fam = socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET
s = socket.socket(fam, socket.SOCK_DGRAM)
s.connect((sys.argv[1], 9002))
s.send(b"ping")
s.settimeout(0.5)
end = time.time() + float(sys.argv[2])
while time.time() < end:
    try:
        print(s.recv(2048).decode(errors="replace"), flush=True)
    except socket.timeout:
        pass
"""

# Sandbox A: datagrams from the lab server's address and port (IP_FREEBIND and
# IPV6_FREEBIND bind any address without a privilege) to the host's masquerading address
# and B's mapped port: the reply direction of B's connection.
INJECT = r"""
import socket, sys
fam = socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET
s = socket.socket(fam, socket.SOCK_DGRAM)
try:
    s.setsockopt(socket.IPPROTO_IPV6 if fam == socket.AF_INET6 else socket.IPPROTO_IP, 78 if fam == socket.AF_INET6 else 15, 1)
    s.bind((sys.argv[1], 9002))
    for _ in range(5):
        s.sendto(b"INJECTED", (sys.argv[2], int(sys.argv[3])))
    print("sent")
except OSError as e:  # IPv4 sends from no address but its own without IP_TRANSPARENT; gVisor binds none
    print("refused", e.errno)
"""


def mapped_port(sandbox_addr, server):
    """The host's port for the sandbox's UDP flow to server:9002, from conntrack (which
    writes IPv6 addresses in full)."""
    want = (ipaddress.ip_address(sandbox_addr), ipaddress.ip_address(server))
    for line in open("/proc/net/nf_conntrack"):
        f = line.split()
        if "udp" not in f:
            continue
        kv = [w.split("=", 1) for w in f if "=" in w]
        src = [v for k, v in kv if k == "src"]
        dst = [v for k, v in kv if k == "dst"]
        dport = [v for k, v in kv if k == "dport"]
        if len(src) < 2 or len(dport) < 2 or dport[0] != "9002":
            continue
        if (ipaddress.ip_address(src[0]), ipaddress.ip_address(dst[0])) == want:
            return int(dport[1])  # the reply direction's destination port
    return None


@pytest.mark.parametrize("family", ["ipv4", "ipv6"])
def test_a_sandbox_cannot_inject_into_another_sandboxs_connection(c, net_lab, family):
    server = netlab.WEB if family == "ipv4" else netlab.WEB6
    masq = net_lab.host_addr if family == "ipv4" else net_lab.host_addr6
    with c.create(image="default") as a, c.create(image="default") as b:
        key = "address" if family == "ipv4" else "address6"
        b.exec(["sh", "-c", "nohup python3 -c \"$0\" \"$1\" 8 > /tmp/got 2>&1 &", LISTEN, server])
        port = None
        for _ in range(50):
            port = mapped_port(b.network[key], server)
            if port:
                break
            time.sleep(0.1)
        assert port, "B's flow is not in conntrack"
        r = a.exec(["python3", "-c", INJECT, server, masq, str(port)])
        # (Whether the packets even leave A depends on its kernel: here IPv4 refuses the
        # send and IPv6 sends nothing either; the firewall drops them if they come.)
        assert r.exit_code == 0 and r.stdout.startswith(("sent", "refused")), r.stdout + r.stderr
        time.sleep(1)
        got = b.exec("cat /tmp/got").stdout
        assert "pong" in got, got  # B's flow works: the lab answered it
        assert "INJECTED" not in got, got


def test_ipv6_host_metadata_private_ranges_and_other_sandboxes_are_closed(c, net_daemon, net_lab):
    any_host = Listener("::")
    loop = Listener("::1")
    try:
        # Whatever the rules allow, even every IPv6 address: the host and metadata stay closed.
        with c.create(image="default", network={"allow": ["::/0", "fd00:ec2::/32", "fe80::/10"]}) as sb, \
                c.create(image="default") as other:
            addr6 = sb.network["address6"]
            gateway6 = str(ipaddress.IPv6Address(addr6) - 1)  # the host's end: the even address below
            other.exec("nohup python3 -m http.server 8000 --bind :: >/dev/null 2>&1 &")
            other.exec("for i in $(seq 50); do python3 -c 'import socket; socket.create_connection((\"::1\", 8000), 1)' "
                       "&& break; sleep 0.1; done")
            targets = [f"[{net_lab.host_addr6}]:{any_host.port}", f"[{gateway6}]:{any_host.port}",
                       f"[{gateway6}]:{net_daemon.port}", f"[{netlab.METADATA6}]:80",
                       f"[{other.network['address6']}]:8000", f"[{netlab.PRIVATE_WEB6}]:80", f"[{netlab.WEB6}]:80"]
            got = connects(sb, *targets)
            assert got.pop(f"[{netlab.WEB6}]:80") == "connected"  # the rules are not the wall
            # A private range is reached only when an `allow` CIDR names it: ::/0 does.
            assert got.pop(f"[{netlab.PRIVATE_WEB6}]:80") == "connected"
            assert all(v.startswith("ERR") for v in got.values()), got
        with c.create(image="default") as sb:
            got = connects(sb, f"[{netlab.PRIVATE_WEB6}]:80", f"[{netlab.METADATA6}]:80")
            assert all(v.startswith("ERR") for v in got.values()), got
        assert any_host.accepted == 0 and loop.accepted == 0
    finally:
        any_host.close()
        loop.close()


def test_the_host_cannot_reach_into_a_sandbox(c):
    with c.create(image="default") as sb:
        addr = sb.network["address"]
        # A UDP listener in the sandbox: what reaches it within 3 s is printed.
        sb.exec("nohup python3 -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); "
                "s.bind((\"0.0.0.0\", 9999)); s.settimeout(3); print(s.recvfrom(100))' > /tmp/udp.out 2>&1 &")
        sb.exec("nohup python3 -m http.server 8000 >/dev/null 2>&1 &")
        time.sleep(0.5)
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        for _ in range(5):
            try:
                u.sendto(b"from the host", (addr, 9999))
            except PermissionError:  # the host's own packets are refused at its output
                pass
        with pytest.raises(OSError):
            socket.create_connection((addr, 8000), timeout=2)
        time.sleep(3)
        assert "from the host" not in sb.exec("cat /tmp/udp.out").stdout
