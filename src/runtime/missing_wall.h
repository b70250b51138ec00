// The wall of an isolation kind this sbxd does not have (a row from a daemon started with
// it, say with --runsc, now started without): every operation is refused, naming the
// kind, rather than done by another wall. Any thread.
#pragma once

#include <string>

#include "runtime/runtime.h"

namespace sbx::runtime {

class MissingWall : public Runtime {
 public:
  explicit MissingWall(std::string kind) : kind_(std::move(kind)) {}
  std::string Kind() const override { return kind_; }
  Capabilities Caps() const override { return {}; }
  Status Prepare(const StartSpec&) override { return Refused(); }
  Result<Instance> Start(const StartSpec&) override { return Refused(); }
  Status Stop(const std::string&, const Instance&) override { return Refused(); }
  Status UpdateLimits(const std::string&, const Limits&) override { return Refused(); }
  Status SetDiskLimit(const std::string&, uint64_t) override { return Refused(); }
  bool HasFiles(const std::string&) override { return false; }
  Result<Captured> CaptureFiles(const std::string&, const std::string&) override { return Refused(); }
  Status RemoveLayer(const std::string&) override { return Refused(); }
  Status DropCheckpoint(const std::string&) override { return Refused(); }
  Status Freeze(const std::string&) override { return Refused(); }
  Status Thaw(const std::string&) override { return Refused(); }
  Status Destroy(const std::string&, const std::string&) override { return Refused(); }
  Result<Instance> Adopt(const StartSpec&, const std::string&, bool) override { return Refused(); }
  uint64_t CpuUsageNs(const std::string&, const Instance&) override { return 0; }
  std::vector<std::string> ListKernelObjects() override { return {}; }
  bool Alive(const Instance&) override { return false; }

 private:
  Error Refused() const {
    return MakeError(Code::kFailedPrecondition, "this sbxd has no " + kind_ +
                                                    " isolation (start it with that wall to use or delete its "
                                                    "sandboxes: they are kept as they are)");
  }
  std::string kind_;
};

}  // namespace sbx::runtime
