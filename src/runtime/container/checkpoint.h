// The container wall's checkpoints, with CRIU: a hibernate saves the sandbox's whole
// process tree into a folder it owns (CRIU's images, `host-binds`: the sources of the
// external mounts, and last `complete`), and a restore makes the tree again in the
// sandbox's cgroup. Also the pieces the container runtime's files share. Internal to
// src/runtime/container.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "base/reaper.h"
#include "base/result.h"
#include "runtime/cgroup.h"
#include "runtime/runtime.h"

namespace sbx::runtime {

class NsOwners;

// The cgroup (below each hierarchy's root) of the sandbox `id`.
inline std::string CgroupName(const ContainerOptions& o, const std::string& id) {
  return "sbx-" + o.instance + "/" + id;
}
// The sandbox's layers as paths relative to its folder, topmost first.
std::vector<std::string> RelativeLayers(const StartSpec& spec);
// How sbxd reaches the agent whose init is `pid`.
Result<agent::DialerPtr> AgentOf(pid_t pid);
// The sandbox's kernel files in `dir`/kernel: each start is a new boot, with a new boot id.
Status WriteKernelFiles(const std::string& dir);
// Kernel files that a sandbox sees in place of the host's: their name in the sandbox's
// `kernel` folder, and their path inside.
extern const std::pair<const char*, const char*> kKernelFiles[2];

class Checkpointer {
 public:
  Checkpointer(const ContainerOptions* o, CgroupMode mode, NsOwners* owners) : o_(*o), mode_(mode), owners_(owners) {}
  // The sandbox must be running (its init alive).
  Status Hibernate(const StartSpec& spec, const Instance& inst, const std::string& images);
  bool HasCheckpoint(const std::string& dir);
  Status DropCheckpoint(const std::string& dir);
  Result<Instance> Restore(const StartSpec& spec, const std::string& images);

  // A memory template's save: the running sandbox's process tree into `memory` (CRIU's
  // images; `mounts`, the external mounts by their place inside; `network` if it had a
  // link), and it runs on. An established TCP connection, or anything else CRIU cannot
  // save, is a refusal (kFailedPrecondition) with CRIU's reason. The sandbox is frozen
  // (the caller froze it, and captures its files before it thaws): CRIU dumps the frozen
  // tasks and leaves them so.
  Status SaveRunning(const StartSpec& spec, const Instance& inst, const std::string& memory);
  // A new sandbox from such a save: the processes restored into its own root, cgroup and
  // namespaces, with its own link, addresses and hostname. An error leaves nothing running.
  Result<Instance> RestoreCopy(const StartSpec& spec, const std::string& memory);

 private:
  // A bind of a host file or folder: where it is inside, and its source on the host.
  struct HostBind {
    std::string point, source;
  };
  Result<std::vector<HostBind>> HostBinds(const StartSpec& spec, pid_t pid) const;
  Status RunCriu(std::vector<std::string> args, const std::string& images, const std::string& work,
                 const std::string& log, const std::string& what, uid_t owner,
                 const std::function<Status(pid_t)>& before_exec = nullptr, const RunUts& uts = {});
  // Waits (up to two seconds) until CRIU could restore the tree under `init` (see
  // process_tree.h), thawing a `frozen` sandbox for a moment between looks; then a
  // refusal (kFailedPrecondition) that names the process.
  Status AwaitRestorableTree(const StartSpec& spec, pid_t init, bool frozen);
  Status Dump(const StartSpec& spec, const Instance& inst, const std::string& images, bool leave_running,
              const std::string& frozen_cgroup = "");
  // CRIU's restore of `images` into the sandbox of `spec` (its folder's overlay as the
  // root, its cgroup, its link's pair as eth0), its files in `work`; `mounts`: the
  // --external arguments of the host binds. `criu_ms`: how long CRIU itself ran.
  Result<Instance> RestoreTree(const StartSpec& spec, const std::string& images, const std::string& work,
                               const std::vector<std::string>& mounts, int64_t* criu_ms = nullptr);

  const ContainerOptions& o_;
  CgroupMode mode_;
  NsOwners* owners_;
};

}  // namespace sbx::runtime
