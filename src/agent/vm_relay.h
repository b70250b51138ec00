// The host end of a microVM's agent link (`sbx-agent --vm-relay`): a small process beside
// QEMU that holds the link to the agent in the guest and accepts sbxd's connections on a
// socket of its own, each a channel of the mux (channel_mux.h). The link is QEMU's end of
// the agent's virtio-serial port (a unix socket QEMU made), or on a host with vhost-vsock
// a vsock connection to the guest, which the relay makes (again after a load, which resets
// the guest's connections) from a port below 1024, as only root can (VmConfig
// kVmAgentVsockPort). It outlives sbxd (a restarted sbxd dials the same socket) and ends
// with QEMU. It also keeps the guest's console, capped, in a file for sbxd's errors.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "agent/vm_config.h"
#include "agent/vm_jail.h"
#include "base/result.h"

namespace sbx::agent {

struct RelayOptions {
  std::string dir;          // the VM's folder: every name below is relative to it
  // QEMU's socket of the agent's port, or "vsock:CID" (the guest's CID) for a vsock link
  std::string port_socket;
  std::string console_socket;  // QEMU's socket of the guest's console
  std::string console_log;     // where the console goes (the first kConsoleCap bytes)
  std::string listen_socket;   // sbxd dials this
  uid_t uid = 0;               // the relay runs on as this user and group once set up
  pid_t qemu = 0;              // a vsock link's: the relay ends with this QEMU
};
// The CID of a "vsock:CID" link (0: not one, or a bad one).
uint32_t VsockLinkCid(const std::string& port_socket);
constexpr size_t kConsoleCap = 1 << 20;

// `sbx-agent --vm-launch DIR UID GID LOG [OPTION...] -- QEMU...`: runs QEMU in DIR as
// UID (and group GID, plus /dev/kvm's group where it is given), with no_new_privs, in a
// session of its own, its output appended to LOG; returns at once (QEMU writes its pid
// file itself). Options (each opened here, as root, before the drop):
//   --tap NAME       the network's tap, open as QEMU's fd 3 (/dev/net/tun is root's only)
//   --vsock          /dev/vhost-vsock, open as QEMU's fd 6 (vm_config.h kVsockFd)
//   --ram MB         the guest's RAM: a memfd of MB MiB as QEMU's fd 5 (vm_config.h)
//   --ram-from FILE  that RAM filled from FILE (a saved VM's, sparse)
//   --incoming FILE  a saved VM to restore, open for reading as QEMU's fd 4
//   --ro PATH        a file QEMU reads (kernel, initramfs, layer image), shown in its jail
//   --rw PATH        a file QEMU writes (its own disk) or a folder it shares (a sandbox's
//                    disk), shown in its jail
//   --share-ids BASE:COUNT  QEMU serves the sandbox's disks, in a user namespace where the
//                    sandboxes' ids (host BASE up) are 0 to COUNT-1 (vm_jail.h ShareIds)
// QEMU runs in a jail (vm_jail.h) that shows it DIR and those files and nothing else of
// the host's; its own system-call filter then refuses new processes and privilege changes.
struct LaunchOptions {
  std::string dir;
  uid_t uid = 0;
  gid_t gid = 0;
  std::string log;
  std::string tap;       // empty: none
  bool vsock = false;
  uint64_t ram_mb = 0;   // 0: QEMU's own anonymous memory
  std::string ram_from;  // empty: a zeroed RAM
  std::string incoming;  // empty: none
  std::vector<std::string> read_only, read_write;
  ShareIds share;  // count 0: QEMU serves no disk and takes `uid` and `gid` as they are
  std::vector<std::string> argv;
};
// The options from the arguments after --vm-launch.
Result<LaunchOptions> ParseLaunch(const std::vector<std::string>& args);
int LaunchVmm(const LaunchOptions& o);

// Connects, listens, then detaches (the parent returns 0 once the relay serves, or 1 with
// the reason on stderr). The relay process itself never returns.
int StartRelay(const RelayOptions& o);

}  // namespace sbx::agent
