#!/bin/bash
# Boots a QEMU guest (microvm machine, TCG: no KVM needed) on a Debian kernel and root
# filesystem, runs one script in it, prints the guest's console, and exits with the
# script's exit status.
#
#   scripts/vm/run.sh [OPTIONS] [--] SCRIPT [ARG...]
#
# SCRIPT (a file on this host) runs in the guest as root, as `/sbx/.vm/script ARG...`, in
# /sbx: the run's own ext4 disk, writable, holding a copy of --payload. What the script
# writes to /sbx/out is copied back to --out after the guest powers off. The root
# filesystem is the cached image, behind a throw-away overlay (a run changes nothing in
# it). In the guest: cgroup2 on /sys/fs/cgroup, tmpfs on /tmp and /run, `lo` up.
#
# Options:
#   --kernel DIR      from scripts/vm/kernel.sh (default: run it)
#   --rootfs IMG      from scripts/vm/rootfs.sh (default: run it, base packages only)
#   --payload DIR     copied to /sbx in the guest
#   --out DIR         where the guest's /sbx/out goes (made if missing)
#   --disk-mb N       size of the /sbx disk (default 2048; sparse)
#   --mem MB          guest memory (default 1024)
#   --smp N           vCPUs (default 1)
#   --tcg-threads T   single (default: all vCPUs on one host thread) or multi
#   --modules "M..."  kernel modules to load at boot, with their dependencies
#                     (default: "virtio_mmio virtio_blk crc32c_generic ext4 overlay loop")
#   --append "ARGS"   more kernel command line (e.g. cgroup_no_v1=all)
#   --timeout S       power the guest off after S seconds (default 900; exit 124)
# Exit status: the script's; 124 on timeout; 125 if the guest never reported one.
source "$(dirname "$0")/common.sh"

KDIR="" ROOTFS="" PAYLOAD="" OUT="" DISK_MB=2048 MEM=1024 SMP=1 TCG_THREADS=single TIMEOUT=900 APPEND=""
MODULES="virtio_mmio virtio_blk crc32c_generic ext4 overlay loop"
while [ $# -gt 0 ]; do
  case "$1" in
    --kernel) KDIR=$2; shift 2 ;;
    --rootfs) ROOTFS=$2; shift 2 ;;
    --payload) PAYLOAD=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --disk-mb) DISK_MB=$2; shift 2 ;;
    --mem) MEM=$2; shift 2 ;;
    --smp) SMP=$2; shift 2 ;;
    --tcg-threads) TCG_THREADS=$2; shift 2 ;;
    --modules) MODULES=$2; shift 2 ;;
    --append) APPEND="$APPEND $2"; shift 2 ;;
    --timeout) TIMEOUT=$2; shift 2 ;;
    --) shift; break ;;
    -*) echo "run.sh: unknown option $1" >&2; exit 2 ;;
    *) break ;;
  esac
