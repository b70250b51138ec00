#!/bin/bash
# A Debian root filesystem for QEMU guests, as a raw ext4 image (label "sbxroot"), made by
# debootstrap (variant minbase) and cached:
#   $SBX_CACHE_DIR/vm/rootfs/<suite>-<hash of the recipe and packages>.ext4
# Prints the image's path. Arguments are extra Debian packages to include; the same list
# gives the same cached image. The image is only read by guests (scripts/vm/run.sh boots
# it with a throw-away overlay), so one image serves every run; what a run adds (its
# programs, its test) goes on a second disk, not in here.
#
#   scripts/vm/rootfs.sh                          -> the base image
#   scripts/vm/rootfs.sh libsqlite3-0 libssl3     -> one that also holds these packages
source "$(dirname "$0")/common.sh"
SUITE="${SBX_VM_SUITE:-bookworm}"
# Bump when the recipe below changes, so that cached images are rebuilt.
RECIPE=1
# What every guest gets: a shell and core tools, python3, procps and iproute2 (ip, ss),
# util-linux (mount, findmnt, nsenter) and e2fsprogs (mkfs.ext4).
BASE_PACKAGES=(python3 procps iproute2 util-linux e2fsprogs)
RCACHE="$VM_CACHE/rootfs"
mkdir -p "$RCACHE"

mapfile -t PKGS < <(printf '%s\n' "${BASE_PACKAGES[@]}" "$@" | sed '/^$/d' | sort -u)
KEY=$(printf 'recipe %s suite %s\n%s\n' "$RECIPE" "$SUITE" "${PKGS[*]}" | sha256sum | cut -c1-12)
IMG="$RCACHE/$SUITE-$KEY.ext4"

build() {
  if [ -f "$IMG" ]; then return; fi
  need_root
  vm_need_packages debootstrap e2fsprogs
  rm -rf "$RCACHE"/.build-*  # what an interrupted run left (we hold the lock)
  tmp=$(mktemp -d "$RCACHE/.build-XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  local mirror include
  mirror=$(vm_mirror)
  include=$(IFS=,; echo "${PKGS[*]}")
  log "debootstrap $SUITE from $mirror with $include (once; cached in $RCACHE)"
  if ! nice -n 10 debootstrap --variant=minbase --include="$include" "$SUITE" "$tmp/root" "$mirror" \
       >"$tmp/debootstrap.out" 2>&1; then
    tail -n 30 "$tmp/debootstrap.out" >&2
    [ -f "$tmp/root/debootstrap/debootstrap.log" ] && tail -n 30 "$tmp/root/debootstrap/debootstrap.log" >&2
    echo "rootfs.sh: debootstrap failed" >&2
    return 1
  fi
  local r="$tmp/root"
  # Not needed at run time: downloaded packages, package lists, documentation.
  rm -rf "$r"/var/cache/apt/archives/*.deb "$r"/var/lib/apt/lists/* "$r"/usr/share/doc/* "$r"/usr/share/man/*
  # debootstrap copied the build host's name and name servers.
  echo sbx-vm > "$r/etc/hostname"
  printf '127.0.0.1 localhost sbx-vm\n::1 localhost\n' > "$r/etc/hosts"
  : > "$r/etc/resolv.conf"
  # Where run.sh mounts the run's own disk.
  mkdir -p "$r/sbx"
  echo "$SUITE ${PKGS[*]} (recipe $RECIPE)" > "$r/etc/sbx-vm-rootfs"
  local mb
  mb=$(( $(du -sm "$r" | cut -f1) * 5 / 4 + 256 ))
  truncate -s "${mb}M" "$tmp/root.ext4"
  nice -n 10 mkfs.ext4 -q -F -L sbxroot -d "$r" "$tmp/root.ext4" >&2
  mv "$tmp/root.ext4" "$IMG"
  log "root filesystem image $IMG (${mb} MB)"
}

vm_locked rootfs build
echo "$IMG"
