"""The TypeScript SDK's own tests (sdk/ts/test, node --test) against a real daemon."""
import os
import shutil
import subprocess

from conftest import ROOT


def test_typescript_sdk(daemon):
    sdk = os.path.join(ROOT, "sdk", "ts")
    assert shutil.which("node"), "Node.js is required (scripts/test.sh installs it)"
    assert os.path.exists(os.path.join(sdk, "dist", "index.js")), "build it first: scripts/test.sh does"
    env = dict(os.environ, SBX_URL=daemon.url, SBX_API_KEY=daemon.key)
    p = subprocess.run(["node", "--test", "test/"], cwd=sdk, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-6000:] + p.stderr[-3000:]
    assert "# fail 0" in p.stdout
