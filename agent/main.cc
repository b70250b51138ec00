// sbx-agent: PID 1 of every sandbox. Wiring only; see src/agent/.
//   sbx-agent --sandbox-init   set up a container sandbox (config on fd 3, readiness on fd 4)
//   sbx-agent --sandbox-serve FD   (re-executed by the above from inside the sandbox) serve
//                                  on the listening socket FD, report readiness on fd 4
//   sbx-agent --gvisor-init DIR   set up a gVisor sandbox (its first process; config and
//                                 socket in the bound folder DIR) and serve
//   /init (PID 1 of a microVM's guest kernel): set up the guest and serve over its port
//   sbx-agent --vm-launch DIR UID GID LOG [OPTION...] -- QEMU...   start a microVM's QEMU
//                                 unprivileged (options in vm_relay.h)
//   sbx-agent --vm-relay DIR PORT CONSOLE LOG LISTEN UID [QEMU-PID]   the host end of a
//                                 microVM's agent link (names relative to DIR; PORT may be
//                                 vsock:CID, with QEMU's pid after UID; see vm_relay.h)
//   sbx-agent --set-hostname NAME   set the sandbox's hostname (a gVisor sandbox restored from
//                                 another's memory: runsc runs it with CAP_SYS_ADMIN)
//   sbx-agent --serve PATH     serve on a unix socket at PATH, without isolation (tests)
//   sbx-agent --version
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/reboot.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "agent/init/container_init.h"
#include "agent/init/gvisor_init.h"
#include "agent/init/vm_init.h"
#include "agent/protocol.h"
#include "agent/server.h"
#include "agent/vm_relay.h"
#include "base/unique_fd.h"

namespace {

std::string ReadAll(int fd) {
  std::string s;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) s.append(buf, n);
  return s;
}

void Report(int fd, const std::string& line) {
  std::string l = line + "\n";
  ssize_t unused = write(fd, l.data(), l.size());
  (void)unused;
}

int ServeInit(int listen_fd) {
  Report(4, "OK");
  close(4);
  auto st = sbx::agent::Serve(listen_fd, /*is_init=*/true);
  std::fprintf(stderr, "sbx-agent: %s\n", st.error().message.c_str());
  return 1;
}

int SandboxInit() {
  std::string raw = ReadAll(3);
  close(3);
  auto cfg = sbx::agent::SandboxConfig::FromJson(raw);
  if (!cfg.ok()) {
    Report(4, "ERR " + cfg.error().message);
    return 1;
  }
  auto lfd = sbx::agent::InitSandbox(*cfg);
  if (!lfd.ok()) {
    Report(4, "ERR " + lfd.error().message);
    return 1;
  }
  // stdio was the host's /dev/null: now the sandbox's own (nothing held from the host).
  int null = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null < 0 || dup2(null, 0) < 0 || dup2(null, 1) < 0 || dup2(null, 2) < 0) {
    Report(4, std::string("ERR reopen /dev/null: ") + std::strerror(errno));
    return 1;
  }
  close(null);
  if (!cfg->agent_exe.empty()) {
    // Re-executed from the sandbox's own view of the binary: then no process of the
    // sandbox maps a file of the host (a checkpoint of it holds no host path). The
    // listening socket and the readiness pipe go across.
    int l = lfd->get();
    if (fcntl(l, F_SETFD, 0) != 0 || fcntl(4, F_SETFD, 0) != 0) {
      Report(4, std::string("ERR fcntl: ") + std::strerror(errno));
      return 1;
    }
    std::string fd = std::to_string(l);
    char arg0[] = "sbx-agent";
    char arg1[] = "--sandbox-serve";
    char* argv[] = {arg0, arg1, fd.data(), nullptr};
    char* envp[] = {nullptr};
    execve(cfg->agent_exe.c_str(), argv, envp);
    Report(4, "ERR cannot execute " + cfg->agent_exe + " in the sandbox: " + std::strerror(errno));
    return 1;
  }
  return ServeInit(lfd->get());
}

int SandboxServe(const char* fd_arg) {
  int l = std::atoi(fd_arg);
  // exec made the agent dumpable again: its memory and /proc entries stay closed to the
  // sandbox's code.
  if (l < 3 || fcntl(l, F_SETFD, FD_CLOEXEC) != 0 || prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) {
    Report(4, std::string("ERR sbx-agent --sandbox-serve: ") + std::strerror(errno));
    return 1;
  }
  return ServeInit(l);
}

