// The runtimes of this sbxd by isolation kind (the API's "container", "gvisor",
// "microvm"). Built once at start, read-only after: any thread. It does not own them.
#pragma once

#include <map>
#include <string>

#include "runtime/runtime.h"

namespace sbx::runtime {

class Registry {
 public:
  // The first runtime added also holds the layers that captures make (snapshots and
  // forks are of its format).
  void Add(const std::string& kind, Runtime* rt);
  Runtime* Find(const std::string& kind) const;  // null if this sbxd has none
  Runtime* layers() const { return layers_; }
  const std::map<std::string, Runtime*>& all() const { return by_kind_; }

 private:
  std::map<std::string, Runtime*> by_kind_;
  Runtime* layers_ = nullptr;
};

}  // namespace sbx::runtime