done
if [ $# -lt 1 ] || [ ! -f "$1" ]; then
  echo "usage: scripts/vm/run.sh [OPTIONS] [--] SCRIPT [ARG...]  (see the head of this file)" >&2
  exit 2
fi
SCRIPT=$1; shift
need_root
vm_need_packages qemu-system-x86 busybox-static e2fsprogs xz-utils zstd
[ -n "$KDIR" ] || KDIR=$(bash "$ROOT/scripts/vm/kernel.sh")
[ -n "$ROOTFS" ] || ROOTFS=$(bash "$ROOT/scripts/vm/rootfs.sh")
[ -f "$KDIR/vmlinux" ] || { echo "run.sh: no vmlinux in $KDIR" >&2; exit 2; }
[ -f "$ROOTFS" ] || { echo "run.sh: no root filesystem image $ROOTFS" >&2; exit 2; }
RELEASE=$(basename "$(ls -d "$KDIR"/lib/modules/*/ | head -n1)")
MODDIR="$KDIR/lib/modules/$RELEASE"

TMP=$(mktemp -d "${TMPDIR:-/tmp}/sbx-vm-XXXXXX")
QEMU_PID=""  # the pid of `timeout`, which passes a TERM on to QEMU
cleanup() {
  if [ -n "$QEMU_PID" ] && kill -0 "$QEMU_PID" 2>/dev/null; then
    kill -TERM "$QEMU_PID" 2>/dev/null || true
    wait "$QEMU_PID" 2>/dev/null || true
  fi
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- the initramfs: busybox, the modules, an /init that mounts the two disks -----------
INITRD="$TMP/initrd"
mkdir -p "$INITRD"/{bin,dev,proc,sys,newroot,lib/modules}
cp /bin/busybox "$INITRD/bin/busybox"
for applet in $("$INITRD/bin/busybox" --list); do
  [ "$applet" = busybox ] || ln -s busybox "$INITRD/bin/$applet"
done
# shellcheck disable=SC2086 # a list of names
vm_resolve_modules "$MODDIR" $MODULES > "$TMP/modules.list"
: > "$INITRD/modules"
while read -r m; do
  n=$(basename "$m"); n=${n%%.ko*}
  case "$m" in
    *.ko.xz) xz -dc "$MODDIR/$m" > "$INITRD/lib/modules/$n.ko" ;;
    *.ko.zst) zstd -qdc "$MODDIR/$m" > "$INITRD/lib/modules/$n.ko" ;;
    *.ko.gz) gzip -dc "$MODDIR/$m" > "$INITRD/lib/modules/$n.ko" ;;
    *) cp "$MODDIR/$m" "$INITRD/lib/modules/$n.ko" ;;
  esac
  echo "$n" >> "$INITRD/modules"
done < "$TMP/modules.list"
cat > "$INITRD/init" <<'EOF'
#!/bin/sh
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
while read -r m; do insmod "/lib/modules/$m.ko" || echo "sbx-vm: insmod $m failed"; done < /modules
fail() { echo "sbx-vm: $*"; echo o > /proc/sysrq-trigger; sleep 10; }
find_label() {
  i=0
  while [ $i -lt 100 ]; do
    d=$(findfs "LABEL=$1" 2>/dev/null) && { echo "$d"; return 0; }
    i=$((i + 1)); sleep 0.05
  done
  return 1
}
root=$(find_label sbxroot) || fail "no disk labelled sbxroot"
work=$(find_label sbxwork) || fail "no disk labelled sbxwork"
mount -t ext4 "$root" /newroot || fail "cannot mount the root filesystem $root"
mkdir -p /newroot/sbx
mount -t ext4 "$work" /newroot/sbx || fail "cannot mount the run's disk $work"
for f in dev proc sys; do mount --move /$f /newroot/$f; done
exec switch_root /newroot /sbx/.vm/stage2
EOF
chmod 755 "$INITRD/init"
(cd "$INITRD" && find . | sort | /bin/busybox cpio -o -H newc -R 0:0 2>/dev/null) > "$TMP/initrd.cpio"

