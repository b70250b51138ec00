#!/bin/bash
# The cgroup v2 CI leg: boots Debian's kernel under QEMU (TCG) with cgroup_no_v1=all, so the
# guest has the unified hierarchy only, and runs sbxd's smoke suite there
# (tests/vm/cgroup_v2_smoke.py): create, exec, the memory, pids and CPU limits holding, pause
# and resume, snapshot and a create from it, fork, the in-sandbox API knowing its caller by
# cgroup, stop and start, delete, sbxd killed with kill -9 and restarted (re-adopting its
# sandboxes), limits changed on a live cgroup (a warm-pool claim), and nothing left behind.
#
#   scripts/vm/cgroup-v2-smoke.sh [BUILD_DIR]     (default: build/, holding sbxd, sbx, sbx-agent)
#
# The kernel and the root filesystem image are cached in $SBX_CACHE_DIR/vm; the binaries and
# the suite go in on a per-run disk. On 2 cores (TCG): about 50 s warm (boot plus a 35 s
# suite), about 130 s cold (+12 s kernel download and unpacking, +70 s debootstrap). The
# guest's results (results.json, sbxd.log) are kept in $SBX_VM_OUT when it is set.
# Exit status: the suite's (0: every check passed).
source "$(dirname "$0")/common.sh"
need_root
T0=$(date +%s.%N)
elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }

BUILD_DIR=$(realpath -m "${1:-$ROOT/build}")
for b in sbxd sbx sbx-agent; do
  if [ ! -x "$BUILD_DIR/$b" ]; then
    echo "cgroup-v2-smoke.sh: $BUILD_DIR/$b is missing; build it first:" >&2
    echo "  cmake -S . -B $BUILD_DIR -DCMAKE_BUILD_TYPE=RelWithDebInfo && cmake --build $BUILD_DIR --target sbxd sbx sbx-agent" >&2
    exit 2
  fi
done
vm_need_packages qemu-system-x86 busybox-static e2fsprogs xz-utils zstd kmod debootstrap python3

# The Debian packages that hold the shared libraries the binaries load, so that the guest's
# root filesystem has them (a new dependency makes a new cached image).
lib_packages() {
  local lib p cand
  { ldd "$@" 2>/dev/null || true; } | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// && $1 !~ /:$/ { print $1 }' | sort -u |
    while read -r lib; do
      p=""
      for cand in "$lib" "$(realpath "$lib")" "${lib#/usr}" "/usr$lib"; do
        p=$(dpkg-query -S "$cand" 2>/dev/null | awk -F': ' '$2 ~ /^\// { print $1; exit }') && [ -n "$p" ] && break
      done
      if [ -z "$p" ]; then echo "cgroup-v2-smoke.sh: no Debian package holds $lib" >&2; return 1; fi
      echo "${p%%:*}"
    done | sort -u
}

log "kernel (scripts/vm/kernel.sh)"
KDIR=$(bash "$ROOT/scripts/vm/kernel.sh")
T_KERNEL=$(elapsed "$T0")
LIBS=$(lib_packages "$BUILD_DIR/sbxd" "$BUILD_DIR/sbx" "$BUILD_DIR/sbx-agent")
# busybox-static: sbxd makes its `busybox` image from the host's /bin/busybox.
log "root filesystem (scripts/vm/rootfs.sh)"
# shellcheck disable=SC2086 # a list of names
IMG=$(bash "$ROOT/scripts/vm/rootfs.sh" busybox-static $LIBS)
T_ROOTFS=$(elapsed "$T0")

TMP=$(mktemp -d "${TMPDIR:-/tmp}/sbx-cg2-XXXXXX")
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$TMP/payload/bin" "$TMP/payload/tests"
for b in sbxd sbx sbx-agent; do
  # Without the debug sections: the same code, a smaller disk.
  objcopy --strip-debug "$BUILD_DIR/$b" "$TMP/payload/bin/$b" 2>/dev/null || cp "$BUILD_DIR/$b" "$TMP/payload/bin/$b"
done
cp "$ROOT"/tests/vm/*.py "$TMP/payload/tests/"
OUT="${SBX_VM_OUT:-$TMP/out}"
mkdir -p "$OUT"

log "booting the cgroup v2 guest and running tests/vm/cgroup_v2_smoke.py"
set +e
# Two vCPUs (on one host thread) so that a 1-CPU limit can be exceeded and throttled.
bash "$ROOT/scripts/vm/run.sh" --kernel "$KDIR" --rootfs "$IMG" --payload "$TMP/payload" --out "$OUT" \
  --smp 2 --mem 1536 --append "cgroup_no_v1=all" --timeout 900 \
  "$ROOT/tests/vm/cgroup_v2_smoke.py" --bin /sbx/bin --data /sbx/data --out /sbx/out
RC=$?
set -e
T_END=$(elapsed "$T0")
log "cgroup v2 leg: exit $RC; wall ${T_END} s (kernel ready at ${T_KERNEL} s, root filesystem at ${T_ROOTFS} s, guest run $(awk -v a="$T_ROOTFS" -v b="$T_END" 'BEGIN { printf "%.1f", b - a }') s)"
exit "$RC"
