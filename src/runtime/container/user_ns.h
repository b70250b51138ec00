// The per-user kernel budgets of a container sandbox: who owns its user namespace (the
// kernel charges inotify instances and watches, message-queue bytes, pending signals and
// namespaces of everything inside to that owner, at the host level), and the per-process
// limits its init starts with.
#pragma once

#include <sys/resource.h>
#include <sys/types.h>

#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "base/result.h"
#include "runtime/runtime.h"

namespace sbx::runtime {

// Hands out owner uids from [base, base + count), one per live sandbox.
class NsOwners {
 public:
  NsOwners(uid_t base, uid_t count) : base_(base), count_(count) {}
  bool enabled() const { return base_ != 0; }
  // A uid that no other live sandbox owns; the same one while `id` holds it.
  Result<uid_t> Take(const std::string& id);
  // Records the owner of an adopted sandbox's namespace (read from the kernel).
  void Note(const std::string& id, pid_t init);
  void Release(const std::string& id);

 private:
  uid_t base_, count_;
  std::mutex mu_;
  std::map<std::string, uid_t> taken_;
  std::set<uid_t> in_use_;  // the values of taken_
  uid_t next_ = 0;
};

// The host uid that owns the user namespace of `pid`.
Result<uid_t> UserNsOwner(pid_t pid);

// Switches the calling thread alone (not the process) to effective uid `owner`, so that a
// user namespace it creates is owned by `owner`; the destructor switches it back to root.
class OwnerScope {
 public:
  explicit OwnerScope(uid_t owner);
  ~OwnerScope();
  Status status() const { return st_; }

 private:
  bool switched_ = false;
  Status st_ = OkStatus();
};

// The per-process limits of a sandbox's init (its processes inherit them), which it sets
// on itself before it runs anything.
struct SandboxRlimit {
  __rlimit_resource resource;
  struct rlimit value;
};
std::vector<SandboxRlimit> SandboxRlimits(const ContainerOptions& o);

}  // namespace sbx::runtime
