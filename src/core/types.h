// Sandbox types (small, default, large): resources and prices. Immutable after start-up;
// any thread may read.
#pragma once

#include <map>
#include <string>

#include "base/result.h"

namespace sbx::core {

struct SandboxType {
  std::string name;
  int cpus = 0;
  int64_t memory_mb = 0;
  int64_t disk_mb = 0;
  int pids = 0;
  double usd_per_hour = 0;
  int network_mbps = 0;  // each way, through the sandbox's link (0: no limit)
};

class TypeTable {
 public:
  // The SPEC's defaults.
  static TypeTable Defaults();
  Result<SandboxType> Find(const std::string& name) const;
  void Put(const SandboxType& t) { types_[t.name] = t; }
  const std::map<std::string, SandboxType>& all() const { return types_; }

 private:
  std::map<std::string, SandboxType> types_;
};

// Cost of `ms` milliseconds at `usd_per_hour`.
double CostUsd(int64_t ms, double usd_per_hour);

}  // namespace sbx::core
