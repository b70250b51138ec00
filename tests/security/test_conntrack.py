"""One sandbox cannot fill the host's connection tracking table: connections opened and
closed fast used to stay there in TIME_WAIT for 120 s each, beyond --net-max-conns (which
counts open ones). Now a sandbox opens at most --net-conn-rate new connections a second
(100, bursts of twice that) and its closed TCP connections leave conntrack after 2 s, so
what it holds in any state is bounded, while another sandbox and the host keep
connecting. Against the lab network of tests/netlab.py only."""
import json
import urllib.request

import netlab

# Opens and closes TCP connections to HOST:80 for SECONDS, as fast as it can.
CHURN = r"""
import json, socket, sys, time
host, seconds = sys.argv[1], float(sys.argv[2])
ok = refused = 0
end = time.time() + seconds
while time.time() < end:
    try:
        s = socket.create_connection((host, 80), timeout=2)
        s.close()
        ok += 1
    except OSError:
        refused += 1
print(json.dumps({"ok": ok, "refused": refused}))
"""


def _tracked(address):
    with open("/proc/net/nf_conntrack") as f:
        return sum(1 for line in f if f" src={address} " in line)


def test_one_sandbox_cannot_fill_conntrack(net_lab, net_daemon):
    c = net_daemon.client()
    a = c.create(image="default")
    b = c.create(image="default")
    try:
        addr = a.network["address"]
        r = a.exec(["python3", "-c", CHURN, netlab.WEB, "4"], timeout_seconds=60)
        assert r.exit_code == 0, r.stderr
        churn = json.loads(r.stdout)
        held = _tracked(addr)
        print("churn", churn, "tracked after", held)
        # Refused past the rate, and never more in the table than the open cap (16 here),
        # the burst and 2 s of the rate (with room for the moment the count was taken).
        assert churn["refused"] > 0, churn
        assert churn["ok"] <= 200 + 100 * 5, churn
        assert held <= 16 + 200 + 100 * 3, held
        # Another sandbox, and the host, connect meanwhile.
        assert b.exec(f"curl -s -o /dev/null -w '%{{http_code}}' http://{netlab.WEB}/").stdout == "200"
        with urllib.request.urlopen(f"http://{netlab.WEB}/", timeout=10) as resp:
            assert resp.status == 200
    finally:
        a.delete()
        b.delete()
