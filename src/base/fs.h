// Small filesystem helpers over syscalls. Any thread. Paths here are host paths that the
// daemon owns (never paths chosen inside a sandbox).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "base/result.h"

namespace sbx::fs {

Result<std::string> ReadFile(const std::string& path, size_t max_bytes = 64 << 20);
// ReadFile for a file that someone less trusted may have replaced (a log that QEMU writes):
// a symlink, a FIFO, a device or anything else that is not a regular file is refused
// (kPermissionDenied) without being followed or waited on.
Result<std::string> ReadOwnedFile(const std::string& path, size_t max_bytes = 64 << 20);
// Writes the whole string (O_WRONLY|O_TRUNC, creating with `mode` if `create`).
Status WriteFile(const std::string& path, const std::string& data, bool create = true,
                 mode_t mode = 0644);
// Writes atomically: a temp file in the same directory, fsync, rename.
Status WriteFileAtomic(const std::string& path, const std::string& data, mode_t mode = 0644);
Status MkdirAll(const std::string& path, mode_t mode = 0755);
bool Exists(const std::string& path);
bool IsDir(const std::string& path);
// Removes a tree without following symlinks or crossing mount points.
Status RemoveTree(const std::string& path);
// Adds `delta` to the uid and gid of every entry (no symlink following); ids already
// >= delta are left as they are. Used to shift an image into a sandbox's id range.
Status ShiftOwnership(const std::string& path, uid_t delta);
Result<std::vector<std::string>> ListDir(const std::string& path);
// Whether something is mounted at `path` (an absolute path without escapes), from
// /proc/self/mountinfo.
bool IsMountPoint(const std::string& path);
// Total bytes of regular files in a tree (no symlink following).
uint64_t TreeSize(const std::string& path);
// Copies the data of `in`'s first `size` bytes to the same offsets of `out`, leaving its
// holes unwritten (a sparse copy; `out` should be at least `size` long already). Returns
// the bytes copied. With `skip_zero_pages`, 4 KiB pages of zeros are left as holes too
// (a memory image: the pages a guest touched but holds zeros in).
Result<uint64_t> CopyData(int in, int out, uint64_t size, bool skip_zero_pages = false);

}  // namespace sbx::fs
