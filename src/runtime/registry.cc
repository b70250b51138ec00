#include "runtime/registry.h"

namespace sbx::runtime {

void Registry::Add(const std::string& kind, Runtime* rt) {
  by_kind_[kind] = rt;
  if (!layers_) layers_ = rt;
}

Runtime& Registry::Of(const std::string& kind) const {
  if (Runtime* rt = Find(kind)) return *rt;
  std::lock_guard<std::mutex> lock(missing_->mu);
  auto& wall = missing_->by_kind[kind];
  if (!wall) wall = std::make_unique<MissingWall>(kind);
  return *wall;
}

Runtime* Registry::Find(const std::string& kind) const {
  auto it = by_kind_.find(kind);
  return it == by_kind_.end() ? nullptr : it->second;
}

}  // namespace sbx::runtime
