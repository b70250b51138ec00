#include "agent/vm_relay.h"

#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/types.h>
#include <sys/ioctl.h>
#include <net/if.h>
#include <linux/if_tun.h>
#include <linux/capability.h>
#include <linux/vm_sockets.h>
#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "agent/channel_mux.h"
#include "agent/vm_jail.h"
#include "base/fs.h"
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

uint32_t VsockLinkCid(const std::string& port_socket) {
  if (port_socket.rfind("vsock:", 0) != 0) return 0;
  const std::string digits = port_socket.substr(6);
  if (digits.empty() || digits.size() > 10 || digits.find_first_not_of("0123456789") != std::string::npos) return 0;
  const unsigned long long cid = std::strtoull(digits.c_str(), nullptr, 10);
  // 0 to 2 are the hypervisor's, the local and the host's; -1 is "any".
  return cid > 2 && cid < 0xffffffffULL ? static_cast<uint32_t>(cid) : 0;
}

namespace {

// A connection to the agent's vsock port in guest `cid`, from a port below 1024 (the guest
// takes no other: VsockPeerIsHostRoot).
Result<UniqueFd> DialVsock(uint32_t cid) {
  UniqueFd fd(::socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return ErrnoError("socket(AF_VSOCK)");
  bool bound = false;
  for (unsigned port = 1023; port >= 512 && !bound; --port) {
    sockaddr_vm me = {};
    me.svm_family = AF_VSOCK;
    me.svm_cid = VMADDR_CID_ANY;
    me.svm_port = port;
    if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&me), sizeof me) == 0) bound = true;
    else if (errno != EADDRINUSE) return ErrnoError("bind a vsock port below 1024");
  }
  if (!bound) return MakeError(Code::kResourceExhausted, "every vsock port from 512 to 1023 is in use");
  // A guest still booting has no listener yet: each try is short.
  struct timeval tv = {1, 0};
  (void)::setsockopt(fd.get(), AF_VSOCK, SO_VM_SOCKETS_CONNECT_TIMEOUT, &tv, sizeof tv);
  sockaddr_vm to = {};
  to.svm_family = AF_VSOCK;
  to.svm_cid = cid;
  to.svm_port = kVmAgentVsockPort;
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&to), sizeof to) != 0)
    return ErrnoError("connect to vsock " + std::to_string(cid));
  return fd;
}

// A vsock link's relay: dials the guest, runs the mux while the link lasts, and dials
// again (the guest reboots, or a load reset its connections) until QEMU ends.
[[noreturn]] void RunVsockLink(uint32_t cid, int qemu, int listen_fd) {
  MuxOptions mo;
  mo.listen_fd = listen_fd;
  for (;;) {
    struct pollfd p = {qemu, POLLIN, 0};
    if (::poll(&p, 1, 0) != 0) _exit(0);  // QEMU ended (or its pidfd failed)
    auto link = DialVsock(cid);
    if (!link.ok()) {
      (void)::poll(&p, 1, 20);
      continue;
    }
    (void)RunMux(link->get(), mo);
  }
}

}  // namespace

int StartRelay(const RelayOptions& o) {
  auto fail = [](const std::string& why) {
    std::fprintf(stderr, "sbx-agent --vm-relay: %s\n", why.c_str());
    return 1;
  };
  if (::chdir(o.dir.c_str()) != 0) return fail("chdir " + o.dir + ": " + std::strerror(errno));
  const uint32_t cid = VsockLinkCid(o.port_socket);
  if (o.port_socket.rfind("vsock:", 0) == 0 && cid == 0) return fail("bad vsock link " + o.port_socket);
  UniqueFd port, qemu;
  if (cid != 0) {
    if (o.qemu <= 0) return fail("a vsock link needs QEMU's pid");
    qemu = UniqueFd(static_cast<int>(::syscall(SYS_pidfd_open, o.qemu, 0)));
    if (!qemu.valid()) return fail("pidfd_open " + std::to_string(o.qemu) + ": " + std::strerror(errno));
  } else {
    // QEMU makes its sockets as it starts: they may come a moment after its pid file.
    auto dialed = Dial(o.port_socket);
    for (int i = 0; i < 500 && !dialed.ok(); ++i) {
      ::usleep(10 * 1000);
      dialed = Dial(o.port_socket);
    }
    if (!dialed.ok()) return fail(dialed.error().message);
    port = std::move(*dialed);
  }
  auto con = Dial(o.console_socket);
  if (!con.ok()) return fail(con.error().message);
  // The folder is QEMU's user's: only sockets that QEMU (that user) serves are taken,
  // not a link to another VM's.
  for (int fd : {port.get(), con->get()}) {
    struct ucred cred = {};
    socklen_t len = sizeof cred;
    if (fd >= 0 && (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || (o.uid != 0 && cred.uid != o.uid)))
      return fail("a socket in " + o.dir + " is not served by the VM's QEMU");
  }
  UniqueFd log(::open(o.console_log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!log.valid()) return fail("open " + o.console_log + ": " + std::strerror(errno));
  auto lis = Listen(o.listen_socket);
  if (!lis.ok()) return fail(lis.error().message);
  pid_t child = ::fork();
  if (child < 0) return fail(std::string("fork: ") + std::strerror(errno));
  if (child > 0) return 0;
  // The relay: its own session, nothing of the caller's stdio, then no privilege (but a
  // vsock link's binding of ports below 1024).
  ::setsid();
  int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null >= 0) {
    ::dup2(null, 0);
    ::dup2(null, 1);
    ::dup2(null, 2);
  }
  ::signal(SIGPIPE, SIG_IGN);
  if (o.uid != 0 && !BecomeKeeping(o.uid, o.uid, cid != 0 ? 1u << CAP_NET_BIND_SERVICE : 0).ok()) _exit(1);
  pid_t keeper = ::fork();
  if (keeper == 0) {
    port.Reset();
    lis->Reset();
    qemu.Reset();
    // The console's reader binds nothing: it keeps no capability.
    if (!SetCapabilities(0).ok()) _exit(1);
    KeepConsole(con->get(), log.get());
  }
  con->Reset();
  log.Reset();
  prctl(PR_SET_NAME, "sbx-vm-relay");
  if (cid != 0) RunVsockLink(cid, qemu.get(), lis->get());
  MuxOptions mo;
  mo.listen_fd = lis->get();
  (void)RunMux(port.get(), mo);
  _exit(0);
}

