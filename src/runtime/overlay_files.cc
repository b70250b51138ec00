#include "runtime/overlay_files.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "base/fs.h"
#include "layers/layer_copy.h"
#include "runtime/quota.h"

namespace sbx::runtime {

namespace {
constexpr const char* kMemoryMark = "memory-from";  // in a sandbox's folder
}  // namespace

std::string MemoryBeside(const std::string& layer) {
  std::filesystem::path p(layer);
  if (p.filename() == "upper") p = p.parent_path();  // on the store: files/ is a snapshot
  if (p.filename() != kCapturedFiles) return "";
  std::string memory = (p.parent_path() / kCapturedMemory).string();
  return fs::IsDir(memory) ? memory : "";
}

std::string MemoryWall(const std::string& memory) {
  auto wall = fs::ReadFile(memory + "/" + kMemoryWall, 64);
  return wall.ok() && !wall->empty() ? *wall : "gvisor";
}

Status WriteMemoryWall(const std::string& memory, const std::string& wall) {
  return fs::WriteFileAtomic(memory + "/" + kMemoryWall, wall, 0600);
}

Status RefuseMemoryCaptures(const std::vector<std::string>& layers, const std::string& wall) {
  const std::string memory = layers.empty() ? "" : MemoryBeside(layers[0]);
  if (memory.empty()) return OkStatus();
  const std::string saved = MemoryWall(memory);
  if (saved == wall) return OkStatus();
  const char* whose = saved == "gvisor" ? "a gVisor sandbox's" : saved == "container" ? "a container sandbox's" : "a sandbox's";
  return MakeError(Code::kFailedPrecondition, std::string("this template holds ") + whose + " memory: it starts " +
                                                  saved + " sandboxes only (a snapshot without memory serves every wall)");
}

Status CheckFolderLayers(const std::vector<std::string>& layers, const std::string& wall) {
  for (const auto& l : layers)
    if (fs::Exists(l + "/" + kVmDiskLayer))
      return MakeError(Code::kFailedPrecondition,
                       "these files were captured from a microVM (its disk's image): they serve microVM sandboxes only");
  return RefuseMemoryCaptures(layers, wall);
}

Status OverlayFiles::Prepare(const StartSpec& spec, const std::string& wall) const {
  SBX_RETURN_IF_ERROR(CheckFolderLayers(spec.layers, wall));
  if (quotas_ && ::access(spec.dir.c_str(), F_OK) != 0) {
    // A subvolume of its own, limited to the sandbox's disk: its files can fill only it.
    SBX_RETURN_IF_ERROR(fs::MkdirAll(spec.dir.substr(0, spec.dir.rfind('/')), 0711));
    SBX_RETURN_IF_ERROR(MakeLimitedDir(spec.dir, spec.limits.disk_bytes));
  }
  SBX_RETURN_IF_ERROR(fs::MkdirAll(spec.dir, 0711));
  for (const char* d : {"upper", "work"}) {
    std::string p = spec.dir + "/" + d;
    if (::mkdir(p.c_str(), 0755) != 0 && errno != EEXIST) return ErrnoError("mkdir " + p);
    if (::chown(p.c_str(), root_uid_, root_uid_) != 0) return ErrnoError("chown " + p);
  }
  std::string root = spec.dir + "/root";
  if (::mkdir(root.c_str(), 0755) != 0 && errno != EEXIST) return ErrnoError("mkdir " + root);
  const std::string memory = spec.layers.empty() ? "" : MemoryBeside(spec.layers[0]);
  return memory.empty() ? OkStatus() : fs::WriteFileAtomic(spec.dir + "/" + kMemoryMark, memory, 0600);
}

std::optional<std::string> OverlayFiles::TakeMemoryMark(const std::string& dir) {
  const std::string mark = dir + "/" + kMemoryMark;
  auto from = fs::ReadFile(mark, 4096);
  if (!from.ok()) return std::nullopt;
  (void)::unlink(mark.c_str());
  return *from;
}

bool OverlayFiles::Has(const std::string& dir) const { return fs::IsDir(dir + "/upper"); }

Result<Runtime::Captured> OverlayFiles::Capture(const std::string& dir, const std::string& dst) const {
  if (quotas_) {
    SBX_RETURN_IF_ERROR(SnapshotDir(dir, dst));
    return Runtime::Captured{"upper", std::nullopt};
  }
  SBX_ASSIGN_OR_RETURN(layers::CopyStats copied, layers::CopyTree(dir + "/upper", dst));
  return Runtime::Captured{"", copied.bytes};
}

Result<Runtime::Captured> OverlayFiles::CaptureBesideMemory(const std::string& dir, const std::string& dst) const {
  SBX_ASSIGN_OR_RETURN(auto files, Capture(dir, dst + "/" + kCapturedFiles));
  const std::string root = std::string(kCapturedFiles) + (files.root.empty() ? "" : "/" + files.root);
  std::optional<uint64_t> bytes;
  if (files.bytes) bytes = *files.bytes + fs::TreeSize(dst + "/" + kCapturedMemory);
  return Runtime::Captured{root, bytes};
}

Status OverlayFiles::RemoveLayer(const std::string& path) const {
  if (fs::IsDir(path + "/" + kCapturedMemory)) {
    // Its files first (a read-only snapshot on the store is made writable as it goes).
    if (fs::Exists(path + "/" + kCapturedFiles)) SBX_RETURN_IF_ERROR(RemoveLayer(path + "/" + kCapturedFiles));
    return fs::RemoveTree(path);
  }
  return quotas_ ? RemoveLimitedDir(path) : fs::RemoveTree(path);
}

Status OverlayFiles::SetLimit(const std::string& dir, uint64_t bytes) const {
  if (!quotas_ || bytes == 0) return OkStatus();
  return SetDirLimit(dir, bytes);
}

Status OverlayFiles::RemoveDir(const std::string& dir) const {
  return quotas_ ? RemoveLimitedDir(dir) : fs::RemoveTree(dir);
}

}  // namespace sbx::runtime
