// Host-side helpers of the microVM wall: the uids QEMU and the relay run as (one per live
// VM), a link's addresses and MAC as the guest's config spells them, and what a VM that
// did not come up left in its logs. Any thread.
#pragma once

#include <sys/types.h>

#include <array>
#include <functional>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "base/result.h"
#include "base/unique_fd.h"
#include "runtime/runtime.h"

namespace sbx::runtime::microvm {

std::string Ipv4(uint32_t host_order);
std::string Ipv6(const std::array<uint8_t, 16>& a);
// A MAC of the locally administered range, from the sandbox's address.
std::string MacOf(const NetLink& l);
// The last `n` bytes of a file, without trailing newlines ("" if unreadable).
std::string Tail(const std::string& path, size_t n = 800);
// The last words of a VM that did not come up (its folder `vm`): QEMU's, and the guest's
// console.
std::string WhatItSaid(const std::string& vm);

// The QEMU that `sbx-agent --vm-launch` started in the VM's folder `vm`: its pid (from its
// pid file, which QEMU writes as it starts) and a pidfd. `pids` lists the processes of the
// sandbox's cgroup: the pid file is QEMU's user's to write, so only one of those counts.
Result<std::pair<pid_t, UniqueFd>> WaitForQemu(const std::string& vm, const std::function<std::vector<pid_t>()>& pids);

// Whether VMs reach their agent over vsock, for sbxd's --microvm-channel (auto: where
// `vhost_vsock`, the host's /dev/vhost-vsock, opens; vsock: it must; serial: never).
Result<bool> UseVsock(const std::string& channel, const std::string& vhost_vsock);

// Hands out the uids QEMU and the relay run as, one per live sandbox, so that no VM's
// processes can signal or trace another's.
class VmUids {
 public:
  VmUids(uid_t base, uid_t count) : base_(base), count_(count) {}
  Result<uid_t> Take(const std::string& id) {
    std::lock_guard<std::mutex> l(mu_);
    if (auto it = taken_.find(id); it != taken_.end()) return it->second;
    for (uid_t i = 0; i < count_; ++i) {
      uid_t u = base_ + (next_ + i) % count_;
      if (in_use_.count(u)) continue;
      next_ = (next_ + i + 1) % count_;
      taken_[id] = u;
      in_use_.insert(u);
      return u;
    }
    return MakeError(Code::kResourceExhausted, "every microVM uid is in use");
  }
  void Note(const std::string& id, uid_t u) {
    std::lock_guard<std::mutex> l(mu_);
    taken_[id] = u;
    in_use_.insert(u);
  }
  void Release(const std::string& id) {
    std::lock_guard<std::mutex> l(mu_);
    if (auto it = taken_.find(id); it != taken_.end()) {
      in_use_.erase(it->second);
      taken_.erase(it);
    }
  }

 private:
  uid_t base_, count_;
  std::mutex mu_;
  std::map<std::string, uid_t> taken_;
  std::set<uid_t> in_use_;
  uid_t next_ = 0;
};

}  // namespace sbx::runtime::microvm
