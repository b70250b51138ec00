// The microVM wall's boot contract between sbxd (runtime/microvm/) and the agent as the
// guest's PID 1 (agent/init/vm_init.h): the guest's config, the agent's port, the probe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/result.h"

namespace sbx::agent {

// What sbxd tells the guest, on the kernel command line (`sbx.cfg=` and the JSON in hex).
struct VmConfig {
  std::string hostname;
  int layers = 0;  // disks with serials sbx-layer-0 (topmost) .. sbx-layer-(N-1)
  // Per layer, the folder on its disk that is the layer ("": the disk's root, an image of
  // a layer folder; "upper": a microVM's own disk, captured as a layer).
  std::vector<std::string> layer_roots;
  bool no_new_privs = true;
  std::string nameserver;
  uint64_t tmp_bytes = 0;
  // eth0 (a virtio-net device), when the sandbox has a link: its address and the host's
  // end (IPv4 dotted, prefix length), and the same for IPv6 (empty: none).
  std::string address, gateway;
  int prefix = 31;
  std::string address6, gateway6;
  std::string mac;  // eth0's (QEMU gives it at boot; a template's copy takes it at renew)
  // The sandbox's disks: where each is mounted, the folder QEMU shares as the 9p tag
  // sbx-disk-N (N its index here).
  std::vector<std::string> disks;
  // The agent's channel: vsock (the guest listens on kVmAgentVsockPort) where the host has
  // vhost-vsock, else the virtio-serial port kVmAgentPort.
  bool vsock = false;
  // A probe boot (is the accelerator usable?): report on the console and power off.
  bool probe = false;
  static Result<VmConfig> FromJson(const std::string& s);
  std::string ToJson() const;
};

// The name of the virtio-serial port the agent's channels use.
constexpr const char* kVmAgentPort = "sbx.agent";
// Or the guest's vsock port that the host's relay connects to. The guest takes only a
// connection from the host (CID 2) whose port is one only root can bind there (below
// 1024): any host user can reach a guest's vsock port, and only sbxd's relay may.
constexpr uint32_t kVmAgentVsockPort = 1024;
inline bool VsockPeerIsHostRoot(uint32_t cid, uint32_t port) { return cid == 2 && port < 1024; }
// The descriptor QEMU has /dev/vhost-vsock open on (sbx-agent --vm-launch --vsock opens it:
// the device is root's).
constexpr int kVsockFd = 6;
// The descriptor QEMU has its network's tap open on (sbx-agent --vm-launch opens it).
constexpr int kTapFd = 3;
// The descriptor a restoring QEMU reads the saved VM from (`-incoming fd:4`; --vm-launch
// opens the file).
constexpr int kIncomingFd = 4;
// The descriptor of the guest's RAM, a memfd that --vm-launch makes (and fills from a
// saved VM's RAM file): QEMU maps it shared, so sbxd can copy it out of a stopped VM.
constexpr int kRamFd = 5;
// The 9p tag of the sandbox's disk number `i`.
inline std::string VmDiskTag(size_t i) { return "sbx-disk-" + std::to_string(i); }
// The line a probe boot prints on the console.
constexpr const char* kVmProbeLine = "sbx-vm-probe-ok";

}  // namespace sbx::agent
