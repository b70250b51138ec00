// The container wall: user, pid, mount, net, ipc, uts and cgroup namespaces, an overlay
// root, cgroup limits; sbx-agent finishes the set-up from inside (see src/agent/init/container_init).
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <grp.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>

#include "agent/protocol.h"
#include "base/fs.h"
#include "base/ids.h"
#include "base/log.h"
#include "base/proc.h"
#include "base/reaper.h"
#include "base/scope_exit.h"
#include "runtime/cgroup.h"
#include "runtime/container/checkpoint.h"
#include "runtime/container/user_ns.h"
#include "runtime/netlink.h"
#include "runtime/overlay_files.h"
#include "runtime/process_handle.h"
#include "runtime/runtime.h"
#include "runtime/unix_dialer.h"

#ifndef CLONE_PIDFD
#define CLONE_PIDFD 0x00001000
#endif

namespace sbx::runtime {

constexpr const char* kAgentName = "@sbx-agent";

// Layer paths relative to the sandbox's folder: the agent mounts its root from there, so
// the host's layout stays out of the sandbox's /proc/mounts.
std::vector<std::string> RelativeLayers(const StartSpec& spec) {
  std::vector<std::string> out;
  for (const auto& l : spec.layers) out.push_back(std::filesystem::path(l).lexically_relative(spec.dir).string());
  return out;
}

// The agent's abstract name, in the init's network namespace (held open, so the address
// stays good whatever becomes of the pid).
Result<agent::DialerPtr> AgentOf(pid_t pid) {
  auto netns = std::make_shared<UniqueFd>(
      ::open(("/proc/" + std::to_string(pid) + "/ns/net").c_str(), O_RDONLY | O_CLOEXEC));
  if (!netns->valid()) return ErrnoError("open the sandbox's network namespace");
  return agent::DialerPtr(std::make_shared<UnixDialer>(kAgentName, netns));
}

// The host's boot parameters and boot id are the host's business. Each start is a new
// boot, with a new boot id.
const std::pair<const char*, const char*> kKernelFiles[2] = {{"cmdline", "/proc/cmdline"},
                                                             {"boot_id", "/proc/sys/kernel/random/boot_id"}};

Status WriteKernelFiles(const std::string& dir) {
  std::string k = dir + "/kernel";
  if (::mkdir(k.c_str(), 0711) != 0 && errno != EEXIST) return ErrnoError("mkdir " + k);
  std::string id = RandomHex(16);
  id[12] = '4';  // a version 4 UUID, as the kernel makes them
  id[16] = "89ab"[id[16] % 4];
  std::string uuid = id.substr(0, 8) + "-" + id.substr(8, 4) + "-" + id.substr(12, 4) + "-" + id.substr(16, 4) + "-" +
                     id.substr(20);
  // Plain writes (no fsync on the start path): the files serve a sandbox that runs or is
  // hibernated, neither of which outlives a host crash. The command line never changes.
  if (!fs::Exists(k + "/cmdline")) SBX_RETURN_IF_ERROR(fs::WriteFile(k + "/cmdline", "ro quiet\n", true, 0444));
  return fs::WriteFile(k + "/boot_id", uuid + "\n", true, 0444);
}

namespace {

constexpr int kReadyTimeoutMs = 20000;
constexpr int kAdoptPingMs = 10000;  // Adopt's ping (see there)

std::string ReadLine(int fd, int timeout_ms) {
  std::string s;
  char c;
  while (s.size() < 4096) {
    struct pollfd p = {fd, POLLIN, 0};
    int rc = ::poll(&p, 1, timeout_ms);
    if (rc < 0 && errno == EINTR) continue;
    if (rc <= 0) break;
    ssize_t n = ::read(fd, &c, 1);
    if (n <= 0) break;
    if (c == '\n') break;
    s.push_back(c);
  }
  return s;
}

// What the clone child runs with, prepared before the clone.
struct InitArgs {
  int cfg_r, ready_w;
  const char* agent;
  char** argv;
  char** envp;
  const std::vector<SandboxRlimit>* rlimits;
};

// The clone child: async-signal-safe system calls only, until it executes the agent.
[[noreturn]] void RunInit(const InitArgs& a) {
  int cfg = ::fcntl(a.cfg_r, F_DUPFD, 10);
  int ready = ::fcntl(a.ready_w, F_DUPFD, 10);
  int null = ::open("/dev/null", O_RDWR);
  if (cfg < 0 || ready < 0 || null < 0 || ::dup2(null, 0) < 0 || ::dup2(null, 1) < 0 ||
      ::dup2(null, 2) < 0 || ::dup2(cfg, 3) < 0 || ::dup2(ready, 4) < 0)
    ::_exit(126);
  ::syscall(SYS_close_range, 5, ~0U, 0);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  // The init leads its own session (a checkpoint needs every session leader inside
  // the sandbox's pid namespace).
  ::setsid();
  // The per-process limits everything in the sandbox inherits (lowering needs no
  // privilege; raising them again needs CAP_SYS_RESOURCE on the host).
  for (const auto& r : *a.rlimits)
    if (::setrlimit(r.resource, &r.value) != 0) {
      static const char msg[] = "ERR cannot set the sandbox's resource limits\n";
      ssize_t u = ::write(4, msg, sizeof msg - 1);
      (void)u;
      ::_exit(123);
    }
  char c = 0;
  if (::read(3, &c, 1) != 1 || c != 'G') ::_exit(125);
  // Raw system calls: glibc's wrappers would broadcast the change to every thread it
  // believes this process has (sbxd's, copied by the raw clone), under a lock that another
  // thread of sbxd may have held at the clone, and wait forever (seen under 20 creates
  // at once: the init hung in a futex until the ready timeout).
  if (::syscall(SYS_setresgid, 0, 0, 0) != 0 || ::syscall(SYS_setgroups, 0, nullptr) != 0 ||
      ::syscall(SYS_setresuid, 0, 0, 0) != 0) {
    static const char msg[] = "ERR cannot become root of the sandbox's user namespace\n";
    ssize_t u = ::write(4, msg, sizeof msg - 1);
    (void)u;
    ::_exit(124);
  }
  ::execve(a.agent, a.argv, a.envp);
  static const char msg[] = "ERR cannot execute sbx-agent\n";
  ssize_t u = ::write(4, msg, sizeof msg - 1);
  (void)u;
  ::_exit(127);
}

class ContainerRuntime : public Runtime {
 public:
  explicit ContainerRuntime(ContainerOptions o)
      : o_(std::move(o)), mode_(DetectCgroupMode(o_.cgroup_root)), owners_(o_.owner_base, o_.owner_count),
        checkpoints_(&o_, mode_, &owners_), files_(o_.disk_quotas, o_.uid_base) {}
  std::string Kind() const override { return "container"; }

