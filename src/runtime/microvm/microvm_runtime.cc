// The microVM wall: each sandbox is a QEMU `microvm` guest with a kernel of its own.
// Its root is an overlay, inside the guest, of the layers' ext4 images (read-only disks,
// one per layer, cached: guest_files.h) under the sandbox's own disk; its agent is the
// same sbx-agent as PID 1, reached through a relay process beside QEMU (agent/vm_relay.h)
// over vsock where the host has vhost-vsock, else over a virtio-serial port. QEMU and the relay
// run in the sandbox's cgroup (below sbx-<instance>-microvm), as a uid of the sandbox's
// own, in an empty root, under QEMU's system-call filter.
#include <arpa/inet.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <thread>

#include "agent/vm_config.h"
#include "base/fault.h"
#include "base/fs.h"
#include "base/log.h"
#include "base/proc.h"
#include "base/reaper.h"
#include "runtime/cgroup.h"
#include "runtime/microvm/guest_files.h"
#include "runtime/microvm/qemu.h"
#include "runtime/microvm/vm_host.h"
#include "runtime/microvm/vm_memory.h"
#include "runtime/netlink.h"
#include "runtime/overlay_files.h"
#include "runtime/process_handle.h"
#include "runtime/runtime.h"
#include "runtime/unix_dialer.h"

namespace sbx::runtime {
namespace {

using microvm::GuestKernel;
using microvm::LayerImages;
using microvm::Ipv4;
using microvm::Ipv6;
using microvm::MacOf;
using microvm::Tail;
using microvm::VmUids;
using microvm::WhatItSaid;

// Under TCG a boot takes seconds, more with many at once on few cores.
constexpr int kBootTimeoutMs = 90000;
constexpr int kProbeTimeoutMs = 5000;
// QEMU's own memory beyond the guest's: its code, the device models, and (TCG) the
// translation cache.
constexpr uint64_t kVmmOverheadBytes = 192ull << 20;
constexpr uint64_t kDefaultDiskBytes = 4ull << 30;
constexpr uint64_t kMinMemoryMb = 128;
constexpr int kSyncTimeoutMs = 10000;
// A save writes the guest's memory at disk speed.
constexpr int kSaveTimeoutMs = 120000;

// QEMU's folder (its user's: its sockets, pid file and logs).
std::string VmDir(const std::string& dir) { return dir + "/vm"; }
// The relay's listening socket, in a folder of root's: QEMU's user could swap a name in
// its own folder for a link to another sandbox's socket.
std::string CtlDir(const std::string& dir) { return dir + "/ctl"; }
std::string OwnDisk(const std::string& dir) { return dir + "/disk.ext4"; }

class MicrovmRuntime : public Runtime {
 public:
  explicit MicrovmRuntime(MicrovmOptions o)
      : o_(std::move(o)),
        mode_(DetectCgroupMode(o_.cgroup_root)),
        kernel_{o_.kernel_dir},
        images_(o_.state_dir + "/images", o_.uid_base),
        uids_(o_.vm_uid_base, o_.vm_uid_count) {}

  ~MicrovmRuntime() override {
    if (probe_.joinable()) probe_.join();
  }

