// Sets up a container sandbox from inside: sbx-agent runs this as PID 1 of fresh user,
// pid, mount, net, ipc and uts namespaces (the daemon has written the id maps and placed
// it in its cgroup). Main thread of sbx-agent only, before any sandbox code runs.
#pragma once

#include <string>
#include <vector>

#include "base/result.h"
#include "base/unique_fd.h"

namespace sbx::agent {

struct SandboxConfig {
  std::string base;                // host dir the layer paths are relative to
  std::vector<std::string> lower;  // read-only layers, topmost first
  std::string upper, work;         // overlay upper and work dirs
  std::string rootfs;              // empty dir to mount the root on
  // The agent's listening socket: an abstract name ("@name") in the sandbox's network
  // namespace, so that nothing of it is on a host path (a checkpoint holds none).
  std::string socket_path;
  // The agent's binary as the sandbox sees it (in api_dir): once the sandbox is set up,
  // its init re-executes from there, so no process of the sandbox maps a host file.
  std::string agent_exe;
  std::string hostname;
  uint64_t tmp_bytes = 0;  // size of /tmp and /dev/shm (0: half of memory)
  std::vector<std::pair<std::string, std::string>> binds;  // host source, target inside
  // Host files shown read-only in place of kernel files (/proc/cmdline, the boot id):
  // host source, target inside.
  std::vector<std::pair<std::string, std::string>> kernel_files;
  // Host folder holding sbxd's in-sandbox API socket (api.sock), bound read-only at
  // /run/sbx on a tmpfs /run (empty: none). The folder, not the socket, so that a socket
  // made anew by a restarted sbxd is the one sandboxes reach.
  std::string api_dir;
  // true: no process of the sandbox gains privileges by exec (no_new_privs, and the root
  // is mounted nosuid); false: setuid programs (su, sudo) work as in a container.
  bool no_new_privs = true;
  // The sandbox's resolver: /etc/resolv.conf names it (empty: the image's file stays).
  std::string nameserver;
  static Result<SandboxConfig> FromJson(const std::string& s);
  std::string ToJson() const;
};

// Mounts the root and the pseudo filesystems, binds the agent socket, pivots into the
// root, sets no_new_privs (if the config asks), loads the seccomp filter and limits the
// capabilities to kSandboxCapabilities. Returns the listening socket.
Result<UniqueFd> InitSandbox(const SandboxConfig& cfg);

// What root in a sandbox may do, in the sandbox's own user namespace only (over its
// files, its processes and its network namespace; nothing of the host's): Docker's
// default set less NET_RAW and MKNOD. CHOWN, DAC_OVERRIDE, FOWNER, FSETID, KILL, SETGID,
// SETUID, SETPCAP, NET_BIND_SERVICE, SYS_CHROOT, SETFCAP, AUDIT_WRITE.
extern const int kSandboxCapabilities[];

// Loads the sandbox's seccomp filter into the calling thread (inherited by children).
// With `no_new_privs` false the filter is loaded without it, which needs CAP_SYS_ADMIN in
// the sandbox's user namespace: call it before LimitCapabilities.
Status LoadSeccomp(bool no_new_privs);
// Keeps kSandboxCapabilities in the bounding, permitted and effective sets (so a command
// run as root has them, and one run as another user has none); clears the inheritable
// and ambient sets.
Status LimitCapabilities();

// Brings the loopback interface of the caller's network namespace up.
Status LoopbackUp();

// Makes /etc/resolv.conf (of the calling process's root) name `nameserver`: sbxd's
// resolver for the sandbox. An image without a writable /etc keeps its own.
Status WriteResolvConf(const std::string& nameserver);

}  // namespace sbx::agent
