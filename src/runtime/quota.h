// Per-sandbox disk limits on a btrfs store with quotas enabled: a sandbox's folder is a
// subvolume of its own, and the subvolume's qgroup caps what it references (data and
// metadata, so a flood of empty files stops at the limit too). Any thread.
#pragma once

#include <cstdint>
#include <string>

#include "base/result.h"

namespace sbx::runtime {

// Makes `dir` (whose parent exists, on the store) a new subvolume limited to `bytes`.
Status MakeLimitedDir(const std::string& dir, uint64_t bytes);
// Changes the limit of a folder made by MakeLimitedDir.
Status SetDirLimit(const std::string& dir, uint64_t bytes);
// Removes such a folder with everything in it, and its qgroup.
Status RemoveLimitedDir(const std::string& dir);

}  // namespace sbx::runtime