  // Builds the initramfs and settles the accelerator (a probe boot, in the background,
  // for "auto").
  Status Init() {
    SBX_RETURN_IF_ERROR(kernel_.Check());
    // QEMU runs as the VM's own user: it reads the initramfs and the layers' images here.
    SBX_RETURN_IF_ERROR(fs::MkdirAll(o_.state_dir, 0711));
    if (::chmod(o_.state_dir.c_str(), 0711) != 0) return ErrnoError("chmod " + o_.state_dir);
    SBX_RETURN_IF_ERROR(images_.Open());
    SBX_ASSIGN_OR_RETURN(vsock_, microvm::UseVsock(o_.channel, "/dev/vhost-vsock"));
    if (vsock_ && !kernel_.HasVsockModules()) {
      if (o_.channel == "vsock")
        return MakeError(Code::kFailedPrecondition, "the guest kernel folder " + kernel_.dir +
                                                        " has no vsock modules (make it anew with scripts/vm/guest.sh)");
      vsock_ = false;
    }
    SBX_LOG(kInfo) << "isolation microvm: the agent's channel is " << (vsock_ ? "vsock" : "a virtio-serial port");
    initrd_ = o_.state_dir + "/initramfs.cpio";
    // The agent without its symbols (a smaller initramfs boots sooner under TCG).
    std::string agent = o_.agent_path;
    const std::string stripped = o_.state_dir + "/sbx-agent.guest";
    auto s = Reaper::Get().Run({"strip", "--strip-unneeded", "-o", stripped, o_.agent_path}, "", 0, nullptr, 60000);
    if (s.ok() && s->exit_code == 0) agent = stripped;
    SBX_RETURN_IF_ERROR(microvm::WriteInitramfs(kernel_, agent, initrd_));
    if (o_.accel == "kvm" || o_.accel == "tcg") {
      accel_ = o_.accel;
    } else {
      probe_ = std::thread([this] {
        Status st = microvm::ProbeKvm(o_.qemu, kernel_.vmlinux(), initrd_, kProbeTimeoutMs);
        std::lock_guard<std::mutex> l(mu_);
        accel_ = st.ok() ? "kvm" : "tcg";
        SBX_LOG(kInfo) << "isolation microvm: " << accel_
                       << (st.ok() ? " (a KVM guest booted)" : " (KVM cannot run a guest here: " + st.error().message + ")");
        cv_.notify_all();
      });
    }
    return OkStatus();
  }

  std::string Kind() const override { return "microvm"; }
  std::string Accelerator() const override {
    std::lock_guard<std::mutex> l(mu_);
    return accel_;
  }

  std::string AgentChannel() const override { return vsock_ ? "vsock" : "serial"; }

  Capabilities Caps() const override {
    Capabilities c;
    c.freeze = true;  // the cgroup freezer holds QEMU (and with it every vCPU)
    // QEMU saves the whole VM, memory and devices (microvm/vm_memory.h); sbxd's
    // connections go through the relay, which ends with QEMU.
    c.hibernate = true;
    c.memory_snapshots = true;  // the same save, kept as a template's layer
    c.fixed_shape = true;       // the guest's vCPUs and RAM are its boot's
    c.live_links = false;       // and its network device
    return c;
  }

  std::string Parent() const { return "sbx-" + o_.instance + "-microvm"; }
  CgroupDir Cgroup(const std::string& id) const { return CgroupDir(mode_, Parent() + "/" + id, o_.cgroup_root); }

  static CgroupLimits HostLimits(const Limits& l) {
    return {l.cpus, MemoryMb(l) * (1ull << 20) + kVmmOverheadBytes, 256};
  }
  static uint64_t MemoryMb(const Limits& l) {
    uint64_t mb = l.memory_bytes >> 20;
    return mb < kMinMemoryMb ? kMinMemoryMb : mb;
  }

  // A sandbox made from a memory template (its topmost layer) starts on a copy of the
  // template's disk, which its memory knows, and its first start loads that memory.
  Status Prepare(const StartSpec& spec) override {
    SBX_RETURN_IF_ERROR(RefuseMemoryCaptures(spec.layers, Kind()));
    SBX_RETURN_IF_ERROR(fs::MkdirAll(spec.dir, 0700));
    if (!spec.layers.empty() && IsMemoryLayer(spec.layers[0])) {
      SBX_RETURN_IF_ERROR(microvm::CopyTemplateDisk(spec.layers[0] + "/" + kVmDiskLayer, OwnDisk(spec.dir),
                                                    DiskBytes(spec.limits), spec.id));
      return fs::WriteFileAtomic(MemoryMarker(spec.dir), spec.layers[0], 0600);
    }
    return microvm::MakeOwnDisk(OwnDisk(spec.dir), DiskBytes(spec.limits));
  }
  static uint64_t DiskBytes(const Limits& l) { return l.disk_bytes ? l.disk_bytes : kDefaultDiskBytes; }
  static std::string MemoryMarker(const std::string& dir) { return dir + "/memory-from"; }
  static bool IsMemoryLayer(const std::string& layer) {
    return fs::Exists(layer + "/" + microvm::kSavedShape) && fs::Exists(layer + "/" + kVmDiskLayer);
  }

