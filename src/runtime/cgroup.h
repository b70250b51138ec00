// CgroupDir: one sandbox's cgroup, on cgroup v1 (one directory per controller: memory, cpu,
// pids, freezer) or on the unified v2 hierarchy. Kill() then Remove() tears it down.
// Any thread; an instance is used by one thread at a time.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "base/result.h"

namespace sbx::runtime {

enum class CgroupMode { kV1, kV2, kNone };

// What this host offers (read once).
CgroupMode DetectCgroupMode(const std::string& root = "/sys/fs/cgroup");

// Moving a process into a cgroup (each new sandbox's init) takes the kernel's cgroup
// threadgroup lock for writing, which waits for an RCU grace period unless the lock is
// kept in its slow mode: about 10 ms on a virtual machine. A cgroup v1 hierarchy mounted
// with `favordynmods` keeps it so for the whole host (forks and exits pay a little more).
// Mounts a named v1 hierarchy with that option at `dir` (kept mounted; done again only if
// it is not). Errors mean the host keeps the default.
Status FavorDynamicCgroups(const std::string& dir);

struct CgroupLimits {
  int cpus = 0;                // 0: no limit
  uint64_t memory_bytes = 0;   // 0: no limit
  int pids = 0;                // 0: no limit
};

class CgroupDir {
 public:
  // `group` is a relative path below each hierarchy's root, e.g. "sbx-<inst>/<id>".
  CgroupDir(CgroupMode mode, std::string group, std::string root = "/sys/fs/cgroup");

  Status Create(const CgroupLimits& limits);
  // Writes the limits of an existing group.
  Status SetLimits(const CgroupLimits& limits);
  Status AddProcess(pid_t pid);
  // PIDs of every process in the group.
  std::vector<pid_t> Pids() const;
  // SIGKILLs every process until the group is empty (freezing first, so a fork bomb
  // cannot outrun it).
  Status Kill();
  // Freezes every process of the group and waits until they are frozen; Thaw undoes it.
  Status Freeze();
  Status Thaw();
  // Removes the directories (the group must be empty).
  Status Remove();
  bool Exists() const;
  // Peak and current memory in bytes (0 if unknown).
  uint64_t MemoryCurrent() const;
  // Anonymous and shared (tmpfs) memory in bytes: what a checkpoint saves.
  uint64_t AnonymousMemory() const;
  // CPU time used by the group's processes so far, in nanoseconds (0 if unknown).
  uint64_t CpuUsageNs() const;
  const std::string& group() const { return group_; }
  // The folder of the freezer (v1's freezer hierarchy, or the v2 group): CRIU's
  // --freeze-cgroup.
  std::string FreezerDir() const { return Dir(mode_ == CgroupMode::kV1 ? "freezer" : ""); }

 private:
  std::vector<std::string> Dirs() const;
  std::string Dir(const char* controller) const;
  CgroupMode mode_;
  std::string group_;
  std::string root_;
};

// The groups directly below `parent` (relative), in any hierarchy that has them.
std::vector<std::string> ListCgroupChildren(CgroupMode mode, const std::string& parent,
                                            const std::string& root = "/sys/fs/cgroup");

// The sandbox whose cgroup holds the peer process of the unix socket `fd`: the path
// component after `mark` ("/sbx-<instance>/") in its cgroups, which must agree in every
// hierarchy. Read while a pidfd pins the peer, so that a reused pid cannot pass for it.
std::optional<std::string> GroupOfPeer(int fd, const std::string& mark);

}  // namespace sbx::runtime
