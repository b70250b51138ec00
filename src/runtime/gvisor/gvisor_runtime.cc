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
#include "base/fault.h"
#include "base/fs.h"
#include "base/log.h"
#include "base/proc.h"
#include "base/reaper.h"
#include "runtime/cgroup.h"
#include "runtime/gvisor/bundle.h"
#include "runtime/gvisor/memory.h"
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
constexpr int kSaveTimeoutMs = 120000;
constexpr int kAdoptPingMs = 10000;  // as the container wall's
// Written into a checkpoint's folder once runsc saved it whole.
constexpr const char* kCheckpointMark = "complete";

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
    c.hibernate = true;               // runsc checkpoint and restore
    c.memory_snapshots = true;        // the same save, kept beside a template's files
    // gVisor's network stack takes the namespace's links when the sandbox starts or is
    // restored, and never after.
    c.live_links = false;
    c.restore_relinks = true;
    // gVisor's memory (its MemTotal, what its kernel manages) is sized when it boots; a
    // warm sandbox claimed for another size would show the wrong one.
    c.fixed_shape = true;
    return c;
  }

  std::string Parent() const { return "sbx-" + o_.instance + "-gvisor"; }
  std::string Group(const std::string& id) const { return Parent() + "/" + id; }
  CgroupDir Cgroup(const std::string& id) const { return CgroupDir(mode_, Group(id), o_.cgroup_root); }

  // runsc with the options every call shares; with `netns`, in that network namespace
  // (nsenter: util-linux, on every Debian), on gVisor's own network stack (netstack),
  // which takes the namespace's links when the sandbox starts or is restored.
  // runsc 2024-07 takes any namespace that shows /proc/sys/net/core/rmem_default for the
  // host's and refuses to start netstack there, and 6.x kernels show it in every
  // namespace: runsc runs in a mount namespace of its own where that folder is covered.
  std::vector<std::string> Runsc(std::vector<std::string> args, const std::string& netns = "") const {
    std::vector<std::string> argv = {o_.runsc,    "--root", o_.state_dir, "--network", netns.empty() ? "none" : "sandbox",
                                     "--overlay2", "none",   "--host-uds", "all"};
    if (!o_.platform.empty()) argv.insert(argv.begin() + 1, {"--platform", o_.platform});
    if (!netns.empty())
      argv.insert(argv.begin(), {"nsenter", "--net=" + netns, "--", "unshare", "--mount", "--propagation", "private",
                                 "--", "sh", "-c",
                                 "mount -t tmpfs -o ro,size=4k sbx /proc/sys/net/core && exec \"$@\"", "sh"});
    argv.insert(argv.end(), args.begin(), args.end());
    return argv;
  }

  // runsc's signal to the agent (PID 1 in the sandbox): SIGUSR1 closes its host socket
  // for a checkpoint, SIGUSR2 opens it again (agent/server.h, SetRelisten).
  Status SignalAgent(const std::string& id, const std::string& dir, const char* sig) {
    auto r = Reaper::Get().Run(Runsc({"kill", id, sig}), "", 0, nullptr, 10000, BundleOf(dir) + "/runsc.log");
    if (!r.ok()) return r.error();
    if (r->exit_code != 0) return MakeError(Code::kInternal, std::string("runsc kill ") + sig + ": " + Tail(BundleOf(dir) + "/runsc.log"));
    return OkStatus();
  }

  // Waits until the agent answers (open; given `inst`, through its dialer and only while
  // its sandbox lives), or until its socket's file is gone (closed: the agent removes it
  // once it closed the socket; the file would still connect).
  Status AwaitAgent(const std::string& dir, bool open, const Instance* inst = nullptr) {
    agent::DialerPtr addr = inst ? inst->agent : nullptr;
    if (open && !addr) {
      SBX_ASSIGN_OR_RETURN(addr, AgentOf(dir));
    }
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kReadyTimeoutMs);
    while (open ? !agent::PingBlocking(*addr, 1000).ok() : fs::Exists(CtlOf(dir) + "/a.sock")) {
      if ((inst && !ProcessAlive(*inst)) || std::chrono::steady_clock::now() > deadline)
        return MakeError(Code::kInternal, std::string("the sandbox's agent did not ") + (open ? "open" : "close") +
                                              " its socket");
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return OkStatus();
  }

  // After a save that let the sandbox run on (or one refused): its agent listens again
  // (waiting, given `inst`, only while the sandbox lives).
  void ListenAgain(const StartSpec& spec, const Instance* inst = nullptr) {
    Status open = SignalAgent(spec.id, spec.dir, "SIGUSR2");
    if (open.ok()) open = AwaitAgent(spec.dir, /*open=*/true, inst);
    if (!open.ok()) SBX_LOG(kWarn) << "sandbox " << spec.id << ": " << open.error().message;
  }

  // A sandbox made from a memory template (its topmost layer) has the template's files,
  // and its first start restores the template's memory.
  Status Prepare(const StartSpec& spec) override { return files_.Prepare(spec, Kind()); }

  Result<Instance> Start(const StartSpec& spec) override {
    auto from = OverlayFiles::TakeMemoryMark(spec.dir);
    if (!from) return Launch(spec, "");
    // The template's memory restores only into a sandbox of its shape; otherwise a boot on its files.
    auto shape = gvisor::ReadShape(*from);
    std::string why = shape.ok() ? gvisor::Mismatch(*shape, spec) : shape.error().message;
    if (why.empty()) {
      const auto t0 = std::chrono::steady_clock::now();
      auto inst = Launch(spec, *from);
      if (inst.ok()) {
        FaultPoint("gvisor.restored");  // running as the template, not yet renamed
        const auto t1 = std::chrono::steady_clock::now();
        Status renewed = RenewCopy(spec);
        if (renewed.ok()) {
          auto ms = [](auto d) { return std::chrono::duration_cast<std::chrono::milliseconds>(d).count(); };
          SBX_LOG(kInfo) << "sandbox " << spec.id << ": restored from its template's memory in " << ms(t1 - t0)
                         << " ms, renamed in " << ms(std::chrono::steady_clock::now() - t1) << " ms";
          inst->loaded_memory = true;
          return inst;
        }
        (void)Stop(spec.id, *inst);
        return renewed.error().Wrap("starting sandbox " + spec.id + " from its template's memory");
      }
      why = inst.error().message;
    }
    SBX_LOG(kWarn) << "sandbox " << spec.id << " boots on its template's files instead of restoring its memory: " << why;
    return Launch(spec, "");
  }

  // A copy restored from another sandbox's memory takes its own name: the agent sets it,
  // run by runsc with the one capability that takes (which no process of the sandbox has).
  // Its clock and randomness are the host's already (gVisor's kernel reads both from it).
  Status RenewCopy(const StartSpec& spec) {
    const std::string log = BundleOf(spec.dir) + "/renew.log";
    auto r = Reaper::Get().Run(Runsc({"exec", "--cap", "CAP_SYS_ADMIN", spec.id,
                                      std::string(gvisor::kApiInside) + "/" + o_.agent_copy, "--set-hostname",
                                      spec.hostname}),
                               "", 0, nullptr, 10000, log);
    if (!r.ok()) return r.error();
    if (r->exit_code != 0) return MakeError(Code::kInternal, "setting the copy's hostname: " + Tail(log));
    return OkStatus();
  }

  // Starts the sandbox: `runsc run`, or with `image` a `runsc restore` of the checkpoint
  // there (the same bundle, a new network namespace with the link the spec has now:
  // netstack takes its links and addresses anew).
  Result<Instance> Launch(const StartSpec& spec, const std::string& image) {
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
    // The sandbox's network namespace: runsc runs in it, and gVisor's network stack takes
    // its link (the veth behind the link's rules on the host) when the sandbox starts.
    // That link is paced at the type's rate: gVisor's TCP recovers from the firewall's
    // drops of offloaded frames only after seconds of back-off (a stream stalled 5 to 45
    // s at a time, 12 MB/s instead of 114), and waits at a queue without a stall.
    const std::string netns = NetnsOf(spec.dir);
    if (auto st = MakeNetns(netns); !st.ok()) return fail(st.error());
    if (spec.link) {
      UniqueFd ns(::open(netns.c_str(), O_RDONLY | O_CLOEXEC));
      if (!ns.valid()) return fail(ErrnoError("open " + netns));
      if (auto st = netlink::AttachVeth(*spec.link, ns.get(), /*pace=*/true); !st.ok()) return fail(st.error());
    }
    const std::string bundle = BundleOf(spec.dir);
    if (auto st = fs::MkdirAll(bundle, 0700); !st.ok()) return fail(st.error());
    if (auto st = fs::WriteFile(bundle + "/config.json", gvisor::BundleSpec(o_, spec, "/" + Group(spec.id)).dump(), true, 0600);
        !st.ok())
      return fail(st.error());
    const std::string log = bundle + "/runsc.log", pid_file = bundle + "/pid";
    (void)::unlink(log.c_str());
    // runsc, and every process it leaves (the sentry, the gofer), in the sandbox's cgroup.
    std::vector<std::string> how = {"run"};
    if (!image.empty()) how = {"restore", "--image-path", image};
    how.insert(how.end(), {"--detach", "--bundle", bundle, "--pid-file", pid_file, spec.id});
    const auto t0 = std::chrono::steady_clock::now();
    auto ran = Reaper::Get().Run(Runsc(how, netns), "", 0, [&](pid_t pid) { return cg.AddProcess(pid); },
                                 kReadyTimeoutMs, log);
    if (!ran.ok()) return fail(ran.error());
    if (!image.empty())
      SBX_LOG(kInfo) << "sandbox " << spec.id << ": runsc restore took "
                     << std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count()
                     << " ms";
    if (ran->exit_code != 0)
      return fail(MakeError(Code::kInternal, std::string("runsc could not ") +
                                                 (image.empty() ? "start" : "restore") + " the sandbox: " + Tail(log)));
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
    // A restored agent listens again when told (it closed its socket for the checkpoint).
    if (!image.empty())
      if (auto st = SignalAgent(spec.id, spec.dir, "SIGUSR2"); !st.ok()) return fail(st.error());
    // The agent answers once it has set up and listens.
    if (!AwaitAgent(spec.dir, /*open=*/true, &inst).ok())
      return fail(MakeError(Code::kInternal, "the sandbox's agent did not come up: " + Tail(log)));
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

  // The host's limits only: gVisor's own memory stays what it booted with (the pool
  // serves creates of its own shape only: Capabilities::fixed_shape).
  Status UpdateLimits(const std::string& id, const Limits& l) override {
    return Cgroup(id).SetLimits(HostLimits(l));
  }
  Status SetDiskLimit(const std::string& dir, uint64_t bytes) override { return files_.SetLimit(dir, bytes); }
  bool HasFiles(const std::string& dir) override { return files_.Has(dir); }
  Result<Captured> CaptureFiles(const std::string& dir, const std::string& dst) override {
    return files_.Capture(dir, dst);
  }
  Status RemoveLayer(const std::string& path) override { return files_.RemoveLayer(path); }

  // A memory template: the sandbox saved as for a hibernate (its agent's host socket closed
  // meanwhile), left running, then its files captured beside, held still by the freezer.
  // runsc lets the sandbox go on once its save is written: what it changes in the moment
  // before the freeze is in the files and not in the memory.
  Result<Captured> CaptureMemory(const StartSpec& spec, const Instance& inst, const std::string& dst) override {
    if (::mkdir(dst.c_str(), 0755) != 0) return ErrnoError("mkdir " + dst);
    const std::string memory = dst + "/" + kCapturedMemory;
    if (::mkdir(memory.c_str(), 0700) != 0) return ErrnoError("mkdir " + memory);
    SBX_RETURN_IF_ERROR(SignalAgent(spec.id, spec.dir, "SIGUSR1"));
    Status st = AwaitAgent(spec.dir, /*open=*/false);
    if (st.ok()) st = Checkpoint(spec.id, memory, /*leave_running=*/true, "snapshot without memory");
    if (st.ok()) st = gvisor::WriteShape(memory, gvisor::ShapeOf(spec));
    if (st.ok()) st = WriteMemoryWall(memory, Kind());
    Result<Captured> files = MakeError(Code::kInternal, "not captured");
    if (st.ok()) st = Freeze(spec.id);
    if (st.ok()) {
      files = files_.CaptureBesideMemory(spec.dir, dst);
      st = Thaw(spec.id);
    }
    ListenAgain(spec, &inst);
    if (!st.ok()) return st.error();
    return files;
  }

  // Hibernate: runsc saves the sandbox (gVisor's kernel, with every process, and its
  // memory) into `dir`/image, and the sandbox ends. The agent's host socket cannot be in a
  // checkpoint: the agent closes it first (and opens it again if the sandbox runs on).
  // runsc either ends the sandbox after a save, failed or not, or lets it run on after
  // either: a first save lets it run on, so that a refusal changes nothing; once that
  // one worked, a second ends it at the instant of its save, so that nothing runs after
  // the image (files written then would be ahead of it). If the second fails (something
  // changed in between) the first serves.
  Status Hibernate(const StartSpec& spec, const Instance& inst, const std::string& dir) override {
    SBX_RETURN_IF_ERROR(DropCheckpoint(dir));
    SBX_RETURN_IF_ERROR(fs::MkdirAll(dir + "/trial", 0700));
    SBX_RETURN_IF_ERROR(SignalAgent(spec.id, spec.dir, "SIGUSR1"));
    Status st = AwaitAgent(spec.dir, /*open=*/false);
    if (st.ok()) st = Checkpoint(spec.id, dir + "/trial", /*leave_running=*/true);
    if (!st.ok()) {
      ListenAgain(spec);
      return st;
    }
    const std::string image = ImageOf(dir);
    SBX_RETURN_IF_ERROR(fs::MkdirAll(image, 0700));
    if (Status last = Checkpoint(spec.id, image, /*leave_running=*/false); last.ok()) {
      (void)fs::RemoveTree(dir + "/trial");
    } else {
      SBX_LOG(kWarn) << "sandbox " << spec.id << ": its last save failed, the first serves: " << last.error().message;
      SBX_RETURN_IF_ERROR(fs::RemoveTree(image));
      if (::rename((dir + "/trial").c_str(), image.c_str()) != 0) return ErrnoError("rename the first save");
    }
    SBX_RETURN_IF_ERROR(fs::WriteFile(dir + "/" + kCheckpointMark, "", true, 0600));
    return Stop(spec.id, inst);
  }
  uint64_t CheckpointBytes(const std::string& id) override { return 2 * Cgroup(id).MemoryCurrent(); }
  bool HasCheckpoint(const std::string& dir) override { return fs::Exists(dir + "/" + kCheckpointMark); }

  Result<Instance> Restore(const StartSpec& spec, const std::string& dir) override {
    if (!HasCheckpoint(dir)) return MakeError(Code::kFailedPrecondition, "no whole checkpoint in " + dir);
    return Launch(spec, ImageOf(dir));
  }

  static std::string ImageOf(const std::string& dir) { return dir + "/image"; }

  // `runsc checkpoint` of the running sandbox into the folder `image` (which exists);
  // runsc's output goes to runsc.log beside it; a refusal says to do `instead`.
  Status Checkpoint(const std::string& id, const std::string& image, bool leave_running,
                    const std::string& instead = "pause with mode \"freeze\"") {
    std::vector<std::string> args = {"checkpoint", "--image-path", image};
    if (leave_running) args.emplace_back("--leave-running");
    // Uncompressed: a resume of a sandbox holding 100 MB of Python objects took 0.9 s so,
    // against 1.3 s compressed (sbx bench hibernate), for 13 times the disk.
    args.insert(args.end(), {"--compression", "none", id});
    const std::string log = image + "/../runsc.log";
    auto r = Reaper::Get().Run(Runsc(args), "", 0, nullptr, kSaveTimeoutMs, log);
    if (!r.ok()) return r.error();
    if (r->exit_code != 0) return gvisor::SaveRefused(log, instead);
    return OkStatus();
  }

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
      // Generous: a restart re-adopts every sandbox at once, and on a busy host a thawed
      // agent may take seconds to answer; an agent that is gone refuses at once.
      SBX_RETURN_IF_ERROR(agent::PingBlocking(*addr, kAdoptPingMs));
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

  Status AttachLink(const std::string& id, const Instance&, const NetLink&) override {
    return MakeError(Code::kFailedPrecondition,
                     "gVisor's network stack takes its links when the sandbox starts: stop and start sandbox " + id +
                         " (or hibernate and resume it) to give it a network");
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