  std::string AccelForStart() {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait_for(l, std::chrono::milliseconds(kProbeTimeoutMs * 3), [&] { return !accel_.empty(); });
    return accel_.empty() ? "tcg" : accel_;
  }

  Result<Instance> Start(const StartSpec& spec) override {
    auto from = fs::ReadFile(MemoryMarker(spec.dir), 4096);
    if (!from.ok()) return Boot(spec, "", false);
    (void)::unlink(MemoryMarker(spec.dir).c_str());  // once: a later start boots
    // The template's memory loads only into a VM of its shape; otherwise a boot on its files.
    std::string why = microvm::WhyNotLoad(microvm::ReadSavedShape(*from), Cpus(spec.limits), MemoryMb(spec.limits),
                                          spec.link.has_value(), !spec.binds.empty());
    if (why.empty()) {
      auto inst = Boot(spec, *from, true);
      if (inst.ok()) {
        inst->loaded_memory = true;
        return inst;
      }
      why = inst.error().message;
    }
    SBX_LOG(kWarn) << "sandbox " << spec.id << " boots on its template's files instead of loading its memory: " << why;
    return Boot(spec, "", false);
  }
  static int Cpus(const Limits& l) { return l.cpus > 0 ? l.cpus : 1; }

  // Boots the VM, or with `saved` (a folder SaveVm filled) loads it from there instead;
  // `copy`: the saved VM was another sandbox (a template's), whose name and addresses
  // this one does not keep.
  Result<Instance> Boot(const StartSpec& spec, const std::string& saved, bool copy) {
    std::optional<microvm::SavedShape> shape;
    if (!saved.empty()) {
      SBX_ASSIGN_OR_RETURN(microvm::SavedShape s, microvm::ReadSavedShape(saved));
      shape = s;
    }
    if (mode_ == CgroupMode::kNone)
      return MakeError(Code::kFailedPrecondition, "this host has no usable cgroup hierarchy");
    if (!spec.binds.empty() && !kernel_.HasDiskModules())
      return MakeError(Code::kFailedPrecondition, "the guest kernel folder " + kernel_.dir +
                                                      " has no 9p modules for disks (make it anew with scripts/vm/guest.sh)");
    std::vector<std::string> images, roots;
    for (const auto& layer : spec.layers) {
      // A memory template's files are in the disk of each sandbox made from it.
      if (IsMemoryLayer(layer)) continue;
      SBX_ASSIGN_OR_RETURN(LayerImages::Disk disk, images_.ImageOf(layer));
      images.push_back(std::move(disk.image));
      roots.push_back(std::move(disk.root));
    }
    const std::string accel = AccelForStart();
    if (shape) {
      // The saved devices and machine come back as they were.
      if (shape->accel != accel)
        return MakeError(Code::kFailedPrecondition, "sandbox " + spec.id + " was saved under " + shape->accel +
                                                        " and this sbxd runs microVMs under " + accel);
      if (shape->layers != static_cast<int>(images.size()) || shape->tap != spec.link.has_value() ||
          !spec.binds.empty() || shape->vsock != vsock_)
        return MakeError(Code::kFailedPrecondition, "sandbox " + spec.id + "'s saved VM has other devices than it has now");
    }
    SBX_ASSIGN_OR_RETURN(uid_t uid, uids_.Take(spec.id));
    CgroupDir cg = Cgroup(spec.id);
    SBX_RETURN_IF_ERROR(cg.Kill());
    SBX_RETURN_IF_ERROR(cg.Create(HostLimits(spec.limits)));
    const std::string vm = VmDir(spec.dir);
    auto fail = [&](Error e) -> Result<Instance> {
      Forget(spec.id);
      (void)cg.Kill();
      (void)cg.Remove();
      if (spec.link) (void)netlink::DeleteLink(spec.link->host_if);
      uids_.Release(spec.id);
      return e.Wrap("starting sandbox " + spec.id);
    };
    (void)fs::RemoveTree(vm);
    // QEMU runs as `uid`: the sandbox's folder lets it through to its own folder and disk,
    // which are its; nothing else of the sandbox's or another's is.
    if (::chmod(spec.dir.c_str(), 0711) != 0) return fail(ErrnoError("chmod " + spec.dir));
    if (::mkdir(vm.c_str(), 0700) != 0 || ::chown(vm.c_str(), uid, uid) != 0) return fail(ErrnoError("mkdir " + vm));
    // The disk is QEMU's user's alone (the sandbox's folder lets every VM's user through).
    if (::chown(OwnDisk(spec.dir).c_str(), uid, uid) != 0 || ::chmod(OwnDisk(spec.dir).c_str(), 0600) != 0)
      return fail(ErrnoError("chown the sandbox's disk"));
    // A disk smaller than the sandbox's disk_mb (a memory template's copy) grows: its file
    // before a boot (the guest grows a file system smaller than its disk as it mounts it),
    // through QEMU after a load.
    auto grow = microvm::GrowDiskFile(OwnDisk(spec.dir), DiskBytes(spec.limits), /*now=*/!shape);
    if (!grow.ok()) return fail(grow.error());
    const std::string ctl = CtlDir(spec.dir);
    (void)fs::RemoveTree(ctl);
    if (::mkdir(ctl.c_str(), 0700) != 0) return fail(ErrnoError("mkdir " + ctl));
    agent::VmConfig cfg;
    cfg.hostname = spec.hostname;
    cfg.layers = static_cast<int>(images.size());
    cfg.layer_roots = roots;
    cfg.no_new_privs = spec.no_new_privs;
    cfg.nameserver = spec.nameserver;
    cfg.tmp_bytes = MemoryMb(spec.limits) * (1ull << 20) / 2;
    for (const auto& b : spec.binds) cfg.disks.push_back(b.target);
    cfg.vsock = vsock_;
    microvm::VmSpec vs;
    if (spec.link) {
      if (auto st = netlink::CreateTap(*spec.link, uid); !st.ok()) return fail(st.error());
      cfg.address = Ipv4(spec.link->sandbox);
      cfg.gateway = Ipv4(spec.link->gateway);
      cfg.prefix = spec.link->prefix;
      if (spec.link->has_v6) {
        cfg.address6 = Ipv6(spec.link->sandbox6);
        cfg.gateway6 = Ipv6(spec.link->gateway6);
      }
      vs.tap = spec.link->host_if;
      vs.mac = cfg.mac = MacOf(*spec.link);
    }
    // The VM's uid is unique on the host while it runs, as a vsock CID must be.
    vs.vsock_cid = vsock_ ? uid : 0;
    vs.qemu = o_.qemu;
    vs.accel = accel;
    vs.kernel = kernel_.vmlinux();
    vs.initrd = initrd_;
    vs.config = cfg.ToJson();
    vs.cpus = shape ? shape->cpus : Cpus(spec.limits);
    vs.memory_mb = shape ? shape->memory_mb : MemoryMb(spec.limits);
    vs.incoming = shape.has_value();
    vs.shared_ram = true;
    vs.own_disk = OwnDisk(spec.dir);
    vs.layer_images = images;
    for (const auto& b : spec.binds) vs.shared.push_back(b.source);
    microvm::Launch how;
    how.agent = o_.agent_path;
    how.vm = vm;
    how.uid = uid;
    if (!vs.shared.empty()) how.share_ids = std::to_string(o_.uid_base) + ":" + std::to_string(o_.uid_count);
    if (shape) {
      how.ram_from = saved + "/" + microvm::kSavedRam;
      how.incoming = saved + "/" + microvm::kSavedMemory;
    }
    auto ran = Reaper::Get().Run(microvm::LaunchArgv(how, vs), "", 0, [&](pid_t p) { return cg.AddProcess(p); }, 10000);
    if (!ran.ok()) return fail(ran.error());
    if (ran->exit_code != 0) return fail(MakeError(Code::kInternal, "QEMU could not start: " + ran->output));
    auto started = microvm::WaitForQemu(vm, [&] { return cg.Pids(); });
    if (!started.ok()) return fail(started.error());
    auto& [pid, pidfd] = *started;
    auto ram = microvm::RamIdentity(pid);
    if (!ram.ok()) return fail(ram.error());
    if (shape) {
      FaultPoint("microvm.loading");  // QEMU waits for its saved state
      if (Status st = microvm::RunLoadedVm(vm, uid, kBootTimeoutMs); !st.ok())
        return fail(MakeError(st.error().code, st.error().message + ": " + WhatItSaid(vm)));
    }
    auto relay = Reaper::Get().Run({o_.agent_path, "--vm-relay", vm, vsock_ ? "vsock:" + std::to_string(uid) : "agent.sock",
                                    "console.sock", "console.log", "../ctl/relay.sock", std::to_string(uid),
                                    std::to_string(pid)},
                                   "", 0, [&](pid_t p) { return cg.AddProcess(p); }, 10000);
    if (!relay.ok()) return fail(relay.error());
    if (relay->exit_code != 0) return fail(MakeError(Code::kInternal, "the agent's relay: " + relay->output));
    Instance inst;
    SetVm(&inst, pid, std::move(pidfd), uid, vs.accel, vs.tap, *ram);
    auto addr = DialerInFolder(ctl, "relay.sock");
    if (!addr.ok()) return fail(addr.error());
    inst.agent = *addr;
    Remember(spec.id, inst.agent);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kBootTimeoutMs);
    while (!agent::PingBlocking(*inst.agent, 1000).ok()) {
      if (!ProcessAlive(inst))
        return fail(MakeError(Code::kInternal, "the VM stopped while it booted: " + WhatItSaid(vm)));
      if (std::chrono::steady_clock::now() > deadline)
        return fail(MakeError(Code::kInternal, "the VM's agent did not come up: " + WhatItSaid(vm)));
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    // A loaded VM's clock stood still since its save, and its kernel's random state is
    // the saved one's.
    if (shape) {
      if (Status st = microvm::RenewLoadedVm({vm, uid, *inst.agent, copy ? &cfg : nullptr, *grow ? DiskBytes(spec.limits) : 0},
                                             kSyncTimeoutMs);
          !st.ok())
        return fail(st.error());
    }
    return inst;
  }

