"""A test network on this machine only: an "internet" network namespace that the host
reaches through its own routing table (routes the lab adds for documentation and test
addresses only), with a logging HTTP server and a DNS server inside it.

    lab = Lab(); lab.start(); ...; lab.stop()

Addresses inside the lab namespace (all on its loopback):
    198.51.100.10  HTTP (port 80), the "public" web server
    198.51.100.53  DNS (port 53, UDP and TCP): answers from a JSON file the test writes (lab.set_records)
    198.51.100.10  port 9000: a sink (reads to EOF, answers the byte count); port 9001: a
                   source (reads a byte count on a line, sends that many bytes); UDP 9002
                   (also on 2001:db8:100::10): "pong" to each datagram
    10.99.0.10     HTTP on a private address (reached only when a rule allows it)
    169.254.169.254 HTTP, standing in for cloud metadata (routed into the lab, never off the machine)
    2001:db8:100::10, 2001:db8:100::11  HTTP over IPv6, the "public" web server's addresses
    fd99::10       HTTP on a private (unique local) IPv6 address
    fd00:ec2::254  HTTP, standing in for IPv6 cloud metadata
The host's end of the link is 203.0.113.(4k+1) and 2001:db8:ff:k::1; the lab's is
203.0.113.(4k+2) and 2001:db8:ff:k::2.

Run as a script inside the namespace it serves: `netlab.py serve DIR` (HTTP on every
address above, DNS, each request logged to DIR/http.log and DIR/dns.log).
"""
import json
import os
import signal
import socket
import socketserver
import struct
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

WEB = "198.51.100.10"
DNS = "198.51.100.53"
PRIVATE_WEB = "10.99.0.10"
METADATA = "169.254.169.254"
WEB6 = "2001:db8:100::10"
WEB6_B = "2001:db8:100::11"
PRIVATE_WEB6 = "fd99::10"
METADATA6 = "fd00:ec2::254"
SERVED = (WEB, PRIVATE_WEB, METADATA, WEB6, WEB6_B, PRIVATE_WEB6, METADATA6)


def sh(*args, check=True):
    return subprocess.run(args, check=check, capture_output=True, text=True)