  std::string Group(const std::string& id) const { return CgroupName(o_, id); }
  // Where the agents of sandboxes started before agents listened on an abstract name
  // have their socket (still used when such a sandbox is adopted).
  std::string LegacySocket(const std::string& dir) const { return dir + "/ctl/a.sock"; }

  // A sandbox made from a memory template (its topmost layer) has the template's files,
  // and its first start restores the template's processes (with CRIU).
  Status Prepare(const StartSpec& spec) override { return files_.Prepare(spec, Kind()); }

  Result<Instance> Start(const StartSpec& spec) override {
    auto from = OverlayFiles::TakeMemoryMark(spec.dir);
    if (!from) return Boot(spec);
    std::string why = "this sbxd has no CRIU";
    if (!o_.criu.empty() && mode_ != CgroupMode::kNone) {
      // A failed restore leaves nothing running (and the boot kills its cgroup first).
      auto inst = checkpoints_.RestoreCopy(spec, *from);
      if (inst.ok()) return inst;
      why = inst.error().message;
    }
    SBX_LOG(kWarn) << "sandbox " << spec.id << " boots on its template's files instead of restoring its memory: " << why;
    return Boot(spec);
  }

  Result<Instance> Boot(const StartSpec& spec) {
    if (mode_ == CgroupMode::kNone)
      return MakeError(Code::kFailedPrecondition, "this host has no usable cgroup hierarchy");
    CgroupDir cg(mode_, Group(spec.id), o_.cgroup_root);
    SBX_RETURN_IF_ERROR(cg.Kill());
    SBX_RETURN_IF_ERROR(cg.Create({spec.limits.cpus, spec.limits.memory_bytes, spec.limits.pids}));

    if (auto st = WriteKernelFiles(spec.dir); !st.ok()) {
      (void)cg.Remove();
      return st.error();
    }
    nlohmann::json kernel_files = nlohmann::json::array();
    for (const auto& [name, target] : kKernelFiles)
      kernel_files.push_back({{"source", spec.dir + "/kernel/" + name}, {"target", target}});
    nlohmann::json cfg = {{"base", spec.dir},                {"lower", RelativeLayers(spec)},
                          {"upper", "upper"},                {"work", "work"},
                          {"rootfs", spec.dir + "/root"},
                          {"binds", [&] {
                             nlohmann::json b = nlohmann::json::array();
                             for (const auto& x : spec.binds) b.push_back({{"source", x.source}, {"target", x.target}});
                             return b;
                           }()},
                          {"kernel_files", kernel_files},
                          {"socket", kAgentName},           {"hostname", spec.hostname},
                          {"tmp_bytes", spec.limits.memory_bytes / 2},
                          {"no_new_privs", spec.no_new_privs},
                          {"nameserver", spec.nameserver},
                          {"api_dir", o_.api_dir},
                          {"agent_exe", o_.api_dir.empty() || o_.agent_copy.empty() ? "" : "/run/sbx/" + o_.agent_copy}};
    std::string go = "G" + cfg.dump();
    // Everything the clone child touches is prepared before the clone.
    const char* agent = o_.agent_path.c_str();
    char arg0[] = "sbx-agent";
    char arg1[] = "--sandbox-init";
    char* argv[] = {arg0, arg1, nullptr};
    char* envp[] = {nullptr};
    const std::vector<SandboxRlimit> rlimits = SandboxRlimits(o_);

    int cfgp[2], readyp[2];
    if (::pipe2(cfgp, O_CLOEXEC) != 0) return ErrnoError("pipe");
    if (::pipe2(readyp, O_CLOEXEC) != 0) {
      ::close(cfgp[0]);
      ::close(cfgp[1]);
      return ErrnoError("pipe");
    }
    UniqueFd cfg_w(cfgp[1]), ready_r(readyp[0]);
    uid_t owner = 0;
    if (owners_.enabled()) {
      auto taken = owners_.Take(spec.id);
      if (!taken.ok()) {
        (void)cg.Remove();
        return taken.error();
      }
      owner = *taken;
    }
    int pidfd = -1;
    long flags = CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC |
                 CLONE_NEWUTS | CLONE_PIDFD | SIGCHLD;
    pid_t pid;
    int clone_errno = 0;
    {
      // The new user namespace is owned by this thread's effective uid.
      OwnerScope as_owner(owner);
      if (!as_owner.status().ok()) {
        owners_.Release(spec.id);
        (void)cg.Remove();
        return as_owner.status().error();
      }
      pid = static_cast<pid_t>(::syscall(SYS_clone, flags, nullptr, &pidfd, nullptr, nullptr));
      clone_errno = errno;
      // The child leaves here for good (the scope's end is the parent's).
      if (pid == 0) RunInit({cfgp[0], readyp[1], agent, argv, envp, &rlimits});
    }
    ::close(cfgp[0]);
    ::close(readyp[1]);
    if (pid < 0) {
      owners_.Release(spec.id);
      (void)cg.Remove();
      return ErrnoError("clone the sandbox's namespaces", clone_errno);
    }
    auto pfd = std::make_shared<UniqueFd>(pidfd);
    auto fail = [&](Error e) -> Result<Instance> {
      (void)proc::PidfdSignal(pfd->get(), SIGKILL);
      proc::PidfdWait(pfd->get(), 5000);
      (void)cg.Kill();
      (void)cg.Remove();
      owners_.Release(spec.id);
      return e.Wrap("starting sandbox " + spec.id);
    };
    // The agent's socket is named in the sandbox's network namespace: keep a handle on it.
    auto addr = AgentOf(pid);
    if (!addr.ok()) return fail(addr.error());
    std::string map = "0 " + std::to_string(o_.uid_base) + " " + std::to_string(o_.uid_count) + "\n";
    std::string p = "/proc/" + std::to_string(pid);
    if (auto st = fs::WriteFile(p + "/uid_map", map, false); !st.ok()) return fail(st.error());
    if (auto st = fs::WriteFile(p + "/gid_map", map, false); !st.ok()) return fail(st.error());
    if (auto st = cg.AddProcess(pid); !st.ok()) return fail(st.error());
    // Best effort: keep the OOM killer off the agent (needs CAP_SYS_RESOURCE, which some
    // hosts withhold even from root); its handlers and commands reset their own score to
    // 0. Through the legacy file (-16 of 17 is -941): a write to oom_score_adj by a process
    // with CAP_SYS_RESOURCE would also make it the floor that the sandbox's processes
    // inherit and may lower their own score to; this way that floor stays 0.
    (void)fs::WriteFile(p + "/oom_adj", "-16", false);
    if (spec.link) {
      UniqueFd netns(::open((p + "/ns/net").c_str(), O_RDONLY | O_CLOEXEC));
      if (!netns.valid()) return fail(ErrnoError("open the sandbox's network namespace"));
      if (auto st = netlink::AttachVeth(*spec.link, netns.get()); !st.ok()) return fail(st.error());
    }
    size_t off = 0;
    while (off < go.size()) {
      ssize_t n = ::write(cfg_w.get(), go.data() + off, go.size() - off);
      if (n < 0) {
        if (errno == EINTR) continue;
        return fail(ErrnoError("send the sandbox's configuration"));
      }
      off += n;
    }
    cfg_w.Reset();
    std::string line = ReadLine(ready_r.get(), kReadyTimeoutMs);
    if (line != "OK") {
      if (line.rfind("ERR image: ", 0) == 0) {
        // The image cannot hold a sandbox (a symlink or a file where the agent mounts):
        // the caller's input, shown with paths inside the image, not on the host.
        std::string msg = line.substr(11);
        for (size_t at; (at = msg.find(spec.dir + "/root")) != std::string::npos;)
          msg.erase(at, spec.dir.size() + 5);
        return fail(MakeError(Code::kInvalidArgument, "the image cannot boot a sandbox: " + msg));
      }
      if (line.rfind("ERR ", 0) == 0) return fail(MakeError(Code::kInternal, line.substr(4)));
      if (line.empty() && !proc::PidfdWait(pfd->get(), 100))
        return fail(MakeError(Code::kInternal, "the sandbox's agent did not finish its set-up within " +
                                                   std::to_string(kReadyTimeoutMs / 1000) + " s"));
      return fail(MakeError(Code::kInternal, line.empty() ? "the sandbox's agent exited during set-up"
                                                          : "unexpected answer from the agent: " + line));
    }
    Instance inst;
    inst.agent = *addr;
    SetProcess(&inst, pid, std::move(*pfd));
    return inst;
  }

