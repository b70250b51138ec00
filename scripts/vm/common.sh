# shellcheck shell=bash
# Shared by the scripts in scripts/vm/ (sourced, not run): the cache folder, packages, the
# Debian mirror. The VM tooling boots a Debian kernel under QEMU (TCG: it needs no KVM) on
# a debootstrap root filesystem; see scripts/vm/run.sh.
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

# Kernels and root filesystem images, reused by every run.
VM_CACHE="$SBX_CACHE_DIR/vm"
mkdir -p "$VM_CACHE"

# Installs the Debian packages among "$@" that are missing (QEMU without its recommends).
vm_need_packages() {
  need_root
  local APT_OPTS=(--no-install-recommends)
  install_missing "$@"
}

# The Debian mirror apt already uses (as `sbx image build` finds it); SBX_DEBIAN_MIRROR overrides.
vm_mirror() {
  if [ -n "${SBX_DEBIAN_MIRROR:-}" ]; then echo "$SBX_DEBIAN_MIRROR"; return; fi
  local f u
  for f in /etc/apt/sources.list.d/debian.sources /etc/apt/sources.list; do
    [ -f "$f" ] || continue
    u=$(awk '/^URIs:/ { for (i = 2; i <= NF; i++) if ($i !~ /security/) { print $i; exit } }
             /^deb / { for (i = 2; i <= NF; i++) { if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; continue }
                                                   if ($i !~ /security/) print $i; exit } }' "$f" | head -n1)
    if [ -n "$u" ]; then echo "$u"; return; fi
  done
  echo "http://deb.debian.org/debian"
}

# Runs "$@" holding an exclusive lock on $VM_CACHE/.NAME.lock, so that two runs do not
# fill the same cache entry at once.
vm_locked() {
  local name=$1; shift
  (
    flock 9
    "$@"
  ) 9>"$VM_CACHE/.$name.lock"
}

# vm_resolve_modules MODDIR NAME...: the paths (relative to MODDIR) of the modules to load
# for NAME..., dependencies first, from modules.dep (built-in ones are skipped).
vm_resolve_modules() {
  python3 - "$@" <<'PY'
import os, re, sys
moddir, wanted = sys.argv[1], sys.argv[2:]
norm = lambda n: n.replace("-", "_")
name_of = lambda p: norm(re.sub(r"\.ko(\.xz|\.zst|\.gz)?$", "", os.path.basename(p)))
deps, path = {}, {}
for line in open(os.path.join(moddir, "modules.dep")):
    mod, _, rest = line.partition(":")
    n = name_of(mod)
    path[n], deps[n] = mod, rest.split()
builtin = set()
if os.path.exists(os.path.join(moddir, "modules.builtin")):
    builtin = {name_of(l.strip()) for l in open(os.path.join(moddir, "modules.builtin"))}
order, seen = [], set()
def visit(n):
    if n in seen:
        return
    seen.add(n)
    if n in builtin:
        return
    if n not in path:
        sys.exit(f"no module {n} in {moddir}")
    for d in deps[n]:
        visit(name_of(d))
    order.append(path[n])
for w in wanted:
    visit(norm(w))
print("\n".join(order))
PY
}