  // The process handle's saved state, with the VM's uid, accelerator, tap and RAM beside it.
  static void SetVm(Instance* inst, pid_t pid, UniqueFd pidfd, uid_t uid, const std::string& accel,
                    const std::string& tap, std::pair<uint64_t, uint64_t> ram) {
    SetProcess(inst, pid, std::move(pidfd));
    auto j = nlohmann::json::parse(inst->saved_state);
    j["uid"] = uid;
    j["accel"] = accel;
    j["tap"] = tap;
    j["ram"] = {ram.first, ram.second};
    inst->saved_state = j.dump();
  }

  Status Stop(const std::string& id, const Instance& inst) override {
    // The guest's dirty pages go to its disk first, and its disk's file system is frozen
    // (clean: a capture of the stopped sandbox can copy it). A VM that does not answer in
    // time is ended as it is: its disk then holds what its kernel had written.
    if (inst.agent && ProcessAlive(inst)) {
      (void)Cgroup(id).Thaw();  // a paused VM runs for its sync
      if (Status st = agent::SyncBlocking(*inst.agent, kSyncTimeoutMs, agent::SyncMode::kFreeze); !st.ok())
        SBX_LOG(kWarn) << "sandbox " << id << ": its files were not synced before the stop: " << st.error().message;
    }
    return EndVm(id, inst);
  }