  Status Stop(const std::string& id, const Instance& inst) override {
    owners_.Release(id);
    CgroupDir cg(mode_, Group(id), o_.cgroup_root);
    if (const ProcessHandle* p = ProcessOf(inst); p && p->pidfd.valid()) {
      SBX_RETURN_IF_ERROR(proc::PidfdSignal(p->pidfd.get(), SIGKILL));
      // A paused (frozen) sandbox dies only once thawed.
      (void)cg.Thaw();
      proc::PidfdWait(p->pidfd.get(), 10000);
    }
    SBX_RETURN_IF_ERROR(cg.Kill());
    return cg.Remove();
  }

  Capabilities Caps() const override {
    Capabilities c;
    c.freeze = true;
    c.hibernate = !o_.criu.empty();  // with a CRIU binary
    c.memory_snapshots = c.hibernate;  // a save that lets the sandbox run on, kept beside a template's files
    c.fast_capture = o_.disk_quotas;  // btrfs snapshots on the store
    return c;
  }

  Status Hibernate(const StartSpec& spec, const Instance& inst, const std::string& dir) override {
    if (o_.criu.empty()) return Runtime::Hibernate(spec, inst, dir);
    if (!Alive(inst)) return MakeError(Code::kUnavailable, "the sandbox's init is not running");
    return checkpoints_.Hibernate(spec, inst, dir);
  }
  bool HasCheckpoint(const std::string& dir) override { return checkpoints_.HasCheckpoint(dir); }
  Status DropCheckpoint(const std::string& dir) override { return checkpoints_.DropCheckpoint(dir); }
  uint64_t CheckpointBytes(const std::string& id) override {
    return CgroupDir(mode_, Group(id), o_.cgroup_root).AnonymousMemory();
  }
  Result<Instance> Restore(const StartSpec& spec, const std::string& dir) override {
    if (o_.criu.empty()) return Runtime::Restore(spec, dir);
    return checkpoints_.Restore(spec, dir);
  }

