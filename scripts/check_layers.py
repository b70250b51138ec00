#!/usr/bin/env python3
"""The include graph follows the layers (docs/design.md): a file includes only headers of
its own layer and of the layers below it. Run by ctest; prints each wrong include and
exits 1 if there is one."""
import os
import re
import sys

# What each part of src/ may include (the first path element of an include).
AGENT_PROTO = {"base", "agent/protocol"}
ALLOWED = {
    "base": {"base"},
    "agent/protocol": AGENT_PROTO,
    "agent/client": AGENT_PROTO | {"agent/client"},
    "agent": AGENT_PROTO | {"agent"},  # the agent binary's own files (in the sandbox)
    "storage": {"base", "storage"},
    "layers": {"base", "storage", "layers"},
    "disks": {"base", "storage", "disks"},
    "runtime": AGENT_PROTO | {"layers", "runtime"},
    "net": {"base", "net"},
    "core": AGENT_PROTO | {"agent/client", "storage", "layers", "disks", "runtime", "net", "core"},
    # The API still calls the agent client (files, the port proxy) and the image store
    # directly; the redesign moves those calls into core.
    "api": AGENT_PROTO | {"agent/client", "layers", "disks", "core", "api"},
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def part_of(rel):
    """The layer of a file under src/ (agent/protocol and agent/client apart; agent/users,
    agent/channel_mux and agent/vm_config, built into the same library as the protocol
    and shared by both ends, are of agent/protocol)."""
    top = rel.split("/")[0]
    if top == "agent":
        stem = os.path.splitext(os.path.basename(rel))[0]
        if stem in ("users", "channel_mux", "vm_config"):
            return "agent/protocol"
        if stem in ("protocol", "client"):
            return "agent/" + stem
    return top


def main(root):
    src = os.path.join(root, "src")
    bad = []
    for dirpath, _, files in os.walk(src):
        for f in files:
            if not f.endswith((".h", ".cc")):
                continue
            path = os.path.join(dirpath, f)
            rel = os.path.relpath(path, src)
            layer = part_of(rel)
            allowed = ALLOWED.get(layer)
            if allowed is None:
                bad.append(f"{rel}: unknown layer {layer!r} (add it to scripts/check_layers.py)")
                continue
            with open(path, encoding="utf-8") as fh:
                for n, line in enumerate(fh, 1):
                    m = INCLUDE.match(line)
                    if not m or "/" not in m.group(1):
                        continue
                    target = part_of(m.group(1))
                    if target not in allowed:
                        bad.append(f"src/{rel}:{n}: {layer} may not include {m.group(1)}")
    for b in bad:
        print(b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")))