Result<LaunchOptions> ParseLaunch(const std::vector<std::string>& a) {
  if (a.size() < 5) return MakeError(Code::kInvalidArgument, "usage: DIR UID GID LOG [OPTION...] -- QEMU...");
  LaunchOptions o;
  o.dir = a[0];
  o.uid = static_cast<uid_t>(std::strtoul(a[1].c_str(), nullptr, 10));
  o.gid = static_cast<gid_t>(std::strtoul(a[2].c_str(), nullptr, 10));
  o.log = a[3];
  size_t i = 4;
  while (i < a.size() && a[i] != "--") {
    if (a[i] == "--vsock") {  // the one option without a value
      o.vsock = true;
      ++i;
      continue;
    }
    if (i + 1 >= a.size()) return MakeError(Code::kInvalidArgument, a[i] + " needs a value");
    const std::string& v = a[i + 1];
    if (a[i] == "--tap") o.tap = v;
    else if (a[i] == "--ram") o.ram_mb = std::strtoull(v.c_str(), nullptr, 10);
    else if (a[i] == "--ram-from") o.ram_from = v;
    else if (a[i] == "--incoming") o.incoming = v;
    else if (a[i] == "--ro") o.read_only.push_back(v);
    else if (a[i] == "--rw") o.read_write.push_back(v);
    else if (a[i] == "--share-ids") {
      const size_t colon = v.find(':');
      if (colon == std::string::npos) return MakeError(Code::kInvalidArgument, "--share-ids wants BASE:COUNT");
      o.share.base = static_cast<uid_t>(std::strtoul(v.substr(0, colon).c_str(), nullptr, 10));
      o.share.count = static_cast<uid_t>(std::strtoul(v.substr(colon + 1).c_str(), nullptr, 10));
      if (o.share.count == 0) return MakeError(Code::kInvalidArgument, "--share-ids wants a COUNT above 0");
    }
    else return MakeError(Code::kInvalidArgument, "unknown option " + a[i]);
    i += 2;
  }
  if (i >= a.size() || i + 1 >= a.size()) return MakeError(Code::kInvalidArgument, "no command after --");
  o.argv.assign(a.begin() + static_cast<long>(i) + 1, a.end());
  if (!o.ram_from.empty() && o.ram_mb == 0) return MakeError(Code::kInvalidArgument, "--ram-from needs --ram");
  return o;
}

