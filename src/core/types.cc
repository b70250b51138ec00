#include "core/types.h"

namespace sbx::core {

TypeTable TypeTable::Defaults() {
  TypeTable t;
  t.Put({"small", 2, 4096, 10240, 1024, 0.018, 1000});
  t.Put({"default", 4, 8192, 20480, 2048, 0.036, 2500});
  t.Put({"large", 8, 16384, 40960, 4096, 0.072, 10000});
  return t;
}

Result<SandboxType> TypeTable::Find(const std::string& name) const {
  auto it = types_.find(name);
  if (it == types_.end()) {
    std::string names;
    for (const auto& [n, _] : types_) names += (names.empty() ? "" : ", ") + n;
    return MakeError(Code::kInvalidArgument, "unknown type \"" + name + "\" (known: " + names + ")");
  }
  return it->second;
}

double CostUsd(int64_t ms, double usd_per_hour) {
  return static_cast<double>(ms) / 3600000.0 * usd_per_hour;
}

}  // namespace sbx::core
