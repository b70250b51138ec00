// A microVM's own disk (the overlay's upper folder, mounted at /mnt/upper) grown to its
// device: a copy of a memory template starts on a copy of the template's disk, which sbxd
// makes larger when the copy's disk_mb is larger (a longer file before a boot, QEMU's
// block_resize after a load). Guest PID 1 only.
#pragma once

#include <cstdint>
#include <string>

#include "base/result.h"

namespace sbx::agent {

// Whether the ext4 file system on the block device `device` (unmounted) is smaller than
// the device.
Result<bool> FileSystemSmaller(const std::string& device);

// Grows the ext4 file system that `fs_fd` (any open file or folder on it) is on to the
// size of its block device, online. With `at_least` above 0, first waits up to
// `timeout_ms` for the device to be that large (a resize reaches the guest's driver a
// moment after QEMU's). A file system as large as its device stays as it is (the kernel
// still flushes its journal: call this only when the disk grew).
Status GrowToDevice(int fs_fd, uint64_t at_least, int timeout_ms);

}  // namespace sbx::agent
