// QEMU for the microVM wall: the command line of a sandbox's VM (the `microvm` machine,
// virtio over MMIO, nothing else), and the probe that tells whether KVM can run a guest
// on this host. Any thread.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "base/result.h"

namespace sbx::runtime::microvm {

// QEMU's id of the VM's own disk (its drive), as its monitor names it.
constexpr const char* kOwnDrive = "own";

struct VmSpec {
  std::string qemu;    // the binary
  std::string accel;   // "kvm" or "tcg"
  std::string kernel;  // the guest's vmlinux
  std::string initrd;
  std::string config;  // the guest's VmConfig JSON (agent/init/vm_init.h)
  int cpus = 1;
  uint64_t memory_mb = 256;
  std::string own_disk;                   // read-write, serial sbx-upper
  std::vector<std::string> layer_images;  // read-only, serials sbx-layer-N (topmost first)
  // The sandbox's disks: host folders shared over 9p, tags agent::VmDiskTag(N). QEMU
  // serves them as the sandboxes' ids (--vm-launch --share-ids).
  std::vector<std::string> shared;
  // The agent's channel: a vsock device with this guest CID (QEMU's descriptor
  // agent::kVsockFd is /dev/vhost-vsock: --vm-launch --vsock), or with 0 the virtio-serial
  // port agent::kVmAgentPort on agent.sock.
  uint32_t vsock_cid = 0;
  std::string tap;  // the network's tap (empty: none), open as QEMU's fd 3 (--vm-launch)
  std::string mac;
  // A restore: QEMU waits for the saved VM (`-incoming defer`; RunLoadedVm loads it
  // from agent::kIncomingFd) instead of booting; every device above must be as it was
  // when it was saved.
  bool incoming = false;
  // The guest's RAM is the memfd on agent::kRamFd (--vm-launch --ram), shared.
  bool shared_ram = false;
};

// The arguments (argv[0] is spec.qemu). QEMU runs in the VM's folder: its sockets there
// are agent.sock (the agent's port, without vsock), console.sock (ttyS0) and qmp.sock (its monitor:
// microvm/qmp.h), its pid in qemu.pid. It runs as the VM's own unprivileged user from the start (sbx-agent
// --vm-launch), under its own system-call filter.
std::vector<std::string> QemuArgv(const VmSpec& spec);

// How `sbx-agent --vm-launch` (agent/vm_relay.h) starts QEMU for a VmSpec: `agent` is
// sbx-agent, QEMU runs as `uid` in the VM's folder `vm` (its log there: qemu.log);
// `share_ids` ("BASE:COUNT") when it serves disks; a saved VM's RAM and stream to load.
struct Launch {
  std::string agent, vm;
  uid_t uid = 0;
  std::string share_ids;
  std::string ram_from, incoming;
};
// The whole command: sbx-agent --vm-launch ... -- QEMU's own arguments (QemuArgv).
std::vector<std::string> LaunchArgv(const Launch& how, const VmSpec& spec);

// The kernel command line for a guest config, on `accel` ("kvm" or "tcg").
std::string KernelCmdline(const std::string& config_json, const std::string& accel);

// Whether QEMU can boot a guest with KVM here: a real boot of `kernel` with `initrd`
// (whose /init prints the probe line and powers off) within `timeout_ms`. Opening
// /dev/kvm is not enough: a nested hypervisor may accept the device and fail or hang
// the guest.
Status ProbeKvm(const std::string& qemu, const std::string& kernel, const std::string& initrd, int timeout_ms);

}  // namespace sbx::runtime::microvm
