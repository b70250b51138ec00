"""Each SDK README's quick start runs as written against a daemon with the default image
and prints what its comments say."""
import os
import re
import shutil
import subprocess

from conftest import ROOT


def first_block(readme, lang):
    text = open(os.path.join(ROOT, readme)).read()
    quick = text[text.index("## Quick start"):]
    return re.search(r"```" + lang + r"\n(.*?)```", quick, re.S).group(1)


EXPECTED = ["42", "hello", "hi from a file", "hello.py", "2.8", "print('hi from a file')", "kept"]


def test_python_quick_start(daemon, tmp_path):
    script = tmp_path / "quick.py"
    script.write_text(first_block("sdk/python/README.md", "python"))
    env = dict(os.environ, SBX_URL=daemon.url, SBX_API_KEY=daemon.key,
               PYTHONPATH=os.path.join(ROOT, "sdk", "python"))
    p = subprocess.run(["python3", str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "['42', 'hello'] 0" in p.stdout
    assert "2.8 ['5\\n']" in p.stdout
    for want in EXPECTED:
        assert want in p.stdout, (want, p.stdout)


def test_typescript_quick_start(daemon, tmp_path):
    assert shutil.which("node"), "Node.js is required (scripts/test.sh installs it)"
    # As a user's project that depends on the SDK: node_modules/@sbx/sdk.
    os.makedirs(tmp_path / "node_modules" / "@sbx")
    os.symlink(os.path.join(ROOT, "sdk", "ts"), tmp_path / "node_modules" / "@sbx" / "sdk")
    script = tmp_path / "quick.mjs"
    script.write_text(first_block("sdk/ts/README.md", "js"))
    env = dict(os.environ, SBX_URL=daemon.url, SBX_API_KEY=daemon.key)
    p = subprocess.run(["node", str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "[ '42', 'hello', '' ] 0" in p.stdout
    assert "2.8 [ '5\\n' ]" in p.stdout
    for want in EXPECTED:
        assert want in p.stdout, (want, p.stdout)
