#include "runtime/container/user_ns.h"

#include <fcntl.h>
#include <linux/nsfs.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "base/unique_fd.h"

namespace sbx::runtime {

Result<uid_t> NsOwners::Take(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = taken_.find(id); it != taken_.end()) return it->second;
  for (uid_t i = 0; i < count_; ++i) {
    uid_t u = base_ + (next_++ % count_);
    if (!in_use_.insert(u).second) continue;
    taken_[id] = u;
    return u;
  }
  return MakeError(Code::kResourceExhausted, "every namespace owner uid is in use (" + std::to_string(count_) +
                                                 " live sandboxes)");
}

void NsOwners::Note(const std::string& id, pid_t init) {
  auto u = UserNsOwner(init);
  if (!u.ok() || *u < base_ || *u - base_ >= count_) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = taken_.find(id); it != taken_.end()) in_use_.erase(it->second);
  taken_[id] = *u;
  in_use_.insert(*u);
}

void NsOwners::Release(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = taken_.find(id);
  if (it == taken_.end()) return;
  in_use_.erase(it->second);
  taken_.erase(it);
}

Result<uid_t> UserNsOwner(pid_t pid) {
  UniqueFd fd(::open(("/proc/" + std::to_string(pid) + "/ns/user").c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return ErrnoError("open the user namespace of " + std::to_string(pid));
  uid_t u = 0;
  if (::ioctl(fd.get(), NS_GET_OWNER_UID, &u) != 0) return ErrnoError("NS_GET_OWNER_UID");
  return u;
}

// The raw system call: glibc's setresuid would change every thread of sbxd.
OwnerScope::OwnerScope(uid_t owner) {
  if (owner == 0) return;
  if (::syscall(SYS_setresuid, -1, owner, -1) != 0) {
    st_ = ErrnoError("switch to the namespace owner uid " + std::to_string(owner));
    return;
  }
  switched_ = true;
}

OwnerScope::~OwnerScope() {
  // Back to root: allowed because the real and saved uids stayed 0. A thread that stayed
  // unprivileged would break sbxd in ways it cannot see, so failing here is fatal.
  if (switched_ && ::syscall(SYS_setresuid, -1, 0, -1) != 0) std::abort();
}

std::vector<SandboxRlimit> SandboxRlimits(const ContainerOptions& o) {
  rlim_t files = o.max_open_files;
  return {{RLIMIT_NOFILE, {std::min<rlim_t>(files, 1024), files}},
          {RLIMIT_SIGPENDING, {o.max_pending_signals, o.max_pending_signals}},
          {RLIMIT_MSGQUEUE, {o.max_msgqueue_bytes, o.max_msgqueue_bytes}}};
}

}  // namespace sbx::runtime
