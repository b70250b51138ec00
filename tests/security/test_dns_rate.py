"""One sandbox cannot drive sbxd's resolver (and the upstream name servers) as fast as it
sends: past --net-dns-rate queries a second (100 by default, bursts of twice that) its
queries are refused at once and counted in /metrics, while another sandbox resolves as
before and the first one's bucket refills. Against the lab network of tests/netlab.py."""
import json
import time

import netlab

# Sends N queries for NAME over UDP to the sandbox's name server as fast as it can, then
# reads answers for a while; prints how many came back with each response code.
FLOOD = r"""
import json, socket, struct, sys, time
name, n = sys.argv[1], int(sys.argv[2])
server = [l.split()[1] for l in open("/etc/resolv.conf") if l.startswith("nameserver")][0]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
q = lambda i: struct.pack(">HHHHHH", i & 0xffff, 0x0100, 1, 0, 0, 0) + b"".join(
    bytes([len(l)]) + l.encode() for l in name.split(".")) + b"\0" + struct.pack(">HH", 1, 1)
codes = {}
def read():  # beside the sender, so that no answer is dropped for want of room
    s.settimeout(1.5)
    try:
        while True:
            m = s.recv(4096)
            rc = struct.unpack(">H", m[2:4])[0] & 0xf
            codes[rc] = codes.get(rc, 0) + 1
    except socket.timeout:
        pass
import threading
reader = threading.Thread(target=read)
reader.start()
start = time.time()
for i in range(n):
    s.sendto(q(i), (server, 53))
    if i % 50 == 49:
        time.sleep(0.002)
sent_in = time.time() - start
reader.join()
print(json.dumps({"codes": codes, "seconds": sent_in + 1.5, "sent_in": sent_in}))
"""


def _flood(sb, n):
    r = sb.exec(["python3", "-c", FLOOD, "web.lab.test", str(n)], timeout_seconds=60)
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    return {int(k): v for k, v in out["codes"].items()}, out["seconds"]


def test_one_sandbox_cannot_flood_the_resolver(net_lab, net_daemon):
    net_lab.set_records({"web.lab.test": [netlab.WEB]})
    c = net_daemon.client()
    a = c.create(image="default")
    b = c.create(image="default")
    try:
        before = net_daemon.metric("sbx_dns_rate_limited_total")
        codes, seconds = _flood(a, 1500)
        answered, refused = codes.get(0, 0), codes.get(5, 0)
        print("answered", answered, "refused", refused, "in", round(seconds, 2), "s")
        # At most the burst (200) and 100 a second more were asked upstream.
        assert answered <= 200 + 100 * seconds + 20, (codes, seconds)
        assert refused >= 1500 - 200 - 100 * seconds - 100, (codes, seconds)
        assert net_daemon.metric("sbx_dns_rate_limited_total") - before >= refused * 0.9
        # Another sandbox resolves meanwhile, and the first does again once it slows down.
        assert b.exec("getent hosts web.lab.test").stdout.split()[0] == netlab.WEB
        time.sleep(1.5)
        assert a.exec("getent hosts web.lab.test").stdout.split()[0] == netlab.WEB
    finally:
        a.delete()
        b.delete()