# --- the run's disk: the payload, the script, the guest's second stage ----------------
WORK="$TMP/work"
mkdir -p "$WORK/.vm" "$WORK/out"
if [ -n "$PAYLOAD" ]; then cp -a "$PAYLOAD"/. "$WORK/"; fi
cp "$SCRIPT" "$WORK/.vm/script"
chmod 755 "$WORK/.vm/script"
TOKEN=$(head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \n')
{
  echo '#!/bin/bash'
  printf 'exec /sbx/.vm/script'
  for a in "$@"; do printf ' %q' "$a"; done
  echo
} > "$WORK/.vm/run"
chmod 755 "$WORK/.vm/run"
# The second stage runs as PID 1 from the root filesystem (dash): it sets up what a booted
# system has, runs the script (reaping orphans while it waits), reports, powers off.
cat > "$WORK/.vm/stage2" <<EOF
#!/bin/sh
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8
mount -t tmpfs -o nosuid,nodev,mode=755 tmpfs /run
mount -t tmpfs -o nosuid,nodev,mode=1777 tmpfs /tmp
mkdir -p /dev/pts /dev/shm
mount -t devpts -o gid=5,mode=620,ptmxmode=666 devpts /dev/pts
mount -t tmpfs -o nosuid,nodev,mode=1777 tmpfs /dev/shm
ln -sf /proc/self/fd /dev/fd; ln -sf fd/0 /dev/stdin; ln -sf fd/1 /dev/stdout; ln -sf fd/2 /dev/stderr
mountpoint -q /sys/fs/cgroup || mount -t cgroup2 -o nosuid,nodev,noexec,nsdelegate,memory_recursiveprot cgroup2 /sys/fs/cgroup
ip link set lo up
hostname sbx-vm
cd /sbx
/sbx/.vm/run </dev/null &
wait \$!
rc=\$?
echo \$rc > /sbx/out/.exit-status
sync
printf '\nsbx-vm %s exit %s\n' $TOKEN \$rc
umount /sbx 2>/dev/null || mount -o remount,ro /sbx
# The power-off takes the disks away: nothing may be loaded from them after it (PID 1
# waits on a sleep started before).
sleep 30 &
echo o > /proc/sysrq-trigger
wait
EOF
chmod 755 "$WORK/.vm/stage2"
truncate -s "${DISK_MB}M" "$TMP/work.img"
nice -n 10 mkfs.ext4 -q -F -L sbxwork -E root_owner=0:0 -d "$WORK" "$TMP/work.img" >&2

# --- QEMU ------------------------------------------------------------------------------
TSC_KHZ=$(awk '/^cpu MHz/ { printf "%d", $4 * 1000; exit }' /proc/cpuinfo)
CMDLINE="console=ttyS0 reboot=t panic=-1 8250.nr_uarts=1 i8042.noaux i8042.nokbd i8042.nopnp"
[ -n "$TSC_KHZ" ] && CMDLINE="$CMDLINE tsc_early_khz=$TSC_KHZ"
# Under TCG the guest's TSC check across vCPUs fails on emulation's jitter; without this it
# keeps time with the 4 ms jiffies clock and a periodic tick (src/runtime/microvm/qemu.cc).
CMDLINE="$CMDLINE tsc=reliable"
CMDLINE="$CMDLINE quiet$APPEND"
log "booting $RELEASE on $(basename "$ROOTFS") (TCG, $SMP vCPU, $MEM MB): $(basename "$SCRIPT") $*"
# The throw-away overlay of snapshot=on goes to TMPDIR.
TMPDIR="$TMP" timeout -k 10 "$TIMEOUT" nice -n 10 qemu-system-x86_64 \
  -M microvm -accel "tcg,thread=$TCG_THREADS" -cpu max -smp "$SMP" -m "$MEM" \
  -nodefaults -no-user-config -display none -no-reboot \
  -chardev "stdio,id=con,signal=off,logfile=$TMP/console.log" -serial chardev:con \
  -kernel "$KDIR/vmlinux" -initrd "$TMP/initrd.cpio" -append "$CMDLINE" \
  -drive "id=root,file=$ROOTFS,format=raw,if=none,snapshot=on" -device virtio-blk-device,drive=root \
  -drive "id=work,file=$TMP/work.img,format=raw,if=none" -device virtio-blk-device,drive=work \
  </dev/null &
QEMU_PID=$!
set +e
wait "$QEMU_PID"
QRC=$?
set -e
QEMU_PID=""
if [ -n "$OUT" ]; then
  mkdir -p "$OUT"
  rm -rf "$TMP/rdump" && mkdir -p "$TMP/rdump"
  debugfs -R "rdump /out $TMP/rdump" "$TMP/work.img" >/dev/null 2>&1 || true
  if [ -d "$TMP/rdump/out" ]; then cp -a "$TMP/rdump/out/." "$OUT/"; fi
fi
RC=$(tr -d '\r' < "$TMP/console.log" | awk -v t="sbx-vm $TOKEN exit" 'index($0, t) == 1 { print $4 }' | tail -n1)
if [ -n "$RC" ]; then exit "$RC"; fi
if [ "$QRC" = 124 ]; then
  echo "run.sh: the guest did not finish in $TIMEOUT s" >&2
  exit 124
fi
echo "run.sh: the guest stopped without an exit status (QEMU exit $QRC)" >&2
exit 125