  // Ends QEMU and what serves it, and takes the VM's tap and uid back.
  Status EndVm(const std::string& id, const Instance& inst) {
    Forget(id);
    CgroupDir cg = Cgroup(id);
    SBX_RETURN_IF_ERROR(cg.Kill());
    if (const ProcessHandle* p = ProcessOf(inst); p && p->pidfd.valid()) proc::PidfdWait(p->pidfd.get(), 10000);
    SBX_RETURN_IF_ERROR(cg.Remove());
    uids_.Release(id);
    // The tap outlives QEMU (it is persistent): it goes with the VM.
    if (auto tap = Saved(inst.saved_state, "tap"); tap.is_string() && !tap.get<std::string>().empty())
      (void)netlink::DeleteLink(tap.get<std::string>());
    return OkStatus();
  }

  static nlohmann::json Saved(const std::string& saved_state, const char* key) {
    auto j = nlohmann::json::parse(saved_state, nullptr, false);
    return j.is_object() && j.contains(key) ? j[key] : nlohmann::json();
  }

  // What a save needs of a running VM, and the shape it is saved with.
  Result<std::pair<microvm::RunningVm, microvm::SavedShape>> SaveOf(const StartSpec& spec, const Instance& inst) {
    // QEMU cannot save a VM that shares a folder (9p keeps state about the host's files).
    if (!spec.binds.empty())
      return MakeError(Code::kFailedPrecondition,
                       "sandbox " + spec.id + " has disks, which QEMU shares into its VM as folders: a microVM with a "
                       "disk cannot have its memory saved: pause it without hibernate, or snapshot its files only");
    auto uid = Saved(inst.saved_state, "uid");
    auto accel = Saved(inst.saved_state, "accel");
    auto ram = Saved(inst.saved_state, "ram");
    const ProcessHandle* qemu = ProcessOf(inst);
    if (!uid.is_number_unsigned() || !accel.is_string() || !qemu || !ram.is_array() || ram.size() != 2 ||
        !ram[0].is_number_unsigned() || !ram[1].is_number_unsigned() || !inst.agent)
      return MakeError(Code::kFailedPrecondition,
                       "sandbox " + spec.id + "'s VM was started by an earlier sbxd that cannot save it: stop and start it first");
    microvm::RunningVm running{VmDir(spec.dir), uid.get<uid_t>(), qemu->pid, ram[0].get<uint64_t>(), ram[1].get<uint64_t>()};
    microvm::SavedShape shape;
    shape.accel = accel.get<std::string>();
    shape.cpus = Cpus(spec.limits);
    shape.memory_mb = MemoryMb(spec.limits);
    for (const auto& l : spec.layers) shape.layers += IsMemoryLayer(l) ? 0 : 1;
    shape.tap = spec.link.has_value();
    shape.vsock = vsock_;
    return std::make_pair(running, shape);
  }

