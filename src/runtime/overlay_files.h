// A sandbox's files as the container and gVisor walls keep them: an overlay's `upper` and
// `work` folders (owned by the sandbox's root) and its mount point `root` in the sandbox's
// folder, on the btrfs store with a quota (runtime/quota.h) or on a plain folder. Layers
// captured here serve both walls. Any thread.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "runtime/runtime.h"

namespace sbx::runtime {

// A capture that keeps the sandbox's memory too (the memory templates of the gVisor and
// container walls) is a folder of two: the files, as OverlayFiles::Capture makes them, in
// kCapturedFiles, and the saved memory in kCapturedMemory (root's alone: it holds the
// sandbox's secrets), where kMemoryWall names the wall that saved it and alone restores it.
constexpr const char* kCapturedFiles = "files";
constexpr const char* kCapturedMemory = "memory";
constexpr const char* kMemoryWall = "wall";

// The wall whose save a memory folder holds ("gvisor" for one that names none: the
// gVisor wall's, made before the container wall had memory templates).
std::string MemoryWall(const std::string& memory);
// Names the wall in a memory folder.
Status WriteMemoryWall(const std::string& memory, const std::string& wall);

// The memory folder of the capture whose files are the layer `layer` (its files folder, or
// the upper folder in it), or "" if the layer is no such capture's.
std::string MemoryBeside(const std::string& layer);

// An error if the topmost of `layers` holds the memory of a sandbox of another wall than
// `wall` (which only that wall restores: its files alone would start without the processes
// it was made for; a deeper layer is files only, as what was captured over it).
Status RefuseMemoryCaptures(const std::vector<std::string>& layers, const std::string& wall);

// An error naming the first of `layers` that a microVM made (its disk's image, which only
// microVMs read), or one that RefuseMemoryCaptures refuses for `wall`.
Status CheckFolderLayers(const std::vector<std::string>& layers, const std::string& wall);

class OverlayFiles {
 public:
  OverlayFiles(bool quotas, uid_t root_uid) : quotas_(quotas), root_uid_(root_uid) {}
  // The folders of a new sandbox of `wall` (a subvolume held to limits.disk_bytes on the
  // store), whose topmost layer may hold memory of that wall only. A sandbox made from
  // such a layer gets the mark `memory-from` (the memory folder), for its first start.
  Status Prepare(const StartSpec& spec, const std::string& wall) const;
  // The memory folder a sandbox's first start restores, once: the mark goes with it, so a
  // later start boots (nullopt: none).
  static std::optional<std::string> TakeMemoryMark(const std::string& dir);
  bool Has(const std::string& dir) const;
  // A snapshot of the subvolume on the store (constant time; its layer is the snapshot's
  // upper); else a copy of the upper folder, whiteouts and all.
  Result<Runtime::Captured> Capture(const std::string& dir, const std::string& dst) const;
  // The files of a capture with memory, into `dst`/kCapturedFiles beside the memory already
  // saved in `dst`/kCapturedMemory: its layer, and its bytes with the memory's.
  Result<Runtime::Captured> CaptureBesideMemory(const std::string& dir, const std::string& dst) const;
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
