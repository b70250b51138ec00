#!/bin/bash
# Fetches the Debian kernel that `linux-image-amd64` (SBX_VM_KERNEL_META) depends on today,
# resolved with apt at run time, and unpacks it for QEMU into the cache:
#   $SBX_CACHE_DIR/vm/kernel/<release>/vmlinux          the uncompressed ELF kernel (boots by PVH)
#   $SBX_CACHE_DIR/vm/kernel/<release>/lib/modules/...  its modules, with modules.dep (depmod)
#   $SBX_CACHE_DIR/vm/kernel/<release>/config           its build configuration
# Prints that folder. A kernel already in the cache is reused; when apt cannot resolve
# the package (no network, no lists), the newest cached kernel is used.
#
#   scripts/vm/kernel.sh              -> .../vm/kernel/6.1.0-57-amd64
source "$(dirname "$0")/common.sh"
META="${SBX_VM_KERNEL_META:-linux-image-amd64}"
KCACHE="$VM_CACHE/kernel"
mkdir -p "$KCACHE"

# The versioned package the meta-package depends on (linux-image-6.1.0-57-amd64), or nothing.
resolve() {
  apt-cache depends "$META" 2>/dev/null | awk '$1 == "Depends:" && $2 ~ /^linux-image-/ { print $2; exit }'
}

newest_cached() {
  local d
  d=$(ls -1d "$KCACHE"/*/ 2>/dev/null | sed 's:/$::' | sort -V | tail -n1)
  [ -n "$d" ] && [ -f "$d/.complete" ] && echo "$d"
}

# Writes the uncompressed kernel inside the bzImage $1 to $2 (xz or zstd payload).
extract_vmlinux() {
  nice -n 10 python3 - "$1" "$2" <<'PY'
import lzma, subprocess, sys
src, dst = sys.argv[1], sys.argv[2]
data = open(src, "rb").read()
for magic, kind in ((b"\xfd7zXZ\x00", "xz"), (b"\x28\xb5\x2f\xfd", "zstd")):
    at = data.find(magic)
    if at < 0:
        continue
    if kind == "xz":
        # The decompressor stops at the end of the stream; the bytes after it are not ours.
        out = lzma.LZMADecompressor(lzma.FORMAT_XZ).decompress(data[at:])
    else:
        # zstd complains about the trailing bytes but writes the whole frame first.
        out = subprocess.run(["zstd", "-dc"], input=data[at:], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL).stdout
    if out[:4] == b"\x7fELF":
        open(dst, "wb").write(out)
        sys.exit(0)
sys.exit("no xz or zstd compressed ELF kernel found in " + src)
PY
}

fetch() {
  local pkg=$1 release=${1#linux-image-}
  local dir="$KCACHE/$release"
  if [ -f "$dir/.complete" ]; then echo "$dir"; return; fi
  vm_need_packages kmod zstd xz-utils python3
  rm -rf "$KCACHE"/.fetch-*  # what an interrupted run left (we hold the lock)
  tmp=$(mktemp -d "$KCACHE/.fetch-XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  log "downloading $pkg (what $META depends on)"
  if ! (cd "$tmp" && apt-get download -q "$pkg" >/dev/null 2>&1); then
    apt-get update -qq
    (cd "$tmp" && apt-get download -q "$pkg" >/dev/null)
  fi
  log "unpacking $pkg"
  dpkg-deb -x "$tmp"/linux-image-*.deb "$tmp/pkg"
  mkdir -p "$tmp/out/lib/modules"
  local mods
  for mods in "$tmp/pkg/lib/modules/$release" "$tmp/pkg/usr/lib/modules/$release"; do
    if [ -d "$mods" ]; then mv "$mods" "$tmp/out/lib/modules/"; fi
  done
  [ -d "$tmp/out/lib/modules/$release" ] || { echo "kernel.sh: $pkg holds no modules for $release" >&2; return 1; }
  # The package ships no modules.dep: depmod makes it (and modules.builtin is there).
  /usr/sbin/depmod -b "$tmp/out" "$release"
  cp "$tmp/pkg/boot/config-$release" "$tmp/out/config"
  extract_vmlinux "$tmp/pkg/boot/vmlinuz-$release" "$tmp/out/vmlinux"
  echo "$pkg" > "$tmp/out/package"
  touch "$tmp/out/.complete"
  rm -rf "$dir"
  mv "$tmp/out" "$dir"
  log "kernel $release in $dir"
  echo "$dir"
}

main() {
  local pkg
  pkg=$(resolve)
  if [ -z "$pkg" ]; then
    # No package lists yet (a fresh host) or stale ones: refresh once.
    apt-get update -qq >/dev/null 2>&1 || true
    pkg=$(resolve)
  fi
  if [ -z "$pkg" ]; then
    local cached
    if cached=$(newest_cached); then
      log "apt cannot resolve $META: using the cached kernel $(basename "$cached")"
      echo "$cached"
      return
    fi
    echo "kernel.sh: apt cannot resolve $META and no kernel is cached in $KCACHE" >&2
    return 1
  fi
  fetch "$pkg"
}

vm_locked kernel main
