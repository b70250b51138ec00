"""Packs wheels from the files of unpacked Debian python3-* packages: each distribution's
top-level modules from dist-packages plus a dist-info made from its egg-info.

usage: wheelhouse.py UNPACKED_TREE WHEELHOUSE_DIR NAME[:REQUIREMENT,...]...
(Debian's egg-info may lack the requirements or carry version 0.0.0: requirements given
here are added, and a 0.0.0 version is read from the module's __version__.)
Embedded into `sbx image build default` at build time (cli/CMake)."""
import base64
import hashlib
import os
import re
import sys
import zipfile


def metadata(egg: str, version: str, extra_requires) -> str:
    # An egg-info is a directory (PKG-INFO, requires.txt...) or a lone PKG-INFO file.
    pkg_info = os.path.join(egg, "PKG-INFO") if os.path.isdir(egg) else egg
    meta = open(pkg_info).read().rstrip("\n") + "\n"
    req = os.path.join(egg, "requires.txt")
    requires = []
    if os.path.exists(req):
        for line in open(req).read().splitlines():
            line = line.strip()
            if line.startswith("["):
                break  # optional extras are left out
            if line:
                requires.append("Requires-Dist: " + line + "\n")
    requires += ["Requires-Dist: " + r + "\n" for r in extra_requires]
    meta = meta.strip("\n")
    lines = [l for l in meta.split("\n\n", 1)[0].split("\n") if l and not l.startswith("Version:")]
    head = "\n".join(lines + ["Version: " + version])
    body = meta.split("\n\n", 1)[1] if "\n\n" in meta else ""
    return head + "\n" + "".join(requires) + ("\n" + body + "\n" if body else "")


def module_version(site: str, top: str) -> str:
    init = os.path.join(site, top, "__init__.py")
    if os.path.isfile(init):
        for line in open(init):
            m = re.match(r"\s*__version__\s*=\s*['\"]([^'\"]+)['\"]", line)
            if m:
                return m.group(1)
    return "0.0.0"


def build(site: str, out: str, spec: str) -> str:
    name, _, reqs = spec.partition(":")
    extra_requires = [r for r in reqs.split(",") if r]
    info = [d for d in os.listdir(site) if d.lower().startswith(name.lower() + "-") and d.endswith(".egg-info")]
    if not info:
        sys.exit("no egg-info for " + name)
    egg = os.path.join(site, info[0])
    version = info[0][len(name) + 1:].split("-py")[0].replace(".egg-info", "")
    top_file = os.path.join(egg, "top_level.txt")
    tops = open(top_file).read().split() if os.path.isfile(top_file) else [name.lower()]
    if version == "0.0.0":
        version = module_version(site, tops[0])
    distinfo = "%s-%s.dist-info" % (name, version)
    whl = os.path.join(out, "%s-%s-py3-none-any.whl" % (name, version))
    records = []
    with zipfile.ZipFile(whl, "w", zipfile.ZIP_DEFLATED) as z:
        def add(arc: str, data: bytes) -> None:
            z.writestr(arc, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            records.append("%s,sha256=%s,%d" % (arc, digest, len(data)))

        for top in tops:
            base = os.path.join(site, top)
            paths = [base + ".py"] if os.path.isfile(base + ".py") else []
            for d, _, files in os.walk(base):
                paths += [os.path.join(d, f) for f in files if not f.endswith(".pyc")]
            for p in sorted(paths):
                with open(p, "rb") as f:
                    add(os.path.relpath(p, site), f.read())
        add(distinfo + "/METADATA", metadata(egg, version, extra_requires).encode())
        add(distinfo + "/WHEEL", b"Wheel-Version: 1.0\nGenerator: sbx image build\n"
                                 b"Root-Is-Purelib: true\nTag: py3-none-any\n")
        add(distinfo + "/top_level.txt", ("\n".join(tops) + "\n").encode())
        z.writestr(distinfo + "/RECORD", "\n".join(records + [distinfo + "/RECORD,,"]) + "\n")
    return whl


def main() -> None:
    root, out, names = sys.argv[1], sys.argv[2], sys.argv[3:]
    site = os.path.join(root, "usr/lib/python3/dist-packages")
    os.makedirs(out, exist_ok=True)
    for name in names:
        print("wheel", os.path.basename(build(site, out, name)))


if __name__ == "__main__":
    main()
