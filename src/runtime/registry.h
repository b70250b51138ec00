// The runtimes of this sbxd by isolation kind (the API's "container", "gvisor",
// "microvm"). Built once at start, read-only after: any thread. It does not own them.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "runtime/missing_wall.h"
#include "runtime/runtime.h"

namespace sbx::runtime {

class Registry {
 public:
  // The first runtime added also holds the layers that captures make (snapshots and
  // forks are of its format).
  void Add(const std::string& kind, Runtime* rt);
  Runtime* Find(const std::string& kind) const;  // null if this sbxd has none
  // The runtime of `kind`, or one that refuses every operation naming it (MissingWall):
  // never another kind's.
  Runtime& Of(const std::string& kind) const;
  Runtime* layers() const { return layers_; }
  const std::map<std::string, Runtime*>& all() const { return by_kind_; }

 private:
  std::map<std::string, Runtime*> by_kind_;
  Runtime* layers_ = nullptr;
  // Made on first ask, kept (held apart, so that a Registry stays movable).
  struct Missing {
    std::mutex mu;
    std::map<std::string, std::unique_ptr<MissingWall>> by_kind;
  };
  std::shared_ptr<Missing> missing_ = std::make_shared<Missing>();
};

}  // namespace sbx::runtime
