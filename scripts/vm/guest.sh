#!/bin/bash
# The guest kernel of the microVM wall, from the Debian kernel that scripts/vm/kernel.sh
# fetches: prints a folder that sbxd's --microvm-kernel takes, holding
#   vmlinux         the kernel (booted by PVH)
#   modules/NAME.ko the modules a sandbox's guest loads (uncompressed)
#   modules.list    their names, dependencies first (the order the guest loads them); those
#                   after a line "@disks" only a guest with disks loads, those after "@vsock"
#                   only a guest whose agent's channel is vsock
#   release         the kernel's release
# The folder is cached beside the kernel ($SBX_CACHE_DIR/vm/guest/<release>) and reused.
source "$(dirname "$0")/common.sh"
# The guest's devices (virtio over MMIO: disks, the agent's port, the network, entropy),
# and its root (ext4 layers under an overlay). A cached folder made for another list is made anew.
MODULES="virtio_mmio virtio_blk virtio_console virtio_net virtio_rng crc32c_generic ext4 overlay"
# The sandbox's disks: folders QEMU shares over 9p (loaded only by a guest that has disks).
DISK_MODULES="9pnet_virtio 9p"
# The agent's channel over vsock, on hosts with vhost-vsock (loaded only by such a guest).
VSOCK_MODULES="vmw_vsock_virtio_transport"
WANTED="$MODULES @disks $DISK_MODULES @vsock $VSOCK_MODULES"

make_guest() {
  local kdir release dir tmp m n
  kdir=$(bash "$ROOT/scripts/vm/kernel.sh")
  release=$(basename "$(ls -d "$kdir"/lib/modules/*/ | head -n1)")
  dir="$VM_CACHE/guest/$release"
  if [ -f "$dir/.complete" ] && [ "$(cat "$dir/modules.wanted" 2>/dev/null)" = "$WANTED" ]; then
    echo "$dir"
    return
  fi
  vm_need_packages xz-utils zstd python3
  mkdir -p "$VM_CACHE/guest"
  rm -rf "$VM_CACHE"/guest/.make-*
  tmp=$(mktemp -d "$VM_CACHE/guest/.make-XXXXXX")
  mkdir -p "$tmp/modules"
  local moddir="$kdir/lib/modules/$release"
  # shellcheck disable=SC2086 # lists of names
  vm_resolve_modules "$moddir" $MODULES > "$tmp/paths"
  # shellcheck disable=SC2086
  vm_resolve_modules "$moddir" $MODULES $DISK_MODULES | grep -vxF -f "$tmp/paths" > "$tmp/disk-paths"
  # shellcheck disable=SC2086
  vm_resolve_modules "$moddir" $MODULES $VSOCK_MODULES | grep -vxF -f "$tmp/paths" > "$tmp/vsock-paths"
  { cat "$tmp/paths"; echo "@disks"; cat "$tmp/disk-paths"; echo "@vsock"; cat "$tmp/vsock-paths"; } > "$tmp/all-paths"
  : > "$tmp/modules.list"
  while read -r m; do
    if [ "${m#@}" != "$m" ]; then
      echo "$m" >> "$tmp/modules.list"
      continue
    fi
    n=$(basename "$m"); n=${n%%.ko*}
    case "$m" in
      *.ko.xz) xz -dc "$moddir/$m" > "$tmp/modules/$n.ko" ;;
      *.ko.zst) zstd -qdc "$moddir/$m" > "$tmp/modules/$n.ko" ;;
      *.ko.gz) gzip -dc "$moddir/$m" > "$tmp/modules/$n.ko" ;;
      *) cp "$moddir/$m" "$tmp/modules/$n.ko" ;;
    esac
    echo "$n" >> "$tmp/modules.list"
  done < "$tmp/all-paths"
  rm -f "$tmp/paths" "$tmp/disk-paths" "$tmp/vsock-paths" "$tmp/all-paths"
  cp "$kdir/vmlinux" "$tmp/vmlinux"
  echo "$release" > "$tmp/release"
  echo "$WANTED" > "$tmp/modules.wanted"
  # QEMU reads these as each VM's own unprivileged user.
  chmod -R a+rX "$tmp"
  touch "$tmp/.complete"
  rm -rf "$dir"
  mv "$tmp" "$dir"
  log "guest kernel $release in $dir"
  echo "$dir"
}

vm_locked guest make_guest