  // Hibernate: QEMU saves the VM (memory and devices) into `dir` and ends; the disk stays
  // as the saved memory knows it until the restore.
  Status Hibernate(const StartSpec& spec, const Instance& inst, const std::string& dir) override {
    SBX_ASSIGN_OR_RETURN(auto save, SaveOf(spec, inst));
    auto& [running, shape] = save;
    SBX_RETURN_IF_ERROR(fs::RemoveTree(dir));
    SBX_RETURN_IF_ERROR(fs::MkdirAll(dir, 0700));
    const auto t0 = std::chrono::steady_clock::now();
    // Its disk's file system frozen first (journal flushed, marked clean): the disk of a
    // hibernated sandbox is whole, for a snapshot or a fresh boot; the restore thaws it.
    SBX_RETURN_IF_ERROR(agent::SyncBlocking(*inst.agent, kSyncTimeoutMs, agent::SyncMode::kFreeze));
    if (auto saved = microvm::SaveVm(running, shape, dir, kSaveTimeoutMs); !saved.ok()) {
      (void)agent::SyncBlocking(*inst.agent, kSyncTimeoutMs, agent::SyncMode::kThaw);
      return saved.error();
    }
    const auto t1 = std::chrono::steady_clock::now();
    Status st = EndVm(spec.id, inst);
    auto ms = [](auto d) { return std::chrono::duration_cast<std::chrono::milliseconds>(d).count(); };
    SBX_LOG(kInfo) << "sandbox " << spec.id << ": its VM saved in " << ms(t1 - t0) << " ms, ended in "
                   << ms(std::chrono::steady_clock::now() - t1) << " ms";
    return st;
  }
  // About what QEMU holds: the guest's pages it touched (zero pages are not saved).
  uint64_t CheckpointBytes(const std::string& id) override { return Cgroup(id).MemoryCurrent(); }
  bool HasCheckpoint(const std::string& dir) override { return microvm::ReadSavedShape(dir).ok(); }
  Result<Instance> Restore(const StartSpec& spec, const std::string& dir) override { return Boot(spec, dir, false); }

