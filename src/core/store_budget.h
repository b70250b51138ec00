// The space of the store (the btrfs file system that holds sandboxes' files, layers and
// checkpoints) as sandboxes commit it. A sandbox's disk_mb is a quota, not a reservation:
// by default the sum of quotas may exceed the store, but no single sandbox may take more
// than the store less its reserve, so one sandbox filling its quota leaves room for the
// others. With an overcommit ratio, the sum of quotas is held to that many times the
// usable size (1.0: every quota can be filled at once). Sizes in MB. Any thread.
#pragma once

#include <cstdint>
#include <string>

#include "base/result.h"

namespace sbx::core {

struct StoreStats {
  int64_t size_mb = 0;
  int64_t free_mb = 0;
  int64_t reserve_mb = 0;
  int64_t committed_mb = 0;  // the sum of every sandbox's disk_mb
  double overcommit = 0;     // 0: not held
};

class StoreBudget {
 public:
  StoreBudget() = default;
  // `path`: where the store is mounted (empty: no store, and only checkpoint writes are
  // checked, against their own file system).
  StoreBudget(std::string path, int64_t size_mb, int64_t min_free_mb, double overcommit);
  bool enabled() const { return !path_.empty() && size_mb_ > 0; }
  // Kept free for everyone: the larger of min_free_mb and a fifth of the store.
  int64_t reserve_mb() const;
  // The most one sandbox may have.
  int64_t usable_mb() const { return size_mb_ - reserve_mb(); }
  // An explicit resources.disk_mb: more than the store can give is the caller's error.
  Status CheckRequest(int64_t disk_mb) const;
  // A default disk_mb (a type's) brought within what the store can give.
  int64_t Clamp(int64_t disk_mb) const;
  // Whether `add_mb` more of quota may be committed on top of `committed_mb`.
  Status CheckCommit(int64_t committed_mb, int64_t add_mb) const;
  // Whether `bytes` can be written under `dir` and still leave the reserve free.
  Status CheckWrite(const std::string& dir, uint64_t bytes) const;
  StoreStats Stats(int64_t committed_mb) const;

 private:
  std::string path_;
  int64_t size_mb_ = 0;
  int64_t min_free_mb_ = 64;
  double overcommit_ = 0;
};

}  // namespace sbx::core
