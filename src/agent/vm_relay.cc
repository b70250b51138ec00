#include "agent/vm_relay.h"

#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/types.h>
#include <sys/ioctl.h>
#include <net/if.h>
#include <linux/if_tun.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "agent/channel_mux.h"
#include "base/unique_fd.h"

namespace sbx::agent {
namespace {

Result<sockaddr_un> Addr(const std::string& name) {
  sockaddr_un a = {};
  a.sun_family = AF_UNIX;
  if (name.empty() || name.size() >= sizeof a.sun_path) return MakeError(Code::kInvalidArgument, "bad socket name " + name);
  std::memcpy(a.sun_path, name.data(), name.size());
  return a;
}

Result<UniqueFd> Dial(const std::string& name) {
  SBX_ASSIGN_OR_RETURN(sockaddr_un a, Addr(name));
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return ErrnoError("socket");
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return ErrnoError("connect " + name);
  return fd;
}

Result<UniqueFd> Listen(const std::string& name) {
  SBX_ASSIGN_OR_RETURN(sockaddr_un a, Addr(name));
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return ErrnoError("socket");
  (void)::unlink(name.c_str());
  mode_t old = ::umask(077);
  int rc = ::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a);
  ::umask(old);
  if (rc != 0) return ErrnoError("bind " + name);
  if (::listen(fd.get(), 128) != 0) return ErrnoError("listen " + name);
  return fd;
}

// Copies the console into the log until it holds kConsoleCap bytes, then reads on and
// drops what comes (a guest that writes without end fills no disk).
[[noreturn]] void KeepConsole(int con, int log) {
  prctl(PR_SET_NAME, "sbx-console");
  size_t kept = 0;
  char buf[16384];
  ssize_t n;
  while ((n = ::read(con, buf, sizeof buf)) != 0) {
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (kept < kConsoleCap) {
      size_t w = std::min(static_cast<size_t>(n), kConsoleCap - kept);
      if (::write(log, buf, w) > 0) kept += w;
    }
  }
  _exit(0);
}

}  // namespace

int StartRelay(const RelayOptions& o) {
  auto fail = [](const std::string& why) {
    std::fprintf(stderr, "sbx-agent --vm-relay: %s\n", why.c_str());
    return 1;
  };
  if (::chdir(o.dir.c_str()) != 0) return fail("chdir " + o.dir + ": " + std::strerror(errno));
  // QEMU makes its sockets as it starts: they may come a moment after its pid file.
  auto port = Dial(o.port_socket);
  for (int i = 0; i < 500 && !port.ok(); ++i) {
    ::usleep(10 * 1000);
    port = Dial(o.port_socket);
  }
  if (!port.ok()) return fail(port.error().message);
  auto con = Dial(o.console_socket);
  if (!con.ok()) return fail(con.error().message);
  // The folder is QEMU's user's: only sockets that QEMU (that user) serves are taken,
  // not a link to another VM's.
  for (int fd : {port->get(), con->get()}) {
    struct ucred cred = {};
    socklen_t len = sizeof cred;
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || (o.uid != 0 && cred.uid != o.uid))
      return fail("a socket in " + o.dir + " is not served by the VM's QEMU");
  }
  UniqueFd log(::open(o.console_log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!log.valid()) return fail("open " + o.console_log + ": " + std::strerror(errno));
  auto lis = Listen(o.listen_socket);
  if (!lis.ok()) return fail(lis.error().message);
  pid_t child = ::fork();
  if (child < 0) return fail(std::string("fork: ") + std::strerror(errno));
  if (child > 0) return 0;
  // The relay: its own session, nothing of the caller's stdio, then no privilege.
  ::setsid();
  int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null >= 0) {
    ::dup2(null, 0);
    ::dup2(null, 1);
    ::dup2(null, 2);
  }
  ::signal(SIGPIPE, SIG_IGN);
  if (o.uid != 0 && (::setgroups(0, nullptr) != 0 || ::setresgid(o.uid, o.uid, o.uid) != 0 ||
                     ::setresuid(o.uid, o.uid, o.uid) != 0))
    _exit(1);
  pid_t keeper = ::fork();
  if (keeper == 0) {
    port->Reset();
    lis->Reset();
    KeepConsole(con->get(), log.get());
  }
  con->Reset();
  log.Reset();
  prctl(PR_SET_NAME, "sbx-vm-relay");
  MuxOptions mo;
  mo.listen_fd = lis->get();
  (void)RunMux(port->get(), mo);
  _exit(0);
}

int LaunchVmm(const LaunchOptions& o) {
  auto fail = [](const std::string& why) {
    std::fprintf(stderr, "sbx-agent --vm-launch: %s: %s\n", why.c_str(), std::strerror(errno));
    return 1;
  };
  if (o.argv.empty()) return fail("no command");
  if (::chdir(o.dir.c_str()) != 0) return fail("chdir " + o.dir);
  int log = ::open(o.log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (log < 0) return fail("open " + o.log);
  int tap = -1;
  if (!o.tap.empty()) {
    tap = ::open("/dev/net/tun", O_RDWR | O_CLOEXEC);
    struct ifreq ifr = {};
    if (tap < 0 || o.tap.size() >= IFNAMSIZ) return fail("open /dev/net/tun");
    std::memcpy(ifr.ifr_name, o.tap.data(), o.tap.size());
    ifr.ifr_flags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR;
    if (::ioctl(tap, TUNSETIFF, &ifr) != 0) return fail("attach to tap " + o.tap);
  }
  std::vector<gid_t> groups;
  struct stat kvm;
  if (::stat("/dev/kvm", &kvm) == 0 && kvm.st_gid != 0) groups.push_back(kvm.st_gid);
  pid_t child = ::fork();
  if (child < 0) return fail("fork");
  if (child > 0) return 0;
  ::setsid();
  // QEMU starts with no signal blocked or ignored (sbxd's threads block some).
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  for (int sig = 1; sig < NSIG; ++sig) ::signal(sig, SIG_DFL);
  int null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null < 0 || ::dup2(null, 0) < 0 || ::dup2(log, 1) < 0 || ::dup2(log, 2) < 0) _exit(fail("stdio"));
  if (tap >= 0 && ::dup2(tap, kTapFd) < 0) _exit(fail("dup the tap"));  // dup2 clears close-on-exec
  if (::setgroups(groups.size(), groups.data()) != 0 || ::setresgid(o.gid, o.gid, o.gid) != 0 ||
      ::setresuid(o.uid, o.uid, o.uid) != 0)
    _exit(fail("drop to uid " + std::to_string(o.uid)));
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) _exit(fail("no_new_privs"));
  std::vector<char*> argv;
  for (const auto& a : o.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  ::execvp(argv[0], argv.data());
  _exit(fail("exec " + o.argv[0]));
}

}  // namespace sbx::agent
