"""A server in a sandbox never sees a credential that sbxd itself reads: the port proxy
passes on none of the API key's fields, a sandbox token, E2B's access token or the
sandbox it names, so that the sandbox cannot replay them against sbxd."""
import time

ECHO = r'''
import json, sys
from http.server import BaseHTTPRequestHandler, HTTPServer
class H(BaseHTTPRequestHandler):
    def do_GET(self):
        b = json.dumps({k.lower(): v for k, v in self.headers.items()}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)
    def log_message(self, *a):
        pass
HTTPServer(("127.0.0.1", 8000), H).serve_forever()
'''


def test_the_port_proxy_passes_on_no_sbx_credential(daemon):
    c = daemon.client()
    sb = c.create(image="default", user="root")
    try:
        sb.files.write("/srv/echo.py", ECHO)
        sb.exec("nohup python3 /srv/echo.py >/srv/log 2>&1 &")
        for _ in range(100):
            if sb.exec("python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", 8000))' 2>/dev/null "
                       "&& echo up").stdout == "up\n":
                break
            time.sleep(0.05)
        status, e2b = daemon.raw("GET", f"/sandboxes/{sb.id}", headers={"X-API-KEY": daemon.key}, auth=False)
        assert status == 200, e2b
        sent = {"X-API-Key": daemon.key, "X-Access-Token": e2b["envdAccessToken"], "E2b-Sandbox-Id": sb.id,
                "X-Kept": "yes"}
        status, seen = daemon.raw("GET", f"/v1/sandboxes/{sb.id}/ports/8000/", headers=sent)
        assert status == 200, seen
        assert seen.get("x-kept") == "yes", seen  # the proxy does pass headers on
        for name in ("authorization", "x-api-key", "x-access-token", "e2b-sandbox-id"):
            assert name not in seen, (name, seen)
        for value in seen.values():
            assert daemon.key not in value and e2b["envdAccessToken"] not in value, seen
        # By host too.
        status, seen = daemon.raw("GET", "/", headers=dict(sent, Host=f"8000-{sb.id}.sbx.localhost:{daemon.port}"))
        assert status == 200 and seen.get("x-kept") == "yes", seen
        assert not {"authorization", "x-api-key", "x-access-token", "e2b-sandbox-id"} & set(seen), seen
    finally:
        sb.delete()
