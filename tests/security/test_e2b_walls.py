"""E2B's data plane takes one credential: the named sandbox's own access token. Not
another sandbox's, not its SBX_TOKEN, not the API key; a start with a wrong one runs
nothing; a gone sandbox is 502 and its paths are no routes without E2b-Sandbox-Id."""


def test_the_data_plane_takes_only_the_sandboxs_own_token(daemon):
    h = {"X-API-KEY": daemon.key}
    made = []
    try:
        for _ in range(2):
            status, body = daemon.raw("POST", "/v2/sandboxes", body={"templateID": "busybox", "timeout": 300}, headers=h,
                                      auth=False)
            assert status == 201, body
            made.append(body)
        a, b = made

        def health(sid, token):
            return daemon.raw("GET", "/health", headers={"E2b-Sandbox-Id": sid, "X-Access-Token": token}, auth=False)

        assert health(a["sandboxID"], a["envdAccessToken"])[0] == 204
        for sid, token in ((a["sandboxID"], b["envdAccessToken"]), (a["sandboxID"], ""), (a["sandboxID"], daemon.key),
                           (a["sandboxID"], daemon.client().get(a["sandboxID"]).exec("echo -n $SBX_TOKEN").stdout)):
            status, body = health(sid, token)
            assert status == 401 and body["code"] == 401, (token, body)
        # A start with another's token runs nothing there.
        env = b"\x00" + len(b'{"process":{"cmd":"/bin/touch","args":["/tmp/ran"]}}').to_bytes(4, "big") + \
            b'{"process":{"cmd":"/bin/touch","args":["/tmp/ran"]}}'
        status, body = daemon.raw("POST", "/process.Process/Start", body=env, auth=False,
                                  headers={"E2b-Sandbox-Id": a["sandboxID"], "X-Access-Token": b["envdAccessToken"],
                                           "Content-Type": "application/connect+json"})
        assert status == 401, body
        assert daemon.client().get(a["sandboxID"]).exec("test -e /tmp/ran; echo $?").stdout == "1\n"
        # Nor do its files: no write, no read, no listing with another's token.
        other = {"E2b-Sandbox-Id": a["sandboxID"], "X-Access-Token": b["envdAccessToken"]}
        status, body = daemon.raw("POST", "/files?path=/tmp/planted", body=b"x", auth=False,
                                  headers=dict(other, **{"Content-Type": "application/octet-stream"}))
        assert status == 401, body
        assert daemon.client().get(a["sandboxID"]).exec("test -e /tmp/planted; echo $?").stdout == "1\n"
        assert daemon.raw("GET", "/files?path=/etc/passwd", headers=other, auth=False)[0] == 401
        for call, msg in (("ListDir", {"path": "/"}), ("Stat", {"path": "/etc"}), ("Remove", {"path": "/etc/passwd"})):
            status, body = daemon.raw("POST", f"/filesystem.Filesystem/{call}", body=msg, auth=False,
                                      headers=dict(other, **{"Content-Type": "application/json"}))
            assert status == 401, (call, body)
        assert daemon.client().get(a["sandboxID"]).exec("test -e /etc/passwd; echo $?").stdout == "0\n"
        # Its own token writes its files, a body larger than the 64 KiB a token's API
        # calls get, and the paths stay inside it.
        own = {"E2b-Sandbox-Id": a["sandboxID"], "X-Access-Token": a["envdAccessToken"]}
        status, body = daemon.raw("POST", "/files?path=../../../../tmp/big", body=b"y" * 300_000, auth=False,
                                  headers=dict(own, **{"Content-Type": "application/octet-stream"}))
        assert status == 200 and body[0]["path"] == "/tmp/big", body
        assert daemon.client().get(a["sandboxID"]).exec("stat -c %s /tmp/big").stdout == "300000\n"
        # Symlinks the sandbox made lead nowhere outside it: an absolute one means its own
        # root, and a magic link (/proc/N/root) is refused.
        sb = daemon.client().get(a["sandboxID"])
        sb.exec("ln -s / /tmp/slash; ln -s /proc/1/root /tmp/magic")
        status, body = daemon.raw("GET", "/files?path=/tmp/slash/tmp/big", headers=own, auth=False)
        assert status == 200 and body == "y" * 300_000, status
        status, body = daemon.raw("GET", "/files?path=/tmp/magic/etc/passwd", headers=own, auth=False)
        assert status in (400, 403) and body["code"] == status, (status, body)
        status, body = daemon.raw("POST", "/files?path=/tmp/magic/tmp/planted", body=b"x", auth=False,
                                  headers=dict(own, **{"Content-Type": "application/octet-stream"}))
        assert status in (400, 403), (status, body)
        assert sb.exec("test -e /tmp/planted; echo $?").stdout == "1\n"
        # Without E2b-Sandbox-Id the data plane's paths are not routes at all.
        assert daemon.raw("GET", "/health", auth=False)[0] == 404
        # A sandbox that is gone answers 502, as E2B's proxy does.
        daemon.raw("DELETE", f"/v1/sandboxes/{b['sandboxID']}")
        status, body = health(b["sandboxID"], b["envdAccessToken"])
        assert status == 502 and body["code"] == 502, body
    finally:
        for m in made:
            daemon.raw("DELETE", f"/v1/sandboxes/{m['sandboxID']}")
