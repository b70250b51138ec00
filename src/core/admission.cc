#include "core/admission.h"

#include <sys/statvfs.h>

#include <algorithm>
#include <climits>

namespace sbx::core {

Status Admission::CheckDataDirSpace() const {
  struct statvfs v;
  if (::statvfs(data_dir_.c_str(), &v) != 0) return OkStatus();  // unknown: let the write tell
  int64_t free_mb = static_cast<int64_t>((static_cast<unsigned __int128>(v.f_bavail) * v.f_frsize) >> 20);
  int64_t free_inodes = v.f_files ? static_cast<int64_t>(v.f_favail) : INT64_MAX;
  if (free_mb < min_free_mb_ || free_inodes < 1024)
    return MakeError(Code::kUnavailable, "sbxd's data dir is full (" + std::to_string(free_mb) + " MB free, " +
                                             std::to_string(min_free_mb_) +
                                             " MB kept in reserve); free space and try again");
  return OkStatus();
}

int64_t Admission::CommittedDiskMb(const SandboxTable& table) {
  int64_t sum = 0;
  for (const auto& [_, e] : table.live()) sum += e->rec.disk_mb;
  return sum;
}

int64_t Admission::DiskMbFor(const CreateRequest& req, const SandboxType& type) const {
  return budget_.Clamp(std::min<int64_t>(req.disk_mb.value_or(type.disk_mb), type.disk_mb));
}

Status Admission::CheckQuota(const SandboxTable& table, int add, int64_t memory_mb, int64_t disk_mb) const {
  SBX_RETURN_IF_ERROR(budget_.CheckCommit(CommittedDiskMb(table), disk_mb));
  const Quotas& q = quotas_;
  if (!q.max_sandboxes && !q.max_memory_mb && !q.max_disk_mb) return OkStatus();
  int live = 0;
  int64_t mem = 0, disk = 0;
  for (const auto& [_, e] : table.live()) {
    const auto& r = e->rec;
    disk += r.disk_mb;
    // Frozen: memory held. Hibernated: its memory is on disk, it holds none.
    if (e->is(State::kCreating) || e->is(State::kRunning) ||
        (e->is(State::kPaused) && r.pause_mode != "hibernate")) {
      ++live;
      mem += r.memory_mb;
    }
  }
  if (q.max_sandboxes && live + add > q.max_sandboxes)
    return MakeError(Code::kResourceExhausted, "quota exceeded: at most " + std::to_string(q.max_sandboxes) +
                                                   " live sandboxes (" + std::to_string(live) + " now)");
  if (q.max_memory_mb && mem + memory_mb > q.max_memory_mb)
    return MakeError(Code::kResourceExhausted,
                     "quota exceeded: " + std::to_string(mem) + " MB of memory held of " +
                         std::to_string(q.max_memory_mb) + ", this one needs " + std::to_string(memory_mb));
  if (q.max_disk_mb && disk_mb > 0 && disk + disk_mb > q.max_disk_mb)
    return MakeError(Code::kResourceExhausted,
                     "quota exceeded: " + std::to_string(disk) + " MB of disk held of " +
                         std::to_string(q.max_disk_mb) + ", this one needs " + std::to_string(disk_mb));
  return OkStatus();
}

}  // namespace sbx::core