  // A memory template: the sandbox frozen, then its processes saved by CRIU and its files
  // captured beside, in the same frozen moment; then it runs on. No process can change a
  // file between the two (such as swapping a file it holds open for a link to another).
  Result<Captured> CaptureMemory(const StartSpec& spec, const Instance& inst, const std::string& dst) override {
    if (o_.criu.empty()) return Runtime::CaptureMemory(spec, inst, dst);
    if (!Alive(inst)) return MakeError(Code::kUnavailable, "the sandbox's init is not running");
    if (::mkdir(dst.c_str(), 0755) != 0) return ErrnoError("mkdir " + dst);
    const std::string memory = dst + "/" + kCapturedMemory;
    SBX_RETURN_IF_ERROR(Freeze(spec.id));
    Status saved = checkpoints_.SaveRunning(spec, inst, memory);
    if (saved.ok()) saved = WriteMemoryWall(memory, Kind());
    auto files = saved.ok() ? files_.CaptureBesideMemory(spec.dir, dst) : Result<Captured>(saved.error());
    Status thawed = Thaw(spec.id);
    if (!files.ok()) return files.error();
    if (!thawed.ok()) return thawed.error();
    return files;
  }

  bool HasFiles(const std::string& dir) override { return files_.Has(dir); }
  Result<Captured> CaptureFiles(const std::string& dir, const std::string& dst) override {
    return files_.Capture(dir, dst);
  }
  Status RemoveLayer(const std::string& path) override { return files_.RemoveLayer(path); }
  Status SetDiskLimit(const std::string& dir, uint64_t bytes) override { return files_.SetLimit(dir, bytes); }