int GvisorInit(const char* ctl_dir) {
  auto lfd = sbx::agent::InitGvisorSandbox(ctl_dir);
  if (!lfd.ok()) {
    // runsc's log (beside the bundle) keeps the container's stderr: sbxd quotes it.
    std::fprintf(stderr, "sbx-agent: %s\n", lfd.error().message.c_str());
    return 1;
  }
  int null = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null < 0 || dup2(null, 0) < 0 || dup2(null, 1) < 0 || dup2(null, 2) < 0) return 1;
  close(null);
  // The socket's folder is gone from the sandbox's view: every peer is sbxd.
  sbx::agent::SetRelisten(&sbx::agent::RelistenGvisorAgent, &sbx::agent::GvisorAgentClosed);
  auto st = sbx::agent::Serve(lfd->Release(), /*is_init=*/true, /*outside_peers_only=*/false);
  return st.ok() ? 0 : 1;
}

// PID 1 of a microVM: a failure is on the console (sbxd quotes it), then the guest powers off.
int VmInit() {
  auto st = sbx::agent::RunVmInit();
  std::fprintf(stderr, "sbx-agent: %s\n", st.ok() ? "the agent stopped" : st.error().message.c_str());
  sync();
  reboot(RB_POWER_OFF);
  return 1;
}

int ServeAt(const char* path) {
  sbx::UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  struct sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  if (std::strlen(path) >= sizeof addr.sun_path) {
    std::fprintf(stderr, "sbx-agent: socket path too long\n");
    return 2;
  }
  std::strcpy(addr.sun_path, path);
  unlink(path);
  if (bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      listen(fd.get(), 128) != 0) {
    std::perror("sbx-agent: bind");
    return 1;
  }
  auto st = sbx::agent::Serve(fd.get(), /*is_init=*/false);
  std::fprintf(stderr, "sbx-agent: %s\n", st.error().message.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (getpid() == 1 && argc >= 1 && std::strcmp(argv[0], "/init") == 0) return VmInit();
  if (argc >= 2 && std::strcmp(argv[1], "--vm-launch") == 0) {
    auto o = sbx::agent::ParseLaunch(std::vector<std::string>(argv + 2, argv + argc));
    if (!o.ok()) {
      std::fprintf(stderr, "sbx-agent --vm-launch: %s\n", o.error().message.c_str());
      return 2;
    }
    return sbx::agent::LaunchVmm(*o);
  }
  if (argc >= 8 && std::strcmp(argv[1], "--vm-relay") == 0) {
    sbx::agent::RelayOptions o{argv[2], argv[3], argv[4], argv[5], argv[6],
                               static_cast<uid_t>(std::strtoul(argv[7], nullptr, 10)),
                               argc >= 9 ? static_cast<pid_t>(std::strtol(argv[8], nullptr, 10)) : 0};
    return sbx::agent::StartRelay(o);
  }
  if (argc >= 2 && std::strcmp(argv[1], "--sandbox-init") == 0) return SandboxInit();
  if (argc >= 3 && std::strcmp(argv[1], "--serve") == 0) return ServeAt(argv[2]);
  if (argc >= 3 && std::strcmp(argv[1], "--set-hostname") == 0) {
    if (sethostname(argv[2], std::strlen(argv[2])) == 0) return 0;
    std::perror("sbx-agent: sethostname");
    return 1;
  }
  if (argc >= 3 && std::strcmp(argv[1], "--gvisor-init") == 0 && getpid() == 1) return GvisorInit(argv[2]);
  if (argc >= 3 && std::strcmp(argv[1], "--sandbox-serve") == 0 && getpid() == 1) return SandboxServe(argv[2]);
  if (argc >= 2 && std::strcmp(argv[1], "--version") == 0) {
    std::printf("sbx-agent %s (protocol %u)\n", SBX_VERSION, sbx::agent::kProtocolVersion);
    return 0;
  }
  std::fprintf(stderr, "usage: sbx-agent --sandbox-init | --gvisor-init DIR | --serve PATH | --version\n");
  return 2;
}
