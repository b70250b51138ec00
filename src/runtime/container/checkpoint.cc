// CRIU for the container wall: hibernate (a checkpoint of the sandbox's process tree)
// and restore. See checkpoint.h.
#include "runtime/container/checkpoint.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <set>
#include <sstream>
#include <thread>

#include "agent/protocol.h"
#include "base/fault.h"
#include "base/fs.h"
#include "base/log.h"
#include "base/proc.h"
#include "base/reaper.h"
#include "base/scope_exit.h"
#include "base/unique_fd.h"
#include "runtime/container/process_tree.h"
#include "runtime/container/user_ns.h"
#include "runtime/netlink.h"
#include "runtime/process_handle.h"

namespace sbx::runtime {

namespace {

// Names the UTS namespace of `pid` (on a thread of its own: setns changes the calling
// thread only, so sbxd's stay on the host).
Status SetHostname(pid_t pid, const std::string& name) {
  UniqueFd ns(::open(("/proc/" + std::to_string(pid) + "/ns/uts").c_str(), O_RDONLY | O_CLOEXEC));
  if (!ns.valid()) return ErrnoError("open the sandbox's UTS namespace");
  Status result = OkStatus();
  std::thread t([&] {
    if (::setns(ns.get(), CLONE_NEWUTS) != 0)
      result = ErrnoError("enter the sandbox's UTS namespace");
    else if (::sethostname(name.data(), name.size()) != 0)
      result = ErrnoError("set the sandbox's hostname");
  });
  t.join();
  return result;
}

// Whether CRIU's images in `images` hold a UTS namespace (a checkpoint taken before CRIU
// ran in the sandbox's own).
bool HoldsUtsNamespace(const std::string& images) {
  auto names = fs::ListDir(images);
  if (!names.ok()) return false;
  for (const auto& n : *names)
    if (n.rfind("utsns-", 0) == 0) return true;
  return false;
}

}  // namespace

// The mounts of a running sandbox that are binds of host files or folders, each with
// its host source: device nodes and the masks made of /dev/null (devtmpfs), the API
// folder, disks. CRIU takes them as external mounts; everything else (the root, proc,
// sysfs, tmpfs, devpts) it saves and makes anew.
Result<std::vector<Checkpointer::HostBind>> Checkpointer::HostBinds(const StartSpec& spec, pid_t pid) const {
  SBX_ASSIGN_OR_RETURN(std::string mounts, fs::ReadFile("/proc/" + std::to_string(pid) + "/mountinfo"));
  std::vector<HostBind> out;
  std::istringstream in(mounts);
  for (std::string line; std::getline(in, line);) {
    std::istringstream f(line);
    std::string id, parent, dev, root, point, word, type;
    f >> id >> parent >> dev >> root >> point;
    while (f >> word && word != "-") {
    }
    f >> type;
    if (type == "devtmpfs") {
      out.push_back({point, "/dev" + root});  // the host's devtmpfs is its /dev
    } else if (point == "/run/sbx" && !o_.api_dir.empty()) {
      out.push_back({point, o_.api_dir});
    } else {
      for (const auto& [name, target] : kKernelFiles)
        if (point == target) out.push_back({point, spec.dir + "/kernel/" + name});
      for (const auto& b : spec.binds)
        if (b.target == point) out.push_back({point, b.source});
    }
  }
  return out;
}

// Runs CRIU; on failure, the error lines of its log.
// It runs as the owner of the sandbox's user namespace (`owner`): so it holds every
// capability there without CAP_SYS_RESOURCE on the host, and the namespace a restore
// makes has that owner again.
// Its log and pid file go to `work` ("": the images' folder).
Status Checkpointer::RunCriu(std::vector<std::string> args, const std::string& images, const std::string& work,
                             const std::string& log, const std::string& what, uid_t owner,
                             const std::function<Status(pid_t)>& before_exec, const RunUts& uts) {
  args.insert(args.begin(), o_.criu);
  args.insert(args.end(), {"-D", images, "--log-file", log, "-v2"});
  if (!work.empty()) args.insert(args.end(), {"-W", work});
  // CRIU refuses a non-zero effective uid unless told; it then checks the capabilities
  // it holds, which are sbxd's.
  if (owner != 0) args.emplace_back("--unprivileged");
  auto r = Reaper::Get().Run(args, "", owner, before_exec, 0, "", uts);
  if (!r.ok()) return r.error().Wrap(what);
  if (r->exit_code == 0) return OkStatus();
  std::string msg;
  auto text = fs::ReadFile((work.empty() ? images : work) + "/" + log, 1 << 20);
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
  Status st = Dump(spec, inst, images, /*leave_running=*/false);
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

Status Checkpointer::AwaitRestorableTree(const StartSpec& spec, pid_t init, bool frozen) {
  CgroupDir cg(mode_, CgroupName(o_, spec.id), o_.cgroup_root);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (true) {
    auto why = UnrestorableProcess(init);
    if (!why) return OkStatus();
    if (std::chrono::steady_clock::now() >= deadline) return MakeError(Code::kFailedPrecondition, *why);
    if (frozen) SBX_RETURN_IF_ERROR(cg.Thaw());
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    if (frozen) SBX_RETURN_IF_ERROR(cg.Freeze());
  }
}

// `leave_running`: the processes go on after the save (a memory template's), and an
// established TCP connection is a refusal rather than part of it (a copy must not take
// over its source's connections). `frozen_cgroup`: the freezer folder of a sandbox frozen
// before the dump, which CRIU then seizes as it is and leaves frozen.
Status Checkpointer::Dump(const StartSpec& spec, const Instance& inst, const std::string& images, bool leave_running,
                          const std::string& frozen_cgroup) {
  const ProcessHandle& init = *ProcessOf(inst);
  // It holds the sandbox's memory: owned by host root, readable by the sandbox's root
  // group, closed to everyone else. CRIU reads images from tasks it is turning into the
  // sandbox's: some still have host root's ids without its privileges (the owner),
  // others already the sandbox's (the group); neither may change what is saved.
  SBX_RETURN_IF_ERROR(fs::MkdirAll(images.substr(0, images.rfind('/')), 0711));
  if (::mkdir(images.c_str(), 0750) != 0 && errno != EEXIST) return ErrnoError("mkdir " + images);
  if (::chown(images.c_str(), 0, o_.uid_base) != 0 || ::chmod(images.c_str(), 0750) != 0)
    return ErrnoError("chown " + images);
  // What CRIU would save and never restore is refused; the usual such tree is gone in a
  // moment (the handler of a command that has just answered, still holding its orphans).
  if (Status t = AwaitRestorableTree(spec, init.pid, !frozen_cgroup.empty()); !t.ok())
    return t.error().Wrap(leave_running ? "saving the sandbox's memory" : "checkpointing the sandbox");
  SBX_ASSIGN_OR_RETURN(auto binds, HostBinds(spec, init.pid));
  std::vector<std::string> args = {"dump", "-t", std::to_string(init.pid), "--file-locks",
                                   leave_running ? "--leave-running" : "--tcp-established"};
  if (!frozen_cgroup.empty()) args.insert(args.end(), {"--freeze-cgroup", frozen_cgroup});
  // The restore binds the same sources again: they are kept beside the images (and, for
  // a copy, where each is inside: its own sources go there).
  std::string table, places;
  for (size_t i = 0; i < binds.size(); ++i) {
    const std::string key = "sbx" + std::to_string(i);
    args.push_back("--external=mnt[" + binds[i].point + "]:" + key);
    table += key + "\t" + binds[i].source + "\n";
    places += key + "\t" + binds[i].point + "\t" + binds[i].source + "\n";
  }
  SBX_RETURN_IF_ERROR(fs::WriteFileAtomic(images + "/host-binds", table, 0600));
  if (leave_running) {
    SBX_RETURN_IF_ERROR(fs::WriteFileAtomic(images + "/mounts", places, 0600));
    if (spec.link) SBX_RETURN_IF_ERROR(fs::WriteFileAtomic(images + "/network", "", 0600));
  }
  SBX_ASSIGN_OR_RETURN(uid_t owner, UserNsOwner(init.pid));
  // CRIU runs in the sandbox's UTS namespace, so the images hold none: a restore can then
  // run as a namespace owner (see RestoreTree).
  UniqueFd uts(::open(("/proc/" + std::to_string(init.pid) + "/ns/uts").c_str(), O_RDONLY | O_CLOEXEC));
  if (!uts.valid()) return ErrnoError("open the sandbox's UTS namespace");
  Status st = RunCriu(args, images, "", "dump.log", leave_running ? "saving the sandbox's memory" : "checkpointing the sandbox",
                      owner, nullptr, {uts.get(), ""});
  if (leave_running) {
    // CRIU let the processes go on, saved or not: what it could not save is the caller's.
    if (!st.ok()) return MakeError(Code::kFailedPrecondition, st.error().message);
    return OkStatus();
  }
  SBX_RETURN_IF_ERROR(st);
  // CRIU ended the processes once they were saved.
  if (init.pidfd.valid()) proc::PidfdWait(init.pidfd.get(), 10000);
  owners_->Release(spec.id);
  return OkStatus();
}

Status Checkpointer::SaveRunning(const StartSpec& spec, const Instance& inst, const std::string& memory) {
  const CgroupDir cg(mode_, CgroupName(o_, spec.id), o_.cgroup_root);
  return Dump(spec, inst, memory, /*leave_running=*/true, cg.FreezerDir());
}

Result<Instance> Checkpointer::Restore(const StartSpec& spec, const std::string& images) {
  SBX_ASSIGN_OR_RETURN(std::string table, fs::ReadFile(images + "/host-binds"));
  std::vector<std::string> mounts;
  std::istringstream rows(table);
  for (std::string key, source; std::getline(rows, key, '\t') && std::getline(rows, source);)
    mounts.push_back("--external=mnt[" + key + "]:" + source);
  auto inst = RestoreTree(spec, images, "", mounts);
  if (!inst.ok()) return inst;
  if (spec.link)
    if (auto st = netlink::ConfigureHostEnd(*spec.link); !st.ok()) {
      (void)CgroupDir(mode_, CgroupName(o_, spec.id), o_.cgroup_root).Kill();
      (void)netlink::DeleteLink(spec.link->host_if);
      return st.error().Wrap("restoring sandbox " + spec.id);
    }
  return inst;
}

Result<Instance> Checkpointer::RestoreTree(const StartSpec& spec, const std::string& images, const std::string& work,
                                           const std::vector<std::string>& mounts, int64_t* criu_ms) {
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
  std::string pidfile = (work.empty() ? images : work) + "/restored.pid";
  ::unlink(pidfile.c_str());
  std::vector<std::string> args = {"restore", "-d", "--root", root, "--pidfile", pidfile, "--tcp-established",
                                   "--file-locks"};
  args.insert(args.end(), mounts.begin(), mounts.end());
  // As a namespace owner of the sandbox's own, as a start does: the kernel then charges
  // its per-user budgets (inotify instances, pending signals, message-queue bytes) to that
  // uid, not to host root's. CRIU runs in a new UTS namespace named for the sandbox,
  // which the restored processes share: images taken in the sandbox's UTS namespace (see
  // Dump) hold none. Images that hold one (taken before) restore as root, since CRIU
  // writes their host name through /proc/sys, which the kernel opens for writing to host
  // uid 0 only; such a sandbox shares root's budgets until it boots again.
  // CRIU runs in the sandbox's cgroup, so the processes it makes are there from their
  // first page on (a checkpoint that CRIU took as the namespace's owner records no
  // cgroups to restore).
  uid_t owner = 0;
  RunUts uts;
  if (!HoldsUtsNamespace(images)) {
    uts.fresh_name = spec.hostname.empty() ? "sandbox" : spec.hostname;
    if (owners_->enabled()) {
      SBX_ASSIGN_OR_RETURN(owner, owners_->Take(spec.id));
    }
  }
  ScopeExit release([&] {
    if (owner != 0) owners_->Release(spec.id);
  });
  // The link: sbxd makes the pair on the host; CRIU moves its inner end into the restored
  // namespace as eth0 (with the addresses and routes it had); sbxd addresses the host's end.
  const std::string peer = spec.link ? spec.link->host_if + "p" : "";
  if (spec.link) {
    SBX_RETURN_IF_ERROR(netlink::CreateHostPair(*spec.link, peer));
    args.push_back("--external=netdev[eth0]:" + peer);
  }
  const auto t0 = std::chrono::steady_clock::now();
  Status restored = RunCriu(args, images, work, "restore.log", "restoring the sandbox", owner,
                            [&](pid_t criu) { return cg.AddProcess(criu); }, uts);
  if (criu_ms)
    *criu_ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
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
  if (auto st = agent::PingBlocking(*inst.agent, 5000); !st.ok()) return fail(st.error());
  release.Release();
  return inst;
}

// The template's external mounts, each bound from this sandbox's own source: its kernel
// files, the API folder, its disks by their place; device nodes are the host's in every
// sandbox. A disk the template had and this sandbox lacks (or the other way) is a
// mismatch: the caller boots on the files instead.
Result<Instance> Checkpointer::RestoreCopy(const StartSpec& spec, const std::string& memory) {
  const bool had_link = fs::Exists(memory + "/network");
  if (had_link != spec.link.has_value())
    return MakeError(Code::kFailedPrecondition, had_link ? "the template had a network and this sandbox has none"
                                                         : "this sandbox has a network and the template had none");
  SBX_ASSIGN_OR_RETURN(std::string table, fs::ReadFile(memory + "/mounts"));
  std::vector<std::string> mounts;
  std::set<std::string> places;
  std::istringstream rows(table);
  for (std::string key, point, source;
       std::getline(rows, key, '\t') && std::getline(rows, point, '\t') && std::getline(rows, source);) {
    places.insert(point);
    std::string mine;
    for (const auto& [name, target] : kKernelFiles)
      if (point == target) mine = spec.dir + "/kernel/" + name;
    if (point == "/run/sbx" && !o_.api_dir.empty()) mine = o_.api_dir;
    for (const auto& b : spec.binds)
      if (b.target == point) mine = b.source;
    if (mine.empty() && source.rfind("/dev/", 0) == 0) mine = source;
    if (mine.empty())
      return MakeError(Code::kFailedPrecondition, "the template had a disk at " + point + " that this sandbox lacks");
    mounts.push_back("--external=mnt[" + key + "]:" + mine);
  }
  for (const auto& b : spec.binds)
    if (!places.count(b.target))
      return MakeError(Code::kFailedPrecondition, "this sandbox has a disk at " + b.target + " that the template lacked");
  SBX_RETURN_IF_ERROR(WriteKernelFiles(spec.dir));
  // CRIU's log and pid file: this sandbox's (other copies restore from the same images).
  const std::string work = spec.dir + "/criu";
  (void)fs::RemoveTree(work);
  if (::mkdir(work.c_str(), 0700) != 0) return ErrnoError("mkdir " + work);
  const auto t0 = std::chrono::steady_clock::now();
  int64_t criu_ms = 0;
  SBX_ASSIGN_OR_RETURN(Instance inst, RestoreTree(spec, memory, work, mounts, &criu_ms));
  FaultPoint("container.restored");  // running as the template, not yet renamed
  const auto t1 = std::chrono::steady_clock::now();
  // Its own link: the template's addresses and routes go with the pair CRIU moved in,
  // and a new pair brings this sandbox's. Then its own name.
  Status renewed = OkStatus();
  const pid_t pid = ProcessOf(inst)->pid;
  if (spec.link) {
    (void)netlink::DeleteLink(spec.link->host_if);
    UniqueFd netns(::open(("/proc/" + std::to_string(pid) + "/ns/net").c_str(), O_RDONLY | O_CLOEXEC));
    renewed = netns.valid() ? netlink::AttachVeth(*spec.link, netns.get())
                            : ErrnoError("open the sandbox's network namespace");
  }
  if (renewed.ok()) renewed = SetHostname(pid, spec.hostname);
  if (!renewed.ok()) {
    (void)CgroupDir(mode_, CgroupName(o_, spec.id), o_.cgroup_root).Kill();
    if (spec.link) (void)netlink::DeleteLink(spec.link->host_if);
    return renewed.error().Wrap("renaming sandbox " + spec.id + " restored from its template's memory");
  }
  (void)fs::RemoveTree(work);
  auto ms = [](auto d) { return std::chrono::duration_cast<std::chrono::milliseconds>(d).count(); };
  SBX_LOG(kInfo) << "sandbox " << spec.id << ": restored from its template's memory in " << ms(t1 - t0)
                 << " ms (CRIU ran " << criu_ms << " ms), renamed in " << ms(std::chrono::steady_clock::now() - t1)
                 << " ms";
  inst.loaded_memory = true;
  return inst;
}

}  // namespace sbx::runtime