class Lab:
    def __init__(self):
        n = os.getpid() % 60
        self.ns = f"sbxlab{n}"
        self.host_if, self.lab_if = f"sbxlh{n}", f"sbxli{n}"
        self.host_addr, self.lab_addr = f"203.0.113.{4 * n + 1}", f"203.0.113.{4 * n + 2}"
        self.dir = tempfile.mkdtemp(prefix="sbxlab-")
        self.host_addr6, self.lab_addr6 = f"2001:db8:ff:{n:x}::1", f"2001:db8:ff:{n:x}::2"
        self.routes = [f"198.51.100.0/24", f"{METADATA}/32", "10.99.0.0/24"]
        self.routes6 = ["2001:db8:100::/48", "fd99::/64", f"{METADATA6}/128"]
        self.proc = None

    def start(self):
        self.stop_namespace()
        sh("ip", "netns", "add", self.ns)
        sh("ip", "link", "add", self.host_if, "type", "veth", "peer", "name", self.lab_if, "netns", self.ns)
        sh("ip", "addr", "add", f"{self.host_addr}/30", "dev", self.host_if)
        sh("ip", "addr", "add", f"{self.host_addr6}/64", "dev", self.host_if, "nodad")
        sh("ip", "link", "set", self.host_if, "up")
        ip = ["ip", "-n", self.ns]
        sh(*ip, "addr", "add", f"{self.lab_addr}/30", "dev", self.lab_if)
        sh(*ip, "addr", "add", f"{self.lab_addr6}/64", "dev", self.lab_if, "nodad")
        sh(*ip, "link", "set", self.lab_if, "up")
        sh(*ip, "link", "set", "lo", "up")
        for a in (*SERVED, DNS):
            sh(*ip, "addr", "add", f"{a}/128" if ":" in a else f"{a}/32", "dev", "lo", *(["nodad"] * (":" in a)))
        # No default route: the lab answers only the host's end of its link (where
        # sandboxes' traffic comes from, masqueraded), and sends nothing anywhere else.
        for r in self.routes:
            sh("ip", "route", "replace", r, "via", self.lab_addr)
        for r in self.routes6:
            sh("ip", "-6", "route", "replace", r, "via", self.lab_addr6)
        self.set_records({})
        self.proc = subprocess.Popen(["ip", "netns", "exec", self.ns, sys.executable, os.path.abspath(__file__),
                                      "serve", self.dir], stdout=subprocess.DEVNULL, stderr=open(
                                          os.path.join(self.dir, "serve.err"), "w"))
        deadline = time.time() + 30
        while time.time() < deadline:
            if os.path.exists(os.path.join(self.dir, "ready")):
                return self
            if self.proc.poll() is not None:
                raise RuntimeError("lab servers exited: " + open(os.path.join(self.dir, "serve.err")).read())
            time.sleep(0.05)
        raise RuntimeError("lab servers did not start")

    def set_records(self, records):
        """records: name -> list of IPv4 addresses (TTL 300), or {"a": [...], "aaaa": [...], "ttl": N}."""
        tmp = os.path.join(self.dir, "records.json.tmp")
        with open(tmp, "w") as f:
            json.dump(records, f)
        os.replace(tmp, os.path.join(self.dir, "records.json"))

    def publish(self, rel, data: bytes):
        """Serves `data` at http://198.51.100.10/<rel> (and on the lab's other addresses)."""
        path = os.path.join(self.dir, "www", rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)

    def http_log(self):
        return self._read("http.log")

    def dns_log(self):
        return self._read("dns.log")

    def _read(self, name):
        try:
            with open(os.path.join(self.dir, name)) as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def stop_namespace(self):
        for r in self.routes:
            sh("ip", "route", "del", r, check=False)
        for r in self.routes6:
            sh("ip", "-6", "route", "del", r, check=False)
        sh("ip", "link", "del", self.host_if, check=False)
        sh("ip", "netns", "del", self.ns, check=False)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.stop_namespace()


# --- the servers, run inside the lab namespace -------------------------------------------


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # a sandbox's burst of connections waits in the backlog, not in SYN retries

    def server_bind(self):
        # Not HTTPServer's: it looks its own name up in DNS.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]


class Server6(Server):
    address_family = socket.AF_INET6


class Handler(BaseHTTPRequestHandler):
    root = "."

    def do_GET(self):
        local = self.connection.getsockname()[0]
        with open(os.path.join(self.root, "http.log"), "a") as f:
            f.write(f"{local} {self.client_address[0]} {self.path}\n")
        rel = self.path.split("?")[0].lstrip("/")
        path = os.path.normpath(os.path.join(self.root, "www", rel))
        if os.path.isdir(path) and os.path.isfile(os.path.join(path, "index.html")):
            path = os.path.join(path, "index.html")  # a package index's project page
        content_type = "text/html" if path.endswith(".html") else "application/octet-stream"
        if rel and os.path.isfile(path) and path.startswith(os.path.join(self.root, "www")):
            body = open(path, "rb").read()
        elif rel.startswith("bytes/"):
            body = b"x" * int(rel.split("/")[1])
        else:
            body = f"hello from {local}\n".encode()
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def dns_answer(query, records):
    """A DNS answer to `query` from `records` (A and AAAA records; NXDOMAIN otherwise)."""
    qid, flags, qd = struct.unpack(">HHH", query[:6])
    at, labels = 12, []
    while query[at]:
        n = query[at]
        labels.append(query[at + 1:at + 1 + n].decode())
        at += 1 + n
    qtype = struct.unpack(">H", query[at + 1:at + 3])[0]
    question = query[12:at + 5]
    name = ".".join(labels).lower()
    entry = records.get(name)
    if isinstance(entry, list):
        entry = {"a": entry}
    answers = b""
    count = 0
    rcode = 3 if entry is None else 0
    if entry is not None and qtype == 1:
        for a in entry.get("a", []):
            answers += b"\xc0\x0c" + struct.pack(">HHIH", 1, 1, entry.get("ttl", 300), 4) + socket.inet_aton(a)
            count += 1
    if entry is not None and qtype == 28:
        for a in entry.get("aaaa", []):
            answers += (b"\xc0\x0c" + struct.pack(">HHIH", 28, 1, entry.get("ttl", 300), 16) +
                        socket.inet_pton(socket.AF_INET6, a))
            count += 1
    header = struct.pack(">HHHHHH", qid, 0x8180 | rcode, 1, count, 0, 0)
    return name, header + question + answers


