#include "agent/init/gvisor_init.h"

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "agent/init/container_init.h"
#include "agent/users.h"
#include "base/fs.h"

namespace sbx::agent {
namespace {

int g_ctl_dir = -1;  // the agent's folder, open

// Listens on a.sock in the folder `dir` (a name relative to it: the folder is under a
// cover, and the agent is single-threaded here, so the working directory is its to move).
Result<UniqueFd> ListenIn(int dir) {
  UniqueFd lfd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!lfd.valid()) return ErrnoError("socket");
  struct sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, "a.sock", 6);
  if (::fchdir(dir) != 0) return ErrnoError("enter the agent's folder");
  ::unlink("a.sock");
  const bool bound = ::bind(lfd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  const int err = errno;
  if (::chdir("/") != 0) return ErrnoError("chdir /");
  if (!bound) return ErrnoError("bind a.sock", err);
  if (::listen(lfd.get(), 128) != 0) return ErrnoError("listen");
  return lfd;
}

}  // namespace

Result<UniqueFd> RelistenGvisorAgent() { return ListenIn(g_ctl_dir); }
// The socket's file stays connectable on the host after the close (runsc keeps its end):
// its removal is what tells sbxd that the agent closed it.
void GvisorAgentClosed() { ::unlinkat(g_ctl_dir, "a.sock", 0); }

Result<UniqueFd> InitGvisorSandbox(const std::string& ctl_dir) {
  SBX_ASSIGN_OR_RETURN(std::string raw, fs::ReadFile(ctl_dir + "/init.json", 1 << 16));
  nlohmann::json cfg = nlohmann::json::parse(raw, nullptr, false);
  if (!cfg.is_object()) return MakeError(Code::kInvalidArgument, "init.json is not a JSON object");
  const std::string nameserver = cfg.value("nameserver", std::string());
  const bool no_new_privs = cfg.value("no_new_privs", true);
  LimitIds(cfg.value("id_count", uint32_t{65536}));

  // The folder stays open under its cover: a listen after a checkpoint binds there again.
  g_ctl_dir = ::open(ctl_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (g_ctl_dir < 0) return ErrnoError("open " + ctl_dir);
  SBX_ASSIGN_OR_RETURN(UniqueFd lfd, ListenIn(g_ctl_dir));
  // The socket stays a host socket that sbxd dials; its folder leaves the sandbox's view
  // under an empty read-only tmpfs. (Unmounting the folder would end runsc's service of
  // the socket; and the peer credentials of a host connection say nothing gVisor can
  // vouch for, so the agent cannot tell sbxd from the sandbox's code by them.) Nothing in
  // the sandbox can remove the cover: that takes CAP_SYS_ADMIN, which LimitCapabilities
  // drops from every process's bounding set below.
  if (::mount("tmpfs", ctl_dir.c_str(), "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k,mode=000") != 0)
    return ErrnoError("cover " + ctl_dir);

  if (!nameserver.empty()) SBX_RETURN_IF_ERROR(WriteResolvConf(nameserver));
  // As in a container (container_init.cc): the agent's memory is closed to the sandbox's
  // code, then no_new_privs if asked, and root's capabilities. No seccomp filter of the
  // agent's: the system calls it would refuse reach gVisor's kernel, not the host's, and
  // the sentry runs under runsc's own filter.
  if (::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) return ErrnoError("PR_SET_DUMPABLE");
  if (no_new_privs && ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return ErrnoError("PR_SET_NO_NEW_PRIVS");
  SBX_RETURN_IF_ERROR(LimitCapabilities());
  return lfd;
}

}  // namespace sbx::agent