  // A memory template: the VM saved as for a hibernate, with its disk copied while it is
  // stopped (its file system frozen clean first), and then it runs on.
  Result<Captured> CaptureMemory(const StartSpec& spec, const Instance& inst, const std::string& dst) override {
    SBX_ASSIGN_OR_RETURN(auto save, SaveOf(spec, inst));
    auto& [running, shape] = save;
    if (::mkdir(dst.c_str(), 0755) != 0) return ErrnoError("mkdir " + dst);
    SBX_RETURN_IF_ERROR(agent::SyncBlocking(*inst.agent, kSyncTimeoutMs, agent::SyncMode::kFreeze));
    Result<uint64_t> saved = microvm::SaveVm(running, shape, dst, kSaveTimeoutMs);
    Result<uint64_t> disk = uint64_t{0};
    if (saved.ok()) disk = microvm::CopyDisk(OwnDisk(spec.dir), dst + "/" + kVmDiskLayer);
    if (saved.ok()) {
      // It goes on whether or not its disk was copied.
      Status go = microvm::ContinueVm(running.dir, running.uid, kSyncTimeoutMs);
      if (!go.ok()) SBX_LOG(kError) << "sandbox " << spec.id << " stays stopped after its capture: " << go.error().message;
    }
    (void)agent::SyncBlocking(*inst.agent, kSyncTimeoutMs, agent::SyncMode::kThaw);
    if (!saved.ok()) return saved.error();
    if (!disk.ok()) return disk.error();
    return Captured{"", *disk + *saved};
  }

  Status UpdateLimits(const std::string& id, const Limits& l) override {
    // The guest keeps the memory and vCPUs it booted with; the host's share follows.
    return Cgroup(id).SetLimits(HostLimits(l));
  }
  bool HasFiles(const std::string& dir) override { return fs::Exists(OwnDisk(dir)); }
  // The sandbox's own disk, copied whole as the layer (its /upper is the layer): the guest
  // freezes its file system for the copy when it runs; a stopped one was frozen at its stop.
  Result<Captured> CaptureFiles(const std::string& dir, const std::string& dst) override {
    const std::string id = std::filesystem::path(dir).filename().string();
    agent::DialerPtr live = LiveAgent(id);
    if (live) {
      (void)Cgroup(id).Thaw();  // core froze it: its agent freezes the disk instead
      if (Status st = agent::SyncBlocking(*live, kSyncTimeoutMs, agent::SyncMode::kFreeze); !st.ok()) {
        (void)Cgroup(id).Freeze();
        return st.error().Wrap("freezing the sandbox's disk for the capture");
      }
    } else if (!microvm::DiskIsClean(OwnDisk(dir))) {
      return MakeError(Code::kFailedPrecondition,
                       "sandbox " + id + "'s disk was not shut down cleanly (its VM ended without a stop): "
                       "start it once, then capture it");
    }
    Result<Captured> out = MakeError(Code::kInternal, "");
    if (::mkdir(dst.c_str(), 0755) != 0) {
      out = ErrnoError("mkdir " + dst);
    } else if (auto bytes = microvm::CopyDisk(OwnDisk(dir), dst + "/" + kVmDiskLayer); !bytes.ok()) {
      out = bytes.error();
    } else {
      out = Captured{"", *bytes};
    }
    if (live) {
      if (Status st = agent::SyncBlocking(*live, kSyncTimeoutMs, agent::SyncMode::kThaw); !st.ok())
        SBX_LOG(kWarn) << "sandbox " << id << ": thawing its disk after a capture: " << st.error().message;
      (void)Cgroup(id).Freeze();
    }
    return out;
  }
  Status RemoveLayer(const std::string& path) override {
    images_.Forget(path);
    return fs::RemoveTree(path);
  }
  void ForgetLayer(const std::string& path) override { images_.Forget(path); }

  Status Freeze(const std::string& id) override { return Cgroup(id).Freeze(); }
  Status Thaw(const std::string& id) override { return Cgroup(id).Thaw(); }

  Status Destroy(const std::string& id, const std::string& dir) override {
    Forget(id);
    CgroupDir cg = Cgroup(id);
    SBX_RETURN_IF_ERROR(cg.Kill());
    SBX_RETURN_IF_ERROR(cg.Remove());
    uids_.Release(id);
    return fs::RemoveTree(dir);
  }