def accept_loop(ls, fn):
    while True:
        c, _ = ls.accept()
        threading.Thread(target=fn, args=(c,), daemon=True).start()


def sink(c):
    total, buf = 0, bytearray(1 << 20)
    while True:
        n = c.recv_into(buf)
        if not n:
            break
        total += n
    c.sendall(str(total).encode())
    c.close()


def pong_loop(u):
    while True:
        _, peer = u.recvfrom(2048)
        u.sendto(b"pong", peer)


def source(c):
    want = int(c.makefile().readline())
    chunk = b"x" * (1 << 20)
    while want > 0:
        want -= c.send(chunk[:min(want, len(chunk))])
    c.close()


def serve(root):
    Handler.root = root
    os.makedirs(os.path.join(root, "www"), exist_ok=True)
    servers = []
    for a in SERVED:
        s = (Server6 if ":" in a else Server)((a, 80), Handler)
        servers.append(s)
        threading.Thread(target=s.serve_forever, daemon=True).start()
    dns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    dns.bind((DNS, 53))

    def dns_loop():
        while True:
            query, peer = dns.recvfrom(4096)
            try:
                with open(os.path.join(root, "records.json")) as f:
                    records = json.load(f)
                name, answer = dns_answer(query, records)
                with open(os.path.join(root, "dns.log"), "a") as f:
                    f.write(f"{peer[0]} {name}\n")
                dns.sendto(answer, peer)
            except Exception as e:  # a malformed query: no answer
                print("dns:", e, file=sys.stderr)

    threading.Thread(target=dns_loop, daemon=True).start()

    def dns_tcp(c):
        """DNS over TCP: length-prefixed queries, each answered; logged with "tcp"."""
        peer = c.getpeername()[0]
        f = c.makefile("rb")
        while True:
            head = f.read(2)
            if len(head) < 2:
                break
            query = f.read(struct.unpack(">H", head)[0])
            with open(os.path.join(root, "records.json")) as r:
                records = json.load(r)
            name, answer = dns_answer(query, records)
            with open(os.path.join(root, "dns.log"), "a") as log:
                log.write(f"{peer} {name} tcp\n")
            c.sendall(struct.pack(">H", len(answer)) + answer)
        c.close()

    dns_listener = socket.socket()
    dns_listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    dns_listener.bind((DNS, 53))
    dns_listener.listen(16)
    threading.Thread(target=accept_loop, args=(dns_listener, dns_tcp), daemon=True).start()
    # UDP port 9002 on the web addresses (both families): each datagram gets "pong" back.
    for a in (WEB, WEB6):
        u = socket.socket(socket.AF_INET6 if ":" in a else socket.AF_INET, socket.SOCK_DGRAM)
        u.bind((a, 9002))
        threading.Thread(target=pong_loop, args=(u,), daemon=True).start()
    for port, fn in ((9000, sink), (9001, source)):
        ls = socket.socket()
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind((WEB, port))
        ls.listen(64)
        threading.Thread(target=accept_loop, args=(ls, fn), daemon=True).start()
    open(os.path.join(root, "ready"), "w").close()
    signal.sigwait({signal.SIGTERM, signal.SIGINT})


if __name__ == "__main__" and sys.argv[1] == "serve":
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    serve(sys.argv[2])
