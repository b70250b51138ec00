// CRIU for the container wall: hibernate (a checkpoint of the sandbox's process tree)
// and restore. See checkpoint.h.
#include "runtime/container/checkpoint.h"

#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <sstream>

#include "agent/protocol.h"
#include "base/fs.h"
#include "base/proc.h"
#include "base/reaper.h"
#include "base/scope_exit.h"
#include "runtime/container/user_ns.h"
#include "runtime/netlink.h"
#include "runtime/process_handle.h"

namespace sbx::runtime {

// The mounts of a running sandbox that are binds of host files or folders, each with
// its host source: device nodes and the masks made of /dev/null (devtmpfs), the API
// folder, disks. CRIU takes them as external mounts; everything else (the root, proc,
// sysfs, tmpfs, devpts) it saves and makes anew.
Result<std::vector<std::pair<std::string, std::string>>> Checkpointer::HostBinds(const StartSpec& spec, pid_t pid) const {
  SBX_ASSIGN_OR_RETURN(std::string mounts, fs::ReadFile("/proc/" + std::to_string(pid) + "/mountinfo"));
  std::vector<std::pair<std::string, std::string>> out;
  std::istringstream in(mounts);
  for (std::string line; std::getline(in, line);) {
    std::istringstream f(line);
    std::string id, parent, dev, root, point, word, type;
    f >> id >> parent >> dev >> root >> point;
    while (f >> word && word != "-") {
    }
    f >> type;
    if (type == "devtmpfs") {
      out.emplace_back(point, "/dev" + root);  // the host's devtmpfs is its /dev
    } else if (point == "/run/sbx" && !o_.api_dir.empty()) {
      out.emplace_back(point, o_.api_dir);
    } else {
      for (const auto& [name, target] : kKernelFiles)
        if (point == target) out.emplace_back(point, spec.dir + "/kernel/" + name);
      for (const auto& b : spec.binds)
        if (b.target == point) out.emplace_back(point, b.source);
    }
  }
  return out;
}

// Runs CRIU; on failure, the error lines of its log.
// It runs as the owner of the sandbox's user namespace (`owner`): so it holds every
// capability there without CAP_SYS_RESOURCE on the host, and the namespace a restore
// makes has that owner again.
Status Checkpointer::RunCriu(std::vector<std::string> args, const std::string& images, const std::string& log,
               const std::string& what, uid_t owner, const std::function<Status(pid_t)>& before_exec) {
  args.insert(args.begin(), o_.criu);
  args.insert(args.end(), {"-D", images, "--log-file", log, "-v2"});
  // CRIU refuses a non-zero effective uid unless told; it then checks the capabilities
  // it holds, which are sbxd's.
  if (owner != 0) args.emplace_back("--unprivileged");
  auto r = Reaper::Get().Run(args, "", owner, before_exec);
  if (!r.ok()) return r.error().Wrap(what);
  if (r->exit_code == 0) return OkStatus();
  std::string msg;
  auto text = fs::ReadFile(images + "/" + log, 1 << 20);
  if (text.ok()) {
    std::istringstream in(*text);
    for (std::string line; std::getline(in, line);) {
      // Harmless here: sbxd may not raise its own RLIMIT_NOFILE.
      if (line.find("Error") == std::string::npos || line.find("RLIMIT_NOFILE") != std::string::npos) continue;
      size_t at = line.find("): ");
      msg += (msg.empty() ? "" : "; ") + (at == std::string::npos ? line : line.substr(at + 3));
      if (msg.size() > 600) break;
    }
  }
  if (msg.empty()) msg = r->output.substr(0, 600);
  return MakeError(Code::kInternal, what + " failed (CRIU exit " + std::to_string(r->exit_code) + "): " + msg);
}

// The checkpoint folder: CRIU's images, `host-binds` (the sources of the external
// mounts) and, last, `complete`. A failed attempt's log stays at `<dir>.failed.log`.
Status Checkpointer::Hibernate(const StartSpec& spec, const Instance& inst, const std::string& images) {
  (void)DropCheckpoint(images);  // what an earlier attempt left
  Status st = Dump(spec, inst, images);
  // The mark of a whole checkpoint: a restart after a crash from here on finds the
  // sandbox hibernated, even before its row says so.
  if (st.ok()) st = fs::WriteFileAtomic(images + "/complete", "");
  if (!st.ok()) {
    ::rename((images + "/dump.log").c_str(), (images + ".failed.log").c_str());
    (void)fs::RemoveTree(images);
  }
  return st;
}

bool Checkpointer::HasCheckpoint(const std::string& dir) { return fs::Exists(dir + "/complete"); }
Status Checkpointer::DropCheckpoint(const std::string& dir) {
  ::unlink((dir + ".failed.log").c_str());
  return fs::RemoveTree(dir);
}

Status Checkpointer::Dump(const StartSpec& spec, const Instance& inst, const std::string& images) {
  const ProcessHandle& init = *ProcessOf(inst);
  // It holds the sandbox's memory: owned by host root, readable by the sandbox's root
  // group, closed to everyone else. CRIU reads images from tasks it is turning into the
  // sandbox's: some still have host root's ids without its privileges (the owner),
  // others already the sandbox's (the group); neither may change what is saved.
  SBX_RETURN_IF_ERROR(fs::MkdirAll(images.substr(0, images.rfind('/')), 0711));
  if (::mkdir(images.c_str(), 0750) != 0 && errno != EEXIST) return ErrnoError("mkdir " + images);
  if (::chown(images.c_str(), 0, o_.uid_base) != 0 || ::chmod(images.c_str(), 0750) != 0)
    return ErrnoError("chown " + images);
  SBX_ASSIGN_OR_RETURN(auto binds, HostBinds(spec, init.pid));
  std::vector<std::string> args = {"dump", "-t", std::to_string(init.pid), "--tcp-established", "--file-locks"};
  // The restore binds the same sources again: they are kept beside the images.
  std::string table;
  for (size_t i = 0; i < binds.size(); ++i) {
    args.push_back("--external=mnt[" + binds[i].first + "]:sbx" + std::to_string(i));
    table += "sbx" + std::to_string(i) + "\t" + binds[i].second + "\n";
  }
  SBX_RETURN_IF_ERROR(fs::WriteFileAtomic(images + "/host-binds", table, 0600));
  SBX_ASSIGN_OR_RETURN(uid_t owner, UserNsOwner(init.pid));
  SBX_RETURN_IF_ERROR(RunCriu(args, images, "dump.log", "checkpointing the sandbox", owner));
  // CRIU ended the processes once they were saved.
  if (init.pidfd.valid()) proc::PidfdWait(init.pidfd.get(), 10000);
  owners_->Release(spec.id);
  return OkStatus();
}

Result<Instance> Checkpointer::Restore(const StartSpec& spec, const std::string& images) {
  CgroupDir cg(mode_, CgroupName(o_, spec.id), o_.cgroup_root);
  SBX_RETURN_IF_ERROR(cg.Create({spec.limits.cpus, spec.limits.memory_bytes, spec.limits.pids}));
  // The root the processes had: the same overlay (layer paths relative to the sandbox's
  // folder, as the agent mounted it), mounted here for CRIU to make it the root of the
  // restored mount namespace; this side goes once they run.
  std::string lower;
  for (const auto& l : RelativeLayers(spec)) lower += (lower.empty() ? "" : ":") + l;
  std::string root = spec.dir + "/root";
  ::umount2(root.c_str(), MNT_DETACH);  // left by a restore that sbxd died in
  auto m = Reaper::Get().Run({"mount", "-t", "overlay", "overlay", "-o",
                              "nosuid,nodev,lowerdir=" + lower + ",upperdir=upper,workdir=work,userxattr", "root"},
                             spec.dir);
  if (!m.ok()) return m.error().Wrap("mount the sandbox's root");
  if (m->exit_code != 0) return MakeError(Code::kInternal, "mount the sandbox's root: " + m->output);
  ScopeExit unmount([&] { ::umount2(root.c_str(), MNT_DETACH); });
  std::string pidfile = images + "/restored.pid";
  ::unlink(pidfile.c_str());
  std::vector<std::string> args = {"restore", "-d", "--root", root, "--pidfile", pidfile, "--tcp-established",
                                   "--file-locks"};
  SBX_ASSIGN_OR_RETURN(std::string table, fs::ReadFile(images + "/host-binds"));
  std::istringstream rows(table);
  for (std::string key, source; std::getline(rows, key, '\t') && std::getline(rows, source);)
    args.push_back("--external=mnt[" + key + "]:" + source);
  // The link: sbxd makes the pair on the host; CRIU moves its inner end into the restored
  // namespace as eth0 (with the addresses and routes it had); sbxd addresses the host's end.
  const std::string peer = spec.link ? spec.link->host_if + "p" : "";
  if (spec.link) {
    SBX_RETURN_IF_ERROR(netlink::CreateHostPair(*spec.link, peer));
    args.push_back("--external=netdev[eth0]:" + peer);
  }
  // As root: CRIU restores the UTS namespace's host name through /proc/sys, which the
  // kernel opens for writing to uid 0 only. So the restored user namespace is owned by
  // root, and the sandbox shares host root's per-user budgets until it is stopped and
  // started again (docs/design.md).
  // CRIU runs in the sandbox's cgroup, so the processes it makes are there from their
  // first page on (a checkpoint that CRIU took as the namespace's owner records no
  // cgroups to restore).
  Status restored = RunCriu(args, images, "restore.log", "restoring the sandbox", 0,
                            [&](pid_t criu) { return cg.AddProcess(criu); });
  if (!restored.ok()) {
    if (spec.link) (void)netlink::DeleteLink(spec.link->host_if);
    return restored.error();
  }
  auto fail = [&](Error e) -> Result<Instance> {
    (void)cg.Kill();
    if (spec.link) (void)netlink::DeleteLink(spec.link->host_if);
    return e.Wrap("restoring sandbox " + spec.id);
  };
  auto text = fs::ReadFile(pidfile);
  if (!text.ok()) return fail(text.error());
  pid_t pid = static_cast<pid_t>(std::atol(text->c_str()));
  if (pid <= 0) return fail(MakeError(Code::kInternal, "CRIU wrote no pid"));
  auto pidfd = proc::PidfdOpen(pid);
  if (!pidfd.ok()) return fail(pidfd.error());
  Instance inst;
  SetProcess(&inst, pid, std::move(*pidfd));
  auto addr = AgentOf(pid);
  if (!addr.ok()) return fail(addr.error());
  inst.agent = *addr;
  if (spec.link)
    if (auto st = netlink::ConfigureHostEnd(*spec.link); !st.ok()) return fail(st.error());
  if (auto st = agent::PingBlocking(*inst.agent, 5000); !st.ok()) return fail(st.error());
  return inst;
}

}  // namespace sbx::runtime