  Status UpdateLimits(const std::string& id, const Limits& l) override {
    return CgroupDir(mode_, Group(id), o_.cgroup_root).SetLimits({l.cpus, l.memory_bytes, l.pids});
  }

  Status Freeze(const std::string& id) override {
    return CgroupDir(mode_, Group(id), o_.cgroup_root).Freeze();
  }
  Status Thaw(const std::string& id) override { return CgroupDir(mode_, Group(id), o_.cgroup_root).Thaw(); }

  Status Destroy(const std::string& id, const std::string& dir) override {
    owners_.Release(id);
    CgroupDir cg(mode_, Group(id), o_.cgroup_root);
    SBX_RETURN_IF_ERROR(cg.Kill());
    SBX_RETURN_IF_ERROR(cg.Remove());
    return files_.RemoveDir(dir);
  }

  Result<Instance> Adopt(const StartSpec& spec, const std::string& saved_state, bool frozen) override {
    auto init = OpenSavedProcess(saved_state);
    if (!init.ok()) return MakeError(Code::kNotFound, "the sandbox's init is gone");
    const pid_t pid = (*init)->pid;
    agent::DialerPtr addr;
    if (::access(LegacySocket(spec.dir).c_str(), F_OK) == 0) {
      addr = std::make_shared<UnixDialer>(LegacySocket(spec.dir));
    } else {
      SBX_ASSIGN_OR_RETURN(addr, AgentOf(pid));
    }
    if (frozen) {
      // Paused: it stays frozen (freezing again is a no-op if it already is).
      SBX_RETURN_IF_ERROR(Freeze(spec.id));
    } else {
      // A capture cut short by a crash may have left it frozen: its agent could not answer.
      SBX_RETURN_IF_ERROR(Thaw(spec.id));
      // Generous: a restart re-adopts every sandbox at once, and on a busy host a thawed
      // agent may take seconds to answer; an agent that is gone refuses at once.
      SBX_RETURN_IF_ERROR(agent::PingBlocking(*addr, kAdoptPingMs));
    }
    owners_.Note(spec.id, pid);
    Instance inst;
    inst.agent = addr;
    SetProcess(&inst, std::move(*init));
    return inst;
  }