namespace {

// A descriptor above those moved into place at exec (0-2, and QEMU's 3 to 6).
int Above(int fd) {
  if (fd < 0) return fd;
  int high = ::fcntl(fd, F_DUPFD_CLOEXEC, 10);
  ::close(fd);
  return high;
}

// The guest's RAM: a memfd of `mb` MiB, with the data of `from` where given.
Result<int> MakeRam(uint64_t mb, const std::string& from) {
  UniqueFd ram(::memfd_create("sbx-vm-ram", MFD_CLOEXEC));
  if (!ram.valid()) return ErrnoError("memfd_create");
  const uint64_t size = mb << 20;
  if (::ftruncate(ram.get(), static_cast<off_t>(size)) != 0) return ErrnoError("size the guest's RAM");
  if (!from.empty()) {
    UniqueFd in(::open(from.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
    if (!in.valid()) return ErrnoError("open " + from);
    struct stat st;
    if (::fstat(in.get(), &st) != 0) return ErrnoError("stat " + from);
    if (static_cast<uint64_t>(st.st_size) != size)
      return MakeError(Code::kInvalidArgument, from + " is not a RAM of " + std::to_string(mb) + " MiB");
    SBX_RETURN_IF_ERROR(fs::CopyData(in.get(), ram.get(), size));
  }
  return Above(ram.Release());
}

}  // namespace

int LaunchVmm(const LaunchOptions& o) {
  auto fail = [](const std::string& why) {
    if (errno != 0) std::fprintf(stderr, "sbx-agent --vm-launch: %s: %s\n", why.c_str(), std::strerror(errno));
    else std::fprintf(stderr, "sbx-agent --vm-launch: %s\n", why.c_str());
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
  tap = Above(tap);
  if (!o.tap.empty() && tap < 0) return fail("move the tap's descriptor");
  int vsock = -1;
  if (o.vsock) {
    vsock = Above(::open("/dev/vhost-vsock", O_RDWR | O_CLOEXEC));
    if (vsock < 0) return fail("open /dev/vhost-vsock");
  }
  int incoming = -1;
  if (!o.incoming.empty()) {
    incoming = Above(::open(o.incoming.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
    if (incoming < 0) return fail("open " + o.incoming);
  }
  int ram = -1;
  if (o.ram_mb > 0) {
    auto made = MakeRam(o.ram_mb, o.ram_from);
    if (!made.ok()) {
      errno = 0;
      return fail("the guest's RAM: " + made.error().message);
    }
    ram = *made;
    if (ram < 0) return fail("move the guest's RAM's descriptor");
  }
  std::vector<gid_t> groups;
  struct stat kvm;
  if (::stat("/dev/kvm", &kvm) == 0 && kvm.st_gid != 0) groups.push_back(kvm.st_gid);
  // A QEMU that serves disks makes a user namespace, which this process (root) maps: the
  // child says when it has made it, and waits to be told it is mapped.
  int made[2] = {-1, -1}, mapped[2] = {-1, -1};
  const bool share = o.share.count > 0;
  if (share && (::pipe2(made, O_CLOEXEC) != 0 || ::pipe2(mapped, O_CLOEXEC) != 0)) return fail("pipe");
  for (int* fd : {&made[0], &made[1], &mapped[0], &mapped[1]})
    if (share && (*fd = Above(*fd)) < 0) return fail("move a pipe");  // clear of 0 to 5, set below
  pid_t child = ::fork();
  if (child < 0) return fail("fork");
  if (child > 0) {
    if (!share) return 0;
    ::close(made[1]);
    ::close(mapped[0]);
    char c;
    Status st = ::read(made[0], &c, 1) == 1 ? MapShareIds(child, o.share, o.uid, o.gid)
                                            : MakeError(Code::kInternal, "QEMU's launch ended before its user namespace");
    if (st.ok() && ::write(mapped[1], "m", 1) == 1) return 0;
    ::kill(child, SIGKILL);
    errno = 0;
    return fail(st.ok() ? "tell QEMU's launch its ids are mapped" : st.error().message);
  }
  ::setsid();
  // QEMU starts with no signal blocked or ignored (sbxd's threads block some).
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  for (int sig = 1; sig < NSIG; ++sig) ::signal(sig, SIG_DFL);
  int null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null < 0 || ::dup2(null, 0) < 0 || ::dup2(log, 1) < 0 || ::dup2(log, 2) < 0) _exit(fail("stdio"));
  if (tap >= 0 && ::dup2(tap, kTapFd) < 0) _exit(fail("dup the tap"));  // dup2 clears close-on-exec
  if (incoming >= 0 && ::dup2(incoming, kIncomingFd) < 0) _exit(fail("dup the saved VM"));
  if (vsock >= 0 && ::dup2(vsock, kVsockFd) < 0) _exit(fail("dup /dev/vhost-vsock"));
  if (ram >= 0 && ::dup2(ram, kRamFd) < 0) _exit(fail("dup the guest's RAM"));
  if (Status jailed = EnterVmJail({o.dir, o.read_only, o.read_write, o.argv[0]}); !jailed.ok()) {
    errno = 0;
    _exit(fail("QEMU's jail: " + jailed.error().message));
  }
  if (::setgroups(groups.size(), groups.data()) != 0) _exit(fail("setgroups"));
  if (share) {
    ::close(made[0]);
    ::close(mapped[1]);
    char c;
    if (Status st = UnshareIds(); !st.ok() || ::write(made[1], "u", 1) != 1 || ::read(mapped[0], &c, 1) != 1) {
      errno = 0;
      _exit(fail("QEMU's user namespace" + (st.ok() ? std::string() : ": " + st.error().message)));
    }
    if (Status st = TakeShareIds(o.share); !st.ok()) {
      errno = 0;
      _exit(fail(st.error().message));
    }
  } else if (::setresgid(o.gid, o.gid, o.gid) != 0 || ::setresuid(o.uid, o.uid, o.uid) != 0) {
    _exit(fail("drop to uid " + std::to_string(o.uid)));
  }
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) _exit(fail("no_new_privs"));
  std::vector<char*> argv;
  for (const auto& a : o.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  ::execvp(argv[0], argv.data());
  _exit(fail("exec " + o.argv[0]));
}

}  // namespace sbx::agent
