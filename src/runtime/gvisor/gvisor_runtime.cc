// The gVisor wall: each sandbox is a runsc container. Its system calls are served by
// gVisor's user-space kernel (the sentry), which reaches the host through a small
// allow-list of system calls; files go through runsc's gofer. sbxd gives it the container
// wall's files (an overlay of the same layers on the host, the same user mapping), its
// own cgroup (below sbx-<instance>-gvisor), and the same agent as its first process,
// which listens on a host socket runsc makes for it (bundle.h).
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>

#include "agent/protocol.h"
#include "base/fs.h"
#include "base/log.h"
#include "base/proc.h"
#include "base/reaper.h"
#include "runtime/cgroup.h"
#include "runtime/gvisor/bundle.h"
#include "runtime/netlink.h"
#include "runtime/process_handle.h"
#include "runtime/overlay_files.h"
#include "runtime/runtime.h"
#include "runtime/unix_dialer.h"

namespace sbx::runtime {
namespace {

using gvisor::BundleOf;
using gvisor::CtlOf;
using gvisor::NetnsOf;
using gvisor::RootOf;

constexpr int kReadyTimeoutMs = 20000;
// The host memory the sentry, its gofer and their page tables take beyond the memory they
// give the sandbox: the cgroup holds the type's memory plus this. gVisor sizes its own
// memory by the type's (runsc reads the limit from the bundle when it boots: that is what
// the sandbox's code sees); gVisor has no OOM killer of its own, so a sandbox that goes
// past the host's limit is ended whole by the host's.
constexpr uint64_t kSentryOverheadBytes = 192ull << 20;

// Host processes and threads: the sentry's threads, and systrap's stub processes (one or
// more per address space inside), several for each of the sandbox's processes. Past the
// limit the sentry cannot go on and the sandbox ends whole.
CgroupLimits HostLimits(const Limits& l) {
  return {l.cpus, l.memory_bytes ? l.memory_bytes + kSentryOverheadBytes : 0, l.pids ? l.pids * 3 + 256 : 0};
}

// The agent's socket, a.sock in the agent's folder.
Result<agent::DialerPtr> AgentOf(const std::string& dir) { return DialerInFolder(CtlOf(dir), "a.sock"); }

// The last lines of a log, for an error message.
std::string Tail(const std::string& path) {
  auto text = fs::ReadFile(path, 1 << 20);
  if (!text.ok() || text->empty()) return "";
  std::string t = *text;
  while (!t.empty() && t.back() == '\n') t.pop_back();
  size_t from = t.size() > 600 ? t.size() - 600 : 0;
  return t.substr(from);
}

// Mounts the sandbox's root: an overlay of its layers, with its upper folder, as the
// container wall's agent mounts it (userxattr: the same whiteouts and opaque marks, so a
// layer captured on either wall serves both). Layer paths are relative to the sandbox's
// folder (a long stack would not fit in one page of options otherwise): the mount runs in
// a thread of its own that leaves sbxd's shared working directory alone (unshare CLONE_FS).
Status MountRoot(const StartSpec& spec) {
  std::string lower;
  for (const auto& l : spec.layers)
    lower += (lower.empty() ? "" : ":") + std::filesystem::path(l).lexically_relative(spec.dir).string();
  const std::string opts = "lowerdir=" + lower + ",upperdir=upper,workdir=work,userxattr";
  const std::string root = RootOf(spec.dir);
  Status st = OkStatus();
  std::thread t([&] {
    if (::unshare(CLONE_FS) != 0) {
      st = ErrnoError("unshare CLONE_FS");
    } else if (::chdir(spec.dir.c_str()) != 0) {
      st = ErrnoError("chdir " + spec.dir);
    } else if (::mount("overlay", root.c_str(), "overlay", MS_NODEV | (spec.no_new_privs ? MS_NOSUID : 0),
                       opts.c_str()) != 0) {
      st = ErrnoError("mount the sandbox's root");
    }
  });
  t.join();
  return st;
}

// A new network namespace with its loopback up, kept by a bind mount on `path` (as `ip
// netns add` does), made from a thread of its own: namespaces are per thread.
Status MakeNetns(const std::string& path) {
  int fd = ::open(path.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoError("create " + path);
  ::close(fd);
  Status st = OkStatus();
  std::thread t([&] {
    if (::unshare(CLONE_NEWNET) != 0) {
      st = ErrnoError("make a network namespace");
      return;
    }
    UniqueFd sock(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    struct ifreq ifr = {};
    std::strcpy(ifr.ifr_name, "lo");
    if (!sock.valid() || ::ioctl(sock.get(), SIOCGIFFLAGS, &ifr) != 0 ||
        (ifr.ifr_flags |= IFF_UP, ::ioctl(sock.get(), SIOCSIFFLAGS, &ifr) != 0)) {
      st = ErrnoError("bring the sandbox's loopback up");
      return;
    }
    if (::mount("/proc/thread-self/ns/net", path.c_str(), nullptr, MS_BIND, nullptr) != 0)
      st = ErrnoError("keep the network namespace at " + path);
  });
  t.join();
  return st;
}

// Unmounts `path` if something is mounted there (EINVAL: nothing is).
void Unmount(const std::string& path, int flags) {
  if (::umount2(path.c_str(), flags) != 0 && errno != EINVAL && errno != ENOENT)
    SBX_LOG(kWarn) << "unmount " << path << ": " << std::strerror(errno);
}

void DropNetns(const std::string& path) {
  Unmount(path, MNT_DETACH);
  (void)::unlink(path.c_str());
}

class GvisorRuntime : public Runtime {
 public:
  explicit GvisorRuntime(GvisorOptions o)
      : o_(std::move(o)), mode_(DetectCgroupMode(o_.cgroup_root)), files_(o_.disk_quotas, o_.uid_base) {}
  std::string Kind() const override { return "gvisor"; }

  Capabilities Caps() const override {
    Capabilities c;
    c.freeze = true;                  // the cgroup freezer holds the sentry and its gofer
    c.fast_capture = o_.disk_quotas;  // btrfs snapshots on the store
    return c;
  }

  std::string Parent() const { return "sbx-" + o_.instance + "-gvisor"; }
  std::string Group(const std::string& id) const { return Parent() + "/" + id; }
  CgroupDir Cgroup(const std::string& id) const { return CgroupDir(mode_, Group(id), o_.cgroup_root); }

  // runsc with the options every call shares; with `netns`, run in that network namespace
  // (nsenter: util-linux, on every Debian) on the host's network stack there.
  // runsc 2024-07's own network stack cannot start on kernels that give every namespace
  // /proc/sys/net/core/rmem_default (it takes any such namespace for the host's).
  std::vector<std::string> Runsc(std::vector<std::string> args, const std::string& netns = "") const {
    std::vector<std::string> argv = {o_.runsc,    "--root", o_.state_dir, "--network", netns.empty() ? "none" : "host",
                                     "--overlay2", "none",   "--host-uds", "all"};
    if (!o_.platform.empty()) argv.insert(argv.begin() + 1, {"--platform", o_.platform});
    if (!netns.empty()) argv.insert(argv.begin(), {"nsenter", "--net=" + netns, "--"});
    argv.insert(argv.end(), args.begin(), args.end());
    return argv;
  }

  Status Prepare(const StartSpec& spec) override { return files_.Prepare(spec); }

  Result<Instance> Start(const StartSpec& spec) override {
    if (mode_ == CgroupMode::kNone)
      return MakeError(Code::kFailedPrecondition, "this host has no usable cgroup hierarchy");
    SBX_RETURN_IF_ERROR(fs::MkdirAll(o_.state_dir, 0700));
    CgroupDir cg = Cgroup(spec.id);
    SBX_RETURN_IF_ERROR(cg.Kill());
    // What an earlier start of this sandbox left in runsc's record (a crash of sbxd).
    Release(spec.id, spec.dir);
    SBX_RETURN_IF_ERROR(cg.Create(HostLimits(spec.limits)));
    auto fail = [&](Error e) -> Result<Instance> {
      (void)cg.Kill();
      Release(spec.id, spec.dir);
      (void)cg.Remove();
      RemoveOtherHierarchies(spec.id);
      return e.Wrap("starting sandbox " + spec.id);
    };
    if (auto st = MountRoot(spec); !st.ok()) return fail(st.error());
    // The agent's folder: its socket and its part of the set-up; root of the sandbox owns
    // it (the socket is made as that user).
    const std::string ctl = CtlOf(spec.dir);
    (void)fs::RemoveTree(ctl);
    if (::mkdir(ctl.c_str(), 0700) != 0) return fail(ErrnoError("mkdir " + ctl));
    if (::chown(ctl.c_str(), o_.uid_base, o_.uid_base) != 0) return fail(ErrnoError("chown " + ctl));
    if (auto st = fs::WriteFile(ctl + "/init.json", gvisor::AgentInit(o_, spec), true, 0644); !st.ok())
      return fail(st.error());
    // The sandbox's network namespace: runsc runs in it, and the sandbox's sockets are
    // the host kernel's sockets there (runsc --network=host), behind the link's rules.
    const std::string netns = NetnsOf(spec.dir);
    if (auto st = MakeNetns(netns); !st.ok()) return fail(st.error());
    if (spec.link) {
      UniqueFd ns(::open(netns.c_str(), O_RDONLY | O_CLOEXEC));
      if (!ns.valid()) return fail(ErrnoError("open " + netns));
      if (auto st = netlink::AttachVeth(*spec.link, ns.get()); !st.ok()) return fail(st.error());
    }
    const std::string bundle = BundleOf(spec.dir);
    if (auto st = fs::MkdirAll(bundle, 0700); !st.ok()) return fail(st.error());
    if (auto st = fs::WriteFile(bundle + "/config.json", gvisor::BundleSpec(o_, spec, "/" + Group(spec.id)).dump(), true, 0600);
        !st.ok())
      return fail(st.error());
    const std::string log = bundle + "/runsc.log", pid_file = bundle + "/pid";
    (void)::unlink(log.c_str());
    // runsc, and every process it leaves (the sentry, the gofer), in the sandbox's cgroup.
    auto ran = Reaper::Get().Run(
        Runsc({"run", "--detach", "--bundle", bundle, "--pid-file", pid_file, spec.id}, netns), "",
        0, [&](pid_t pid) { return cg.AddProcess(pid); }, kReadyTimeoutMs, log);
    if (!ran.ok()) return fail(ran.error());
    if (ran->exit_code != 0)
      return fail(MakeError(Code::kInternal, "runsc could not start the sandbox: " + Tail(log)));
    // runsc wrote the bundle's limits into the cgroup: the host's share comes on top.
    if (auto st = cg.SetLimits(HostLimits(spec.limits)); !st.ok()) return fail(st.error());
    auto pid_text = fs::ReadFile(pid_file, 64);
    pid_t pid = pid_text.ok() ? static_cast<pid_t>(std::atoi(pid_text->c_str())) : 0;
    if (pid <= 0) return fail(MakeError(Code::kInternal, "runsc wrote no sandbox pid"));
    auto pidfd = proc::PidfdOpen(pid);
    if (!pidfd.ok()) return fail(MakeError(Code::kInternal, "the sandbox ended at start: " + Tail(log)));
    Instance inst;
    SetProcess(&inst, pid, std::move(*pidfd));
    auto addr = AgentOf(spec.dir);
    if (!addr.ok()) return fail(addr.error());
    inst.agent = *addr;
    // The agent answers once it has set up and listens.
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kReadyTimeoutMs);
    while (!agent::PingBlocking(*inst.agent, 1000).ok()) {
      if (!ProcessAlive(inst) || std::chrono::steady_clock::now() > deadline)
        return fail(MakeError(Code::kInternal, "the sandbox's agent did not come up: " + Tail(log)));
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return inst;
  }

  // Ends what runsc keeps of the sandbox (its record, the root's mount, the namespace).
  // Its pid file marks a record runsc still has: the delete runs once per start (Stop and
  // Destroy both release; a start after a stop finds nothing left).
  void Release(const std::string& id, const std::string& dir) {
    const std::string bundle = BundleOf(dir);
    if (fs::Exists(bundle + "/pid")) {
      auto r = Reaper::Get().Run(Runsc({"delete", "--force", id}), "", 0, nullptr, 10000, bundle + "/runsc.log");
      if (!r.ok()) SBX_LOG(kWarn) << "runsc delete " << id << ": " << r.error().message;
      (void)::unlink((bundle + "/pid").c_str());
    }
    // A plain unmount, so that the layers are free at once (a layer the collection removes
    // next must not be held by a detached overlay); lazily only if something still holds it.
    const std::string root = RootOf(dir);
    if (::umount2(root.c_str(), 0) != 0 && errno == EBUSY) Unmount(root, MNT_DETACH);
    DropNetns(NetnsOf(dir));
  }

  Status Stop(const std::string& id, const Instance& inst) override {
    CgroupDir cg = Cgroup(id);
    SBX_RETURN_IF_ERROR(cg.Kill());
    if (const ProcessHandle* p = ProcessOf(inst); p && p->pidfd.valid()) proc::PidfdWait(p->pidfd.get(), 10000);
    Release(id, o_.sandboxes_dir + "/" + id);
    SBX_RETURN_IF_ERROR(cg.Remove());
    RemoveOtherHierarchies(id);
    return OkStatus();
  }

  // runsc joins the sandbox's cgroup in every v1 hierarchy it knows (blkio, cpuset,
  // devices...), beyond the four sbxd manages: those go too once the sandbox is empty.
  void RemoveOtherHierarchies(const std::string& id) {
    if (mode_ != CgroupMode::kV1) return;
    auto hierarchies = fs::ListDir(o_.cgroup_root);
    if (!hierarchies.ok()) return;
    for (const auto& h : *hierarchies) {
      std::string d = o_.cgroup_root + "/" + h + "/" + Group(id);
      if (::rmdir(d.c_str()) != 0 && errno != ENOENT && errno != ENOTDIR)
        SBX_LOG(kWarn) << "remove " << d << ": " << std::strerror(errno);
    }
  }

  // The host's limits only: gVisor's own memory stays what it booted with (a claimed
  // pooled sandbox asking for more memory than its type gets the host's share only).
  Status UpdateLimits(const std::string& id, const Limits& l) override {
    return Cgroup(id).SetLimits(HostLimits(l));
  }
  Status SetDiskLimit(const std::string& dir, uint64_t bytes) override { return files_.SetLimit(dir, bytes); }
  bool HasFiles(const std::string& dir) override { return files_.Has(dir); }
  Result<Captured> CaptureFiles(const std::string& dir, const std::string& dst) override {
    return files_.Capture(dir, dst);
  }
  Status RemoveLayer(const std::string& path) override { return files_.RemoveLayer(path); }

  Status Freeze(const std::string& id) override { return Cgroup(id).Freeze(); }
  Status Thaw(const std::string& id) override { return Cgroup(id).Thaw(); }

  Status Destroy(const std::string& id, const std::string& dir) override {
    CgroupDir cg = Cgroup(id);
    SBX_RETURN_IF_ERROR(cg.Kill());
    Release(id, dir);
    SBX_RETURN_IF_ERROR(cg.Remove());
    RemoveOtherHierarchies(id);
    return files_.RemoveDir(dir);
  }

  Result<Instance> Adopt(const StartSpec& spec, const std::string& saved_state, bool frozen) override {
    auto sentry = OpenSavedProcess(saved_state);
    if (!sentry.ok()) return MakeError(Code::kNotFound, "the sandbox's runsc is gone");
    SBX_ASSIGN_OR_RETURN(agent::DialerPtr addr, AgentOf(spec.dir));
    if (frozen) {
      SBX_RETURN_IF_ERROR(Freeze(spec.id));
    } else {
      SBX_RETURN_IF_ERROR(Thaw(spec.id));
      SBX_RETURN_IF_ERROR(agent::PingBlocking(*addr, 2000));
    }
    Instance inst;
    inst.agent = addr;
    SetProcess(&inst, std::move(*sentry));
    return inst;
  }

  uint64_t CpuUsageNs(const std::string& id, const Instance&) override { return Cgroup(id).CpuUsageNs(); }
  Result<Usage> ReadUsage(const std::string& id, const Instance&) override {
    CgroupDir g = Cgroup(id);
    if (!g.Exists()) return MakeError(Code::kFailedPrecondition, "sandbox " + id + " has no control group now");
    // The sentry, its gofer and its stubs count as the sandbox's memory; its processes
    // are the user-space kernel's own, which the host cannot list: the host processes
    // that serve it are counted.
    return Usage{g.CpuUsageNs(), g.MemoryCurrent(), g.Pids().size()};
  }

  Status AttachLink(const std::string& id, const Instance&, const NetLink& link) override {
    UniqueFd ns(::open(NetnsOf(o_.sandboxes_dir + "/" + id).c_str(), O_RDONLY | O_CLOEXEC));
    if (!ns.valid()) return ErrnoError("open the network namespace of sandbox " + id);
    return netlink::AttachVeth(link, ns.get());
  }
  Status DetachLink(const NetLink& link, bool wait) override {
    return wait ? netlink::DeleteLink(link.host_if) : netlink::DeleteLinkLater(link.host_if);
  }
  std::optional<LinkCounters> ReadLinkCounters(const NetLink& link) override {
    return netlink::ReadCounters(link.host_if);
  }

  std::vector<std::string> ListKernelObjects() override { return ListCgroupChildren(mode_, Parent(), o_.cgroup_root); }
  bool Alive(const Instance& inst) override { return ProcessAlive(inst); }
  // A connection on the in-sandbox API socket comes from the sentry (runsc connects to
  // host sockets for the sandbox's code), which is in the sandbox's cgroup.
  std::optional<std::string> SandboxOfPeer(int fd) override { return GroupOfPeer(fd, "/" + Parent() + "/"); }

 private:
  GvisorOptions o_;
  CgroupMode mode_;
  OverlayFiles files_;
};

}  // namespace

std::unique_ptr<Runtime> NewGvisorRuntime(const GvisorOptions& opts) { return std::make_unique<GvisorRuntime>(opts); }

}  // namespace sbx::runtime
