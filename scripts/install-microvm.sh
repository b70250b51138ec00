#!/bin/bash
# What the microVM wall needs: QEMU from Debian (qemu-system-x86, without its recommends)
# and the guest kernel, Debian's linux-image unpacked once into $SBX_CACHE_DIR/vm
# (scripts/vm/guest.sh). Prints the guest kernel's folder, for sbxd --microvm-kernel.
source "$(dirname "$0")/vm/common.sh"
vm_need_packages qemu-system-x86 e2fsprogs binutils
bash "$ROOT/scripts/vm/guest.sh"
