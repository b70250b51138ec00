// Per-sandbox disk limits on a btrfs store with quotas enabled: a sandbox's folder is a
// subvolume of its own, and the subvolume's qgroup caps what it references (data and
// metadata, so a flood of empty files stops at the limit too). Any thread.
#pragma once

#include <cstdint>
#include <string>

#include "base/result.h"

namespace sbx::runtime {

// Turns quotas on for the btrfs file system mounted at `mnt`: simple quotas where the kernel
// has them (usage is charged to the subvolume that wrote each extent, so a snapshot costs
// no accounting walk), else full qgroups. Where quotas are on already, they stay as they
// are. Returns "simple" or "full".
Result<std::string> EnableQuotas(const std::string& mnt);
// Makes `dir` (whose parent exists, on the store) a new subvolume limited to `bytes`.
Status MakeLimitedDir(const std::string& dir, uint64_t bytes);
// Changes the limit of a folder made by MakeLimitedDir.
Status SetDirLimit(const std::string& dir, uint64_t bytes);
// Removes such a folder (or a read-only snapshot) with everything in it, and its qgroup.
Status RemoveLimitedDir(const std::string& dir);
// A read-only snapshot of the subvolume `dir` at `dst` (which must not exist): constant
// time, whatever the files; the source's data is flushed first.
Status SnapshotDir(const std::string& dir, const std::string& dst);

}  // namespace sbx::runtime
