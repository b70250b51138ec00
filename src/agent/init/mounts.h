// Mount helpers for building a root: the container init's (container_init.h), the VM
// init's (vm_init.h) and QEMU's jail on the host (vm_jail.h). Each refuses to follow a
// symlink where it creates, so a hostile tree cannot redirect a mount.
#pragma once

#include <sys/types.h>

#include <string>

#include "base/result.h"

namespace sbx::agent {

Status Mount(const char* src, const std::string& target, const char* type, unsigned long flags,
             const std::string& data = "");
// Makes `path` a real directory; refuses symlinks and other types.
Status EnsureDir(const std::string& path, mode_t mode = 0755);
// Makes `path` a regular file (empty when new), a bind's target; refuses other types.
Status EnsureFile(const std::string& path);
// Binds `path` on itself read-only, nosuid, nodev, noexec (absent paths are skipped).
Status BindReadOnly(const std::string& path);
// Hides a file behind /dev/null, or a directory behind an empty read-only tmpfs.
Status Mask(const std::string& path);
// Creates each directory of `rel` (absolute inside the root) below `root`, refusing
// symlinks and non-directories on the way.
Status EnsureDirsUnder(const std::string& root, const std::string& rel);

}  // namespace sbx::agent
