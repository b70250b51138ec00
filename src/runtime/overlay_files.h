// A sandbox's files as the container and gVisor walls keep them: an overlay's `upper` and
// `work` folders (owned by the sandbox's root) and its mount point `root` in the sandbox's
// folder, on the btrfs store with a quota (runtime/quota.h) or on a plain folder. Layers
// captured here serve both walls. Any thread.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "runtime/runtime.h"

namespace sbx::runtime {

// An error naming the first of `layers` that a microVM made (its disk's image, which only
// microVMs read).
Status CheckFolderLayers(const std::vector<std::string>& layers);

class OverlayFiles {
 public:
  OverlayFiles(bool quotas, uid_t root_uid) : quotas_(quotas), root_uid_(root_uid) {}
  // The folders of a new sandbox (a subvolume held to limits.disk_bytes on the store).
  Status Prepare(const StartSpec& spec) const;
  bool Has(const std::string& dir) const;
  // A snapshot of the subvolume on the store (constant time; its layer is the snapshot's
  // upper); else a copy of the upper folder, whiteouts and all.
  Result<Runtime::Captured> Capture(const std::string& dir, const std::string& dst) const;
  Status RemoveLayer(const std::string& path) const;
  Status SetLimit(const std::string& dir, uint64_t bytes) const;
  // Removes the sandbox's folder with everything in it.
  Status RemoveDir(const std::string& dir) const;

 private:
  bool quotas_;
  uid_t root_uid_;
};

}  // namespace sbx::runtime
