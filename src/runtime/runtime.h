// The runtime interface: a sandbox's lifecycle on one isolation kind (create its files,
// start, stop, destroy, re-adopt) and nothing else. What runs inside goes through the
// agent. Implementations are called by core::SandboxManager from its worker threads;
// each method is safe to call concurrently for different sandboxes.
#pragma once

#include <sys/types.h>

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agent/protocol.h"
#include "base/fs.h"
#include "base/result.h"
#include "base/unique_fd.h"

namespace sbx::runtime {

struct Limits {
  int cpus = 0;
  uint64_t memory_bytes = 0;
  int pids = 0;
  uint64_t disk_bytes = 0;  // the sandbox's own files (where the runtime can enforce it)
};

// A layer captured from a microVM is its disk's image, this file in the layer's folder
// (runtime/microvm/guest_files.h); the walls whose layers are folders refuse it.
constexpr const char* kVmDiskLayer = "vm-disk.ext4";

struct Bind {
  std::string source;  // host path (a mounted disk)
  std::string target;  // absolute, normalized path inside the sandbox
};

// A sandbox's link to the host (IPv4 addresses in host byte order): the host's end
// `host_if` with `gateway`, the sandbox's `eth0` with `sandbox`, a point-to-point /31;
// with IPv6 (`has_v6`), the same pair as a /127 (network byte order).
struct NetLink {
  std::string host_if;
  uint32_t sandbox = 0;
  uint32_t gateway = 0;
  int prefix = 31;
  bool has_v6 = false;
  std::array<uint8_t, 16> sandbox6{}, gateway6{};
  // Its type's limit each way (0: none). The host's firewall enforces it, dropping what
  // goes over; a wall may also pace the sandbox's end at it (a queue, not drops).
  int mbps = 0;
};

// Bytes through a sandbox's link, as the sandbox sees them.
struct LinkCounters {
  uint64_t tx_bytes = 0;
  uint64_t rx_bytes = 0;
};

struct StartSpec {
  std::string id;
  std::vector<Bind> binds;
  std::vector<std::string> layers;  // read-only root layers (host paths), topmost first
  std::string dir;                  // the sandbox's own host directory
  std::string hostname;
  Limits limits;
  // No process of the sandbox gains privileges by exec (setuid programs gain nothing).
  bool no_new_privs = true;
  std::optional<NetLink> link;  // none: the sandbox has loopback only
  std::string nameserver;       // its /etc/resolv.conf's (empty: the image's file stays)
};

// A running sandbox as the runtime knows it. Core keeps it and gives it back; it reads
// only `agent` and persists `saved_state` without reading it.
struct Instance {
  agent::DialerPtr agent;  // how sbxd reaches its agent
  // Enough for Adopt to find the sandbox again after sbxd restarts.
  std::string saved_state;
  // The runtime's own handle on what runs (a process, a VMM); empty: nothing runs.
  std::shared_ptr<void> handle;
  // Start loaded a saved memory (a memory template's, a fork's): the processes the agent
  // kept there run on, and are the new sandbox's to follow.
  bool loaded_memory = false;
};

// What a wall can do beyond start, stop and exec. Core asks these instead of knowing walls.
struct Capabilities {
  bool freeze = false;     // Freeze/Thaw: processes held still in place, memory kept
  bool hibernate = false;  // Hibernate/Restore: a checkpoint to disk, memory freed
  // A hibernate while sbxd holds connections into the sandbox (a checkpoint of a process
  // tree cannot hold sbxd's end of them; a VM's memory snapshot can).
  bool hibernate_with_open_connections = false;
  bool fast_capture = false;      // CaptureFiles in constant time, whatever the files
  bool memory_snapshots = false;  // a template may keep the memory of its sandbox
  // vCPUs and memory are fixed at boot (a guest kernel's): UpdateLimits changes only the
  // host's share, so a warm sandbox serves only creates of its own shape.
  bool fixed_shape = false;
  // AttachLink gives a running sandbox a network; false: its links are fixed when it
  // starts (a warm sandbox then serves only creates that want the network it has).
  bool live_links = true;
  // Restore sets up the sandbox's network anew with the spec's link (the one it should
  // have now), rather than the link it was hibernated with.
  bool restore_relinks = false;
};

class Runtime {
 public:
  virtual ~Runtime() = default;
  // The isolation kind this runtime implements ("container", "gvisor", "microvm"; "fake"
  // in unit tests).
  virtual std::string Kind() const = 0;
  virtual Capabilities Caps() const = 0;
  // The accelerator a VM wall boots its guests with ("kvm", "tcg"; empty: not a VM wall,
  // or not yet known).
  virtual std::string Accelerator() const { return ""; }
  // How a VM wall reaches its guests' agents ("vsock", "serial"; empty: not a VM wall).
  virtual std::string AgentChannel() const { return ""; }
  // Creates the sandbox's writable layer under spec.dir (once, at create).
  virtual Status Prepare(const StartSpec& spec) = 0;
  // Boots the sandbox on its files; returns once its agent answers.
  virtual Result<Instance> Start(const StartSpec& spec) = 0;
  // Kills every process of the sandbox and waits until they are gone; files stay.
  virtual Status Stop(const std::string& id, const Instance& inst) = 0;
  // Applies new resource limits to a running sandbox (a claimed pooled sandbox).
  virtual Status UpdateLimits(const std::string& id, const Limits& limits) = 0;
  // Changes the limit on the files of the sandbox whose folder is `dir` (a no-op where
  // the runtime enforces none).
  virtual Status SetDiskLimit(const std::string& dir, uint64_t bytes) { return OkStatus(); }
  // Whether the sandbox whose folder is `dir` still has its files (it can start).
  virtual bool HasFiles(const std::string& dir) = 0;
  // The files the sandbox in folder `dir` wrote, captured as a new read-only layer in the
  // folder `dst` (which must not exist). The sandbox is frozen or stopped meanwhile.
  struct Captured {
    std::string root;          // the layer's root, relative to dst ("" for dst itself)
    std::optional<uint64_t> bytes;  // its size, when the capture counted it
  };
  virtual Result<Captured> CaptureFiles(const std::string& dir, const std::string& dst) = 0;
  // The running sandbox whole, its files and its memory, captured as a new read-only layer
  // in `dst` (which must not exist); the sandbox runs on. A sandbox made from such a layer
  // (its topmost) starts from that memory where it can (Capabilities::memory_snapshots).
  virtual Result<Captured> CaptureMemory(const StartSpec& spec, const Instance& inst, const std::string& dst) {
    return MakeError(Code::kFailedPrecondition, "this isolation cannot capture a sandbox's memory");
  }
  // Removes a layer folder made by CaptureFiles (or a half-made one), with all it holds.
  virtual Status RemoveLayer(const std::string& path) = 0;
  // A layer (a capture's or an image's) is gone: what this wall made from it goes too (a
  // VM wall's disk image of it). Core tells every wall, whichever made the layer.
  virtual void ForgetLayer(const std::string& path) { (void)path; }
  // Checkpoints every process of the running sandbox into the folder `dir` (the runtime
  // owns it whole: it clears what an earlier attempt left, and marks the checkpoint whole
  // last), then ends them: their memory is freed, their files and kernel objects stay. On
  // failure the sandbox runs on, and the tool's log may stay beside `dir` until
  // DropCheckpoint.
  virtual Status Hibernate(const StartSpec& spec, const Instance& inst, const std::string& dir) {
    return MakeError(Code::kFailedPrecondition, "this runtime cannot hibernate a sandbox");
  }
  // About how many bytes Hibernate would write for this sandbox now (0 if unknown).
  virtual uint64_t CheckpointBytes(const std::string& id) { return 0; }
  // Whether `dir` holds a whole checkpoint from Hibernate.
  virtual bool HasCheckpoint(const std::string& dir) { return false; }
  // Removes a checkpoint and whatever a failed attempt left beside it.
  virtual Status DropCheckpoint(const std::string& dir) { return fs::RemoveTree(dir); }
  // Restores a sandbox from the checkpoint in `dir` (same pids, memory, open files);
  // returns once its agent answers.
  virtual Result<Instance> Restore(const StartSpec& spec, const std::string& dir) {
    return MakeError(Code::kFailedPrecondition, "this runtime cannot restore a sandbox");
  }
  // Stops every process of a running sandbox in place (memory kept), and lets them go on.
  virtual Status Freeze(const std::string& id) = 0;
  virtual Status Thaw(const std::string& id) = 0;
  // Removes the sandbox's files and kernel objects (it must be stopped).
  virtual Status Destroy(const std::string& id, const std::string& dir) = 0;
  // Re-attaches to a sandbox that an earlier daemon started; fails if it is gone. A frozen
  // one (paused) stays frozen; any other is thawed (a capture cut short) and pinged.
  virtual Result<Instance> Adopt(const StartSpec& spec, const std::string& saved_state, bool frozen) = 0;
  // CPU time the sandbox's processes used so far, in nanoseconds (0 if unknown).
  virtual uint64_t CpuUsageNs(const std::string& id, const Instance& inst) = 0;
  // What a sandbox (running or frozen) uses now: its CPU time so far, its memory and its
  // processes (`sbx stats`).
  struct Usage {
    uint64_t cpu_ns = 0;
    uint64_t memory_bytes = 0;
    uint64_t processes = 0;
  };
  virtual Result<Usage> ReadUsage(const std::string& id, const Instance& inst) {
    return MakeError(Code::kFailedPrecondition, "this sandbox's isolation does not measure its usage");
  }
  // Gives a running (or frozen) sandbox its link, or takes it away (its connections
  // through it end).
  virtual Status AttachLink(const std::string& id, const Instance& inst, const NetLink& link) {
    return MakeError(Code::kFailedPrecondition, "this sandbox's isolation has no network");
  }
  // `wait` false: the link stops carrying traffic at once and is removed in the background
  // (a veth's removal waits for the kernel's network grace period, tens of milliseconds).
  virtual Status DetachLink(const NetLink& link, bool wait = true) { return OkStatus(); }
  // What went through the link so far (nullopt: it has none now).
  virtual std::optional<LinkCounters> ReadLinkCounters(const NetLink& link) { return std::nullopt; }
  // Ids of sandboxes that own kernel objects on this host (for reconciliation).
  virtual std::vector<std::string> ListKernelObjects() = 0;
  // True while the instance's init lives.
  virtual bool Alive(const Instance& inst) = 0;
  // The id of this runtime's sandbox whose process is the peer of the unix socket `fd`
  // (a connection on the in-sandbox API socket), if any.
  virtual std::optional<std::string> SandboxOfPeer(int fd) { return std::nullopt; }
};

struct ContainerOptions {
  std::string agent_path;  // host path of sbx-agent
  std::string instance;    // this daemon's name in shared places (cgroups)
  uid_t uid_base = 100000;  // sandbox root maps to this host uid
  uid_t uid_count = 65536;
  std::string cgroup_root = "/sys/fs/cgroup";
  std::string api_dir;  // the folder of sbxd's in-sandbox API socket, bound into each
  // A copy of sbx-agent in api_dir (its file name): the init of each sandbox re-executes
  // from there (empty: the init stays the host's binary).
  std::string agent_copy;
  // The sandboxes' folders are on a btrfs store with quotas (runtime/quota.h): each is a
  // subvolume whose files are limited to limits.disk_bytes.
  bool disk_quotas = false;
  std::string criu;  // the CRIU binary, for hibernate (empty: no hibernate)
  // Each sandbox's user namespace is owned by a host uid of its own, from
  // [owner_base, owner_base + owner_count): the kernel charges the per-user counts of
  // everything inside (inotify instances and watches, message-queue bytes, pending
  // signals, namespaces) to the namespace's owner, so one sandbox using up its budget
  // leaves every other sandbox's and host root's whole. No host user may have these uids:
  // a process running as one would hold capabilities over that sandbox's namespaces.
  // 0: every namespace is owned by root (one budget shared with host root).
  uid_t owner_base = 0;
  uid_t owner_count = 65536;
  // Per-process limits of everything in a sandbox (hard; the soft file limit is at most
  // 1024). Sandbox code cannot raise them: that needs CAP_SYS_RESOURCE on the host.
  uint64_t max_open_files = 2048;
  uint64_t max_pending_signals = 4096;
  uint64_t max_msgqueue_bytes = 819200;
};

std::unique_ptr<Runtime> NewContainerRuntime(const ContainerOptions& opts);

// The gVisor wall (src/runtime/gvisor/): each sandbox is a runsc container whose system
// calls a user-space kernel serves. Its files are the container wall's (an overlay of the
// same layers, the same user mapping), so templates and forks cross between the two.
struct GvisorOptions {
  std::string runsc;                 // the runsc binary
  std::string platform = "systrap";  // runsc --platform (systrap, ptrace)
  std::string state_dir;             // runsc --root: its record of running sandboxes
  std::string sandboxes_dir;         // the folder of sandboxes' folders (each named by its id)
  std::string instance;              // this daemon's name in shared places (cgroups)
  uid_t uid_base = 100000;           // sandbox root maps to this host uid
  uid_t uid_count = 65536;
  std::string cgroup_root = "/sys/fs/cgroup";
  // sbxd's in-sandbox API folder and the agent's binary in it (as ContainerOptions').
  std::string api_dir;
  std::string agent_copy;
  bool disk_quotas = false;  // sandboxes' folders are limited subvolumes (runtime/quota.h)
  uint64_t max_open_files = 2048;
};
std::unique_ptr<Runtime> NewGvisorRuntime(const GvisorOptions& opts);
// The microVM wall (src/runtime/microvm/): each sandbox is a QEMU `microvm` guest with its
// own kernel; the same agent is its PID 1, reached over a virtio-serial port.
struct MicrovmOptions {
  std::string qemu = "qemu-system-x86_64";
  std::string kernel_dir;   // the guest kernel (scripts/vm/guest.sh)
  std::string accel = "auto";  // kvm, tcg, or auto (a probe boot decides, off the create path)
  // The agent's channel: vsock, serial (a virtio-serial port), or auto (vsock where the host
  // has /dev/vhost-vsock).
  std::string channel = "auto";
  std::string state_dir;    // the wall's own files: the initramfs, the layers' images
  std::string agent_path;   // sbx-agent: the guest's /init and the host's relay
  std::string instance;     // this daemon's name in shared places (cgroups)
  uid_t uid_base = 100000;  // layers' and disks' files are owned from here up (sandbox root)
  uid_t uid_count = 65536;
  // QEMU and its relay run as a uid of their own per sandbox, from this range. No host
  // user may have these uids.
  uid_t vm_uid_base = 0;
  uid_t vm_uid_count = 65536;
  std::string cgroup_root = "/sys/fs/cgroup";
};
Result<std::unique_ptr<Runtime>> NewMicrovmRuntime(const MicrovmOptions& opts);
// A runtime without isolation: sbx-agent --serve as a plain child process, in a directory
// of its own. For unit tests that need no root.
std::unique_ptr<Runtime> NewFakeRuntime(const std::string& agent_path);

}  // namespace sbx::runtime