  uint64_t CpuUsageNs(const std::string& id, const Instance&) override {
    return CgroupDir(mode_, Group(id), o_.cgroup_root).CpuUsageNs();
  }

  Result<Usage> ReadUsage(const std::string& id, const Instance&) override {
    CgroupDir g(mode_, Group(id), o_.cgroup_root);
    if (!g.Exists()) return MakeError(Code::kFailedPrecondition, "sandbox " + id + " has no control group now");
    return Usage{g.CpuUsageNs(), g.MemoryCurrent(), g.Pids().size()};
  }

  Status AttachLink(const std::string& id, const Instance& inst, const NetLink& link) override {
    const ProcessHandle* p = ProcessOf(inst);
    if (!p) return MakeError(Code::kFailedPrecondition, "sandbox " + id + " is not running");
    UniqueFd netns(::open(("/proc/" + std::to_string(p->pid) + "/ns/net").c_str(), O_RDONLY | O_CLOEXEC));
    if (!netns.valid()) return ErrnoError("open the sandbox's network namespace");
    return netlink::AttachVeth(link, netns.get());
  }
  Status DetachLink(const NetLink& link, bool wait) override {
    return wait ? netlink::DeleteLink(link.host_if) : netlink::DeleteLinkLater(link.host_if);
  }
  std::optional<LinkCounters> ReadLinkCounters(const NetLink& link) override {
    return netlink::ReadCounters(link.host_if);
  }

  std::vector<std::string> ListKernelObjects() override {
    return ListCgroupChildren(mode_, "sbx-" + o_.instance, o_.cgroup_root);
  }

  bool Alive(const Instance& inst) override { return ProcessAlive(inst); }

  std::optional<std::string> SandboxOfPeer(int fd) override { return GroupOfPeer(fd, "/" + Group("")); }

 private:
  ContainerOptions o_;
  CgroupMode mode_;
  NsOwners owners_;
  Checkpointer checkpoints_;
  OverlayFiles files_;
};

}  // namespace

std::unique_ptr<Runtime> NewContainerRuntime(const ContainerOptions& opts) {
  return std::make_unique<ContainerRuntime>(opts);
}

}  // namespace sbx::runtime
