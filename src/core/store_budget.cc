#include "core/store_budget.h"

#include <sys/statvfs.h>

#include <algorithm>
#include <cmath>

namespace sbx::core {
namespace {

// Free megabytes of the file system holding `path` (-1 if unknown).
int64_t FreeMb(const std::string& path) {
  struct statvfs v;
  if (::statvfs(path.c_str(), &v) != 0) return -1;
  return static_cast<int64_t>((static_cast<unsigned __int128>(v.f_bavail) * v.f_frsize) >> 20);
}

}  // namespace

StoreBudget::StoreBudget(std::string path, int64_t size_mb, int64_t min_free_mb, double overcommit)
    : path_(std::move(path)), size_mb_(size_mb), min_free_mb_(min_free_mb), overcommit_(overcommit) {}

int64_t StoreBudget::reserve_mb() const {
  // A fifth: btrfs keeps up to about an eighth of a small store for its metadata, so a
  // sandbox at its quota still leaves room for the others' writes and for checkpoints.
  return enabled() ? std::max<int64_t>(min_free_mb_, size_mb_ / 5) : min_free_mb_;
}

Status StoreBudget::CheckRequest(int64_t disk_mb) const {
  if (enabled() && disk_mb > usable_mb())
    return MakeError(Code::kInvalidArgument, "resources.disk_mb " + std::to_string(disk_mb) +
                                                 " is more than the store can give one sandbox (" +
                                                 std::to_string(usable_mb()) + " MB of " + std::to_string(size_mb_) +
                                                 ", the rest kept free for everyone)");
  return OkStatus();
}

int64_t StoreBudget::Clamp(int64_t disk_mb) const { return enabled() ? std::min(disk_mb, usable_mb()) : disk_mb; }

Status StoreBudget::CheckCommit(int64_t committed_mb, int64_t add_mb) const {
  if (!enabled() || overcommit_ <= 0 || add_mb <= 0) return OkStatus();
  auto line = static_cast<int64_t>(std::floor(overcommit_ * static_cast<double>(usable_mb())));
  if (committed_mb + add_mb > line)
    return MakeError(Code::kResourceExhausted,
                     "the store is committed: sandboxes' disks hold " + std::to_string(committed_mb) + " MB of " +
                         std::to_string(line) + " (the store's usable " + std::to_string(usable_mb()) +
                         " MB times the overcommit ratio), this one needs " + std::to_string(add_mb));
  return OkStatus();
}

Status StoreBudget::CheckWrite(const std::string& dir, uint64_t bytes) const {
  int64_t free_mb = FreeMb(dir);
  if (free_mb < 0) return OkStatus();  // unknown: the write itself will tell
  auto need_mb = static_cast<int64_t>((bytes + (1 << 20) - 1) >> 20);
  if (free_mb - need_mb < reserve_mb())
    return MakeError(Code::kUnavailable, "not enough free space for it: about " + std::to_string(need_mb) +
                                             " MB needed, " + std::to_string(free_mb) + " MB free, " +
                                             std::to_string(reserve_mb()) + " MB kept in reserve");
  return OkStatus();
}

StoreStats StoreBudget::Stats(int64_t committed_mb) const {
  StoreStats s;
  s.size_mb = size_mb_;
  s.free_mb = std::max<int64_t>(0, FreeMb(path_));
  s.reserve_mb = reserve_mb();
  s.committed_mb = committed_mb;
  s.overcommit = overcommit_;
  return s;
}

}  // namespace sbx::core
