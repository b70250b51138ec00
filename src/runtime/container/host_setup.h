// What the container wall needs of the host before its first sandbox: the btrfs store
// (with --store-mb) and the cgroup hierarchy's favour for dynamic groups. Called once at
// sbxd's start, before anything else uses the data dir's store folders.
#pragma once

#include <cstdint>
#include <string>

#include "base/result.h"

namespace sbx::runtime {

// `store_mb` 0: no store (sandboxes' files on the data dir's own file system).
Status SetUpContainerHost(const std::string& data_dir, int64_t store_mb);

}  // namespace sbx::runtime
