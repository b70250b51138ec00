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

// A capture that keeps the sandbox's memory too (the gVisor wall's memory templates) is a
// folder of two: the files, as OverlayFiles::Capture makes them, in kCapturedFiles, and the
// saved memory in kCapturedMemory (root's alone: it holds the sandbox's secrets).
constexpr const char* kCapturedFiles = "files";
constexpr const char* kCapturedMemory = "memory";

// The memory folder of the capture whose files are the layer `layer` (its files folder, or
// the upper folder in it), or "" if the layer is no such capture's.
std::string MemoryBeside(const std::string& layer);

// An error if the topmost of `layers` holds a gVisor sandbox's memory (which only gVisor
// restores: its files alone would start without the processes it was made for; a deeper
// layer is files only, as what was captured over it).
Status RefuseMemoryCaptures(const std::vector<std::string>& layers);

// An error naming the first of `layers` that a microVM made (its disk's image, which only
// microVMs read), or, unless `memory_ok`, one that RefuseMemoryCaptures refuses.
Status CheckFolderLayers(const std::vector<std::string>& layers, bool memory_ok = false);

class OverlayFiles {
 public:
  OverlayFiles(bool quotas, uid_t root_uid) : quotas_(quotas), root_uid_(root_uid) {}
  // The folders of a new sandbox (a subvolume held to limits.disk_bytes on the store).
  // `memory_ok`: its layers may include a capture with memory (the gVisor wall restores it).
  Status Prepare(const StartSpec& spec, bool memory_ok = false) const;
  bool Has(const std::string& dir) const;
  // A snapshot of the subvolume on the store (constant time; its layer is the snapshot's
  // upper); else a copy of the upper folder, whiteouts and all.
  Result<Runtime::Captured> Capture(const std::string& dir, const std::string& dst) const;
  // Removes a layer folder that Capture made (or a capture with memory: both its parts).
  Status RemoveLayer(const std::string& path) const;
  Status SetLimit(const std::string& dir, uint64_t bytes) const;
  // Removes the sandbox's folder with everything in it.
  Status RemoveDir(const std::string& dir) const;

 private:
  bool quotas_;
  uid_t root_uid_;
};

}  // namespace sbx::runtime
