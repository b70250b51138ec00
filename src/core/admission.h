// Admission: whether new work fits. The daemon-wide quotas (live sandboxes, memory,
// disk), the store's budget of disk quotas, and the data dir's free space. Reads the
// sandbox table it is given (its lock held); holds no state of its own beyond its limits.
#pragma once

#include <cstdint>
#include <string>

#include "base/result.h"
#include "core/requests.h"
#include "core/sandbox_table.h"
#include "core/store_budget.h"
#include "core/types.h"

namespace sbx::core {

// Limits on what the whole daemon holds (0: no limit). Live sandboxes are those creating,
// running or paused (a frozen sandbox keeps its memory); disk counts every sandbox's disk_mb.
struct Quotas {
  int max_sandboxes = 0;
  int64_t max_memory_mb = 0;
  int64_t max_disk_mb = 0;
};

class Admission {
 public:
  Admission(std::string data_dir, Quotas quotas, int64_t min_free_mb, StoreBudget budget)
      : data_dir_(std::move(data_dir)), quotas_(quotas), min_free_mb_(min_free_mb),
        budget_(std::move(budget)) {}

  // kUnavailable while the data dir's file system has less than min_free_mb free.
  Status CheckDataDirSpace() const;
  // kResourceExhausted if `add` more live sandboxes of this size would pass a quota or the
  // store's budget.
  Status CheckQuota(const SandboxTable& table, int add, int64_t memory_mb, int64_t disk_mb) const
      SBX_REQUIRES(table.mu);
  // An explicit resources.disk_mb larger than the store can give: the caller's error.
  Status CheckDiskRequest(int64_t disk_mb) const { return budget_.CheckRequest(disk_mb); }
  // The disk_mb a new sandbox of `type` gets for `req`.
  int64_t DiskMbFor(const CreateRequest& req, const SandboxType& type) const;
  // Whether a checkpoint of `bytes` fits under `dir` with the reserve still free.
  Status CheckWrite(const std::string& dir, uint64_t bytes) const { return budget_.CheckWrite(dir, bytes); }
  bool has_store() const { return budget_.enabled(); }
  StoreStats StoreUse(const SandboxTable& table) const SBX_REQUIRES(table.mu) {
    return budget_.Stats(CommittedDiskMb(table));
  }

 private:
  static int64_t CommittedDiskMb(const SandboxTable& table) SBX_REQUIRES(table.mu);

  std::string data_dir_;
  Quotas quotas_;
  int64_t min_free_mb_;
  StoreBudget budget_;
};

}  // namespace sbx::core