  Result<Instance> Adopt(const StartSpec& spec, const std::string& saved_state, bool frozen) override {
    auto qemu = OpenSavedProcess(saved_state);
    if (!qemu.ok()) return MakeError(Code::kNotFound, "the sandbox's QEMU is gone");
    if (auto uid = Saved(saved_state, "uid"); uid.is_number_unsigned()) uids_.Note(spec.id, uid.get<uid_t>());
    SBX_ASSIGN_OR_RETURN(agent::DialerPtr addr, DialerInFolder(CtlDir(spec.dir), "relay.sock"));
    if (frozen) {
      SBX_RETURN_IF_ERROR(Freeze(spec.id));
    } else {
      SBX_RETURN_IF_ERROR(Thaw(spec.id));
      // A save cut short by sbxd's end left QEMU stopped.
      if (auto uid = Saved(saved_state, "uid"); uid.is_number_unsigned()) {
        if (Status st = microvm::ContinueVm(VmDir(spec.dir), uid.get<uid_t>(), 5000); !st.ok())
          SBX_LOG(kWarn) << "sandbox " << spec.id << ": its VM's monitor: " << st.error().message;
      }
      SBX_RETURN_IF_ERROR(agent::PingBlocking(*addr, 5000));
      // A capture cut short by sbxd's end may have left its disk frozen.
      (void)agent::SyncBlocking(*addr, kSyncTimeoutMs, agent::SyncMode::kThaw);
    }
    Remember(spec.id, addr);
    Instance inst;
    inst.agent = addr;
    SetProcess(&inst, std::move(*qemu));
    inst.saved_state = saved_state;
    return inst;
  }

  uint64_t CpuUsageNs(const std::string& id, const Instance&) override { return Cgroup(id).CpuUsageNs(); }
  Result<Usage> ReadUsage(const std::string& id, const Instance&) override {
    CgroupDir g = Cgroup(id);
    if (!g.Exists()) return MakeError(Code::kFailedPrecondition, "sandbox " + id + " has no control group now");
    // QEMU's memory (the guest's pages it touched, and its own) and the host processes
    // that serve the VM: the guest's processes are its kernel's, which the host cannot see.
    return Usage{g.CpuUsageNs(), g.MemoryCurrent(), g.Pids().size()};
  }

  Status AttachLink(const std::string& id, const Instance&, const NetLink&) override {
    return MakeError(Code::kFailedPrecondition,
                     "a microVM's network device is fixed when it boots: stop and start sandbox " + id +
                         " to give it a network");
  }
  Status DetachLink(const NetLink& link, bool wait) override {
    return wait ? netlink::DeleteLink(link.host_if) : netlink::DeleteLinkLater(link.host_if);
  }
  std::optional<LinkCounters> ReadLinkCounters(const NetLink& link) override {
    return netlink::ReadCounters(link.host_if);
  }

  // The agents of running VMs, for captures (the interface gives CaptureFiles a folder).
  void Remember(const std::string& id, agent::DialerPtr a) {
    std::lock_guard<std::mutex> l(mu_);
    live_[id] = std::move(a);
  }
  void Forget(const std::string& id) {
    std::lock_guard<std::mutex> l(mu_);
    live_.erase(id);
  }
  agent::DialerPtr LiveAgent(const std::string& id) {
    std::lock_guard<std::mutex> l(mu_);
    auto it = live_.find(id);
    return it == live_.end() ? nullptr : it->second;
  }

  std::vector<std::string> ListKernelObjects() override { return ListCgroupChildren(mode_, Parent(), o_.cgroup_root); }
  bool Alive(const Instance& inst) override { return ProcessAlive(inst); }

 private:
  MicrovmOptions o_;
  CgroupMode mode_;
  GuestKernel kernel_;
  LayerImages images_;
  VmUids uids_;
  std::string initrd_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::string accel_;  // empty while the probe runs
  bool vsock_ = false;  // the agents' channel (Init)
  std::map<std::string, agent::DialerPtr> live_;  // running VMs' agents, by sandbox id
  std::thread probe_;
};

}  // namespace

Result<std::unique_ptr<Runtime>> NewMicrovmRuntime(const MicrovmOptions& opts) {
  auto rt = std::make_unique<MicrovmRuntime>(opts);
  SBX_RETURN_IF_ERROR(rt->Init());
  return std::unique_ptr<Runtime>(std::move(rt));
}

}  // namespace sbx::runtime
