#include "runtime/registry.h"

namespace sbx::runtime {

void Registry::Add(const std::string& kind, Runtime* rt) {
  by_kind_[kind] = rt;
  if (!layers_) layers_ = rt;
}

Runtime* Registry::Find(const std::string& kind) const {
  auto it = by_kind_.find(kind);
  return it == by_kind_.end() ? nullptr : it->second;
}

}  // namespace sbx::runtime
