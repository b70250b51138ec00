#include "agent/init/vm_init.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/reboot.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <linux/vm_sockets.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>

#include "agent/channel_mux.h"
#include "agent/init/container_init.h"
#include "agent/init/mounts.h"
#include "agent/init/vm_disk.h"
#include "agent/init/vm_net.h"
#include "agent/server.h"
#include "base/fs.h"

namespace sbx::agent {
namespace {

constexpr const char* kAgentName = "sbx-agent";  // the agent's abstract socket in the guest

Status Dir(const std::string& path, mode_t mode = 0755) {
  if (::mkdir(path.c_str(), mode) != 0 && errno != EEXIST) return ErrnoError("mkdir " + path);
  return OkStatus();
}

// Loads the modules listed in /modules, in order (dependencies first); those after a
// line "@disks" only for a guest with disks, those after "@vsock" only for a guest whose
// agent's channel is vsock.
Status LoadModules(const VmConfig& cfg) {
  bool wanted = true;
  auto list = fs::ReadFile("/modules", 1 << 16);
  if (!list.ok()) return OkStatus();  // a kernel with everything built in
  size_t at = 0;
  while (at < list->size()) {
    size_t nl = list->find('\n', at);
    std::string name = list->substr(at, nl == std::string::npos ? std::string::npos : nl - at);
    at = nl == std::string::npos ? list->size() : nl + 1;
    if (name.empty()) continue;
    if (name[0] == '@') {
      wanted = (name == "@disks" && !cfg.disks.empty()) || (name == "@vsock" && cfg.vsock);
      continue;
    }
    if (!wanted) continue;
    const std::string path = "/lib/modules/" + name + ".ko";
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ErrnoError("open " + path);
    long rc = ::syscall(SYS_finit_module, fd, "", 0);
    int err = errno;
    ::close(fd);
    if (rc != 0 && err != EEXIST) return ErrnoError("load module " + name, err);
  }
  return OkStatus();
}

std::string Unhex(const std::string& h) {
  auto v = [](char c) { return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10; };
  std::string out;
  for (size_t i = 0; i + 1 < h.size(); i += 2) out.push_back(static_cast<char>(v(h[i]) << 4 | v(h[i + 1])));
  return out;
}

Result<VmConfig> ReadConfig() {
  SBX_ASSIGN_OR_RETURN(std::string cmdline, fs::ReadFile("/proc/cmdline", 1 << 16));
  size_t at = cmdline.find("sbx.cfg=");
  if (at == std::string::npos) return MakeError(Code::kInvalidArgument, "no sbx.cfg= on the kernel command line");
  at += 8;
  size_t end = cmdline.find_first_of(" \n", at);
  return VmConfig::FromJson(Unhex(cmdline.substr(at, end == std::string::npos ? std::string::npos : end - at)));
}

// The /dev node of the virtio disk whose serial is `serial`, waiting for it a while (the
// disks' drivers probe as their module loads, but the nodes may come a moment later).
Result<std::string> DiskBySerial(const std::string& serial) {
  for (int tries = 0; tries < 500; ++tries) {
    if (DIR* d = ::opendir("/sys/block")) {
      std::string found;
      while (struct dirent* e = ::readdir(d)) {
        std::string n = e->d_name;
        if (n.rfind("vd", 0) != 0) continue;
        auto s = fs::ReadFile("/sys/block/" + n + "/serial", 256);
        if (s.ok() && s->substr(0, s->find('\n')) == serial) found = "/dev/" + n;
      }
      ::closedir(d);
      if (!found.empty() && fs::Exists(found)) return found;
    }
    ::usleep(10 * 1000);
  }
  return MakeError(Code::kNotFound, "no disk " + serial);
}

// The sandbox's root on /newroot: the layer disks (ext4, read-only, topmost first) under
// its own disk's upper folder. `userxattr`: the overlay marks of layers made on the
// container wall (user.overlay.*) read as they were written, and the ones written here
// serve the container wall.
Status MountRoot(const VmConfig& cfg) {
  SBX_ASSIGN_OR_RETURN(std::string own, DiskBySerial("sbx-upper"));
  SBX_RETURN_IF_ERROR(Dir("/mnt/upper"));
  SBX_ASSIGN_OR_RETURN(bool grow, FileSystemSmaller(own));
  SBX_RETURN_IF_ERROR(Mount(own.c_str(), "/mnt/upper", "ext4", MS_NOATIME));
  // Kept: the agent freezes this file system for a capture or a stop (kSync).
  int own_fs = ::open("/mnt/upper", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (own_fs < 0) return ErrnoError("open /mnt/upper");
  SetOwnDisk(own_fs);
  if (grow) SBX_RETURN_IF_ERROR(GrowToDevice(own_fs, 0, 0));
  // The overlay's folders, made at the first boot on the new disk.
  SBX_RETURN_IF_ERROR(Dir("/mnt/upper/upper"));
  SBX_RETURN_IF_ERROR(Dir("/mnt/upper/work"));
  std::string lower;
  for (int i = 0; i < cfg.layers; ++i) {
    SBX_ASSIGN_OR_RETURN(std::string dev, DiskBySerial("sbx-layer-" + std::to_string(i)));
    const std::string at = "/mnt/l" + std::to_string(i);
    SBX_RETURN_IF_ERROR(Dir(at));
    SBX_RETURN_IF_ERROR(Mount(dev.c_str(), at, "ext4", MS_RDONLY | MS_NOATIME, "noload"));
    const std::string sub = static_cast<size_t>(i) < cfg.layer_roots.size() ? cfg.layer_roots[i] : "";
    if (sub.find('/') != std::string::npos || sub == "..")
      return MakeError(Code::kInvalidArgument, "bad layer root " + sub);
    lower += (lower.empty() ? "" : ":") + at + (sub.empty() ? "" : "/" + sub);
  }
  if (lower.empty()) return MakeError(Code::kInvalidArgument, "the sandbox has no layers");
  SBX_RETURN_IF_ERROR(Dir("/newroot"));
  return Mount("overlay", "/newroot", "overlay", (cfg.no_new_privs ? MS_NOSUID : 0) | MS_NODEV,
               "lowerdir=" + lower + ",upperdir=/mnt/upper/upper,workdir=/mnt/upper/work,userxattr");
}

// Moves into /newroot (the initramfs stays below it, unreachable) and mounts what a
// booted system has.
Status SwitchRoot(const VmConfig& cfg) {
  for (const char* m : {"/dev", "/proc", "/sys"}) {
    const std::string to = std::string("/newroot") + m;
    SBX_RETURN_IF_ERROR(Dir(to));
    SBX_RETURN_IF_ERROR(Mount(m, to, nullptr, MS_MOVE));
  }
  if (::chdir("/newroot") != 0) return ErrnoError("chdir /newroot");
  SBX_RETURN_IF_ERROR(Mount(".", "/", nullptr, MS_MOVE));
  if (::chroot(".") != 0) return ErrnoError("chroot");
  if (::chdir("/") != 0) return ErrnoError("chdir /");
  const std::string tmp_size = cfg.tmp_bytes ? ",size=" + std::to_string(cfg.tmp_bytes) : "";
  SBX_RETURN_IF_ERROR(Dir("/tmp", 01777));
  SBX_RETURN_IF_ERROR(Mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777" + tmp_size));
  SBX_RETURN_IF_ERROR(Dir("/run"));
  SBX_RETURN_IF_ERROR(Mount("tmpfs", "/run", "tmpfs", MS_NOSUID | MS_NODEV, "mode=755,size=16777216"));
  SBX_RETURN_IF_ERROR(Dir("/dev/pts"));
  SBX_RETURN_IF_ERROR(Mount("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, "ptmxmode=0666,mode=0620,gid=5"));
  SBX_RETURN_IF_ERROR(Dir("/dev/shm", 01777));
  SBX_RETURN_IF_ERROR(Mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777"));
  if (fs::IsDir("/sys/fs/cgroup"))
    (void)Mount("cgroup2", "/sys/fs/cgroup", "cgroup2", MS_NOSUID | MS_NODEV | MS_NOEXEC);
  const std::pair<const char*, const char*> links[] = {
      {"/proc/self/fd", "/dev/fd"}, {"/proc/self/fd/0", "/dev/stdin"},
      {"/proc/self/fd/1", "/dev/stdout"}, {"/proc/self/fd/2", "/dev/stderr"}};
  for (auto [to, name] : links)
    if (::symlink(to, name) != 0 && errno != EEXIST) return ErrnoError(std::string("symlink ") + name);
  return OkStatus();
}

// The sandbox's disks, each the folder QEMU shares under its tag, at its place in the
// root (made where missing, as on the container wall). Another sandbox may use the same
// disk at once, so the guest caches nothing of it but what a shared mapping needs.
Status MountDisks(const VmConfig& cfg) {
  for (size_t i = 0; i < cfg.disks.size(); ++i) {
    const std::string& at = cfg.disks[i];
    if (at.size() < 2 || at[0] != '/') return MakeError(Code::kInvalidArgument, "bad disk mount path " + at);
    SBX_RETURN_IF_ERROR(EnsureDirsUnder("", at));  // no "." or "..", no symlink on the way
    SBX_RETURN_IF_ERROR(Mount(VmDiskTag(i).c_str(), at, "9p", MS_NOSUID | MS_NODEV | MS_NOATIME,
                              "trans=virtio,version=9p2000.L,msize=524288,cache=mmap,access=user"));
  }
  return OkStatus();
}

// The agent's port (a /dev/vport* node whose name is kVmAgentPort), opened for the mux.
Result<UniqueFd> OpenPort() {
  for (int tries = 0; tries < 500; ++tries) {
    if (DIR* d = ::opendir("/sys/class/virtio-ports")) {
      std::string dev;
      while (struct dirent* e = ::readdir(d)) {
        auto n = fs::ReadFile(std::string("/sys/class/virtio-ports/") + e->d_name + "/name", 256);
        if (n.ok() && n->substr(0, n->find('\n')) == kVmAgentPort) dev = std::string("/dev/") + e->d_name;
      }
      ::closedir(d);
      if (!dev.empty()) {
        UniqueFd fd(::open(dev.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC));
        if (fd.valid()) return fd;
      }
    }
    ::usleep(10 * 1000);
  }
  return MakeError(Code::kNotFound, std::string("no virtio port named ") + kVmAgentPort);
}

sockaddr_un AgentAddr(socklen_t* len) {
  sockaddr_un a = {};
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path + 1, kAgentName, std::strlen(kAgentName));
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + std::strlen(kAgentName));
  return a;
}

// The agent's vsock port: connections from the host's relay (from a port below 1024),
// each a link for the mux in turn.
Result<UniqueFd> ListenVsock() {
  UniqueFd fd(::socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return ErrnoError("socket(AF_VSOCK)");
  sockaddr_vm a = {};
  a.svm_family = AF_VSOCK;
  a.svm_cid = VMADDR_CID_ANY;
  a.svm_port = kVmAgentVsockPort;
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return ErrnoError("bind the agent's vsock port");
  if (::listen(fd.get(), 4) != 0) return ErrnoError("listen on the agent's vsock port");
  return fd;
}

// The next link from the host's relay: any other peer is refused.
Result<UniqueFd> AcceptVsock(int lis) {
  for (;;) {
    sockaddr_vm peer = {};
    socklen_t len = sizeof peer;
    UniqueFd c(::accept4(lis, reinterpret_cast<sockaddr*>(&peer), &len, SOCK_CLOEXEC));
    if (!c.valid()) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return ErrnoError("accept on the agent's vsock port");
    }
    if (VsockPeerIsHostRoot(peer.svm_cid, peer.svm_port)) return c;
    std::fprintf(stderr, "sbx-agent: refused a vsock connection from %u:%u\n", peer.svm_cid, peer.svm_port);
  }
}

// The mux's process: channels from the host, each connected to the agent's socket.
[[noreturn]] void RunPortMux(bool vsock) {
  prctl(PR_SET_NAME, "sbx-mux");
  ::signal(SIGPIPE, SIG_IGN);
  MuxOptions o;
  o.wait_for_peer = true;
  o.connect = [] {
    UniqueFd c(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    socklen_t len;
    sockaddr_un a = AgentAddr(&len);
    if (!c.valid() || ::connect(c.get(), reinterpret_cast<sockaddr*>(&a), len) != 0) return UniqueFd();
    return c;
  };
  if (vsock) {
    o.wait_for_peer = false;  // a link that ends is over: the relay dials anew
    auto lis = ListenVsock();
    while (lis.ok()) {
      auto link = AcceptVsock(lis->get());
      if (!link.ok()) break;
      (void)RunMux(link->get(), o);
    }
    std::fprintf(stderr, "sbx-agent: the agent's vsock port: %s\n", lis.ok() ? "accept failed" : lis.error().message.c_str());
    _exit(1);
  }
  while (true) {
    auto port = OpenPort();
    if (port.ok()) {
      auto st = RunMux(port->get(), o);
      if (!st.ok()) std::fprintf(stderr, "sbx-agent: the agent's port: %s\n", st.error().message.c_str());
    }
    ::usleep(100 * 1000);
  }
}

}  // namespace

Status RunVmInit() {
  for (const char* d : {"/proc", "/sys", "/dev"}) SBX_RETURN_IF_ERROR(Dir(d));
  SBX_RETURN_IF_ERROR(Mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC));
  SBX_RETURN_IF_ERROR(Mount("sysfs", "/sys", "sysfs", MS_NOSUID | MS_NODEV | MS_NOEXEC));
  SBX_RETURN_IF_ERROR(Mount("devtmpfs", "/dev", "devtmpfs", MS_NOSUID, "mode=0755"));
  SBX_ASSIGN_OR_RETURN(VmConfig cfg, ReadConfig());
  if (cfg.probe) {
    // The kernel ran its first process: the accelerator works. Nothing more is needed.
    int con = ::open("/dev/console", O_WRONLY | O_CLOEXEC);
    std::string line = std::string("\n") + kVmProbeLine + "\n";
    if (con >= 0 && ::write(con, line.data(), line.size()) > 0) ::fsync(con);
    ::reboot(RB_POWER_OFF);
  }
  SBX_RETURN_IF_ERROR(LoadModules(cfg));
  SBX_RETURN_IF_ERROR(MountRoot(cfg));
  SBX_RETURN_IF_ERROR(SwitchRoot(cfg));
  SBX_RETURN_IF_ERROR(MountDisks(cfg));
  if (!cfg.hostname.empty() && ::sethostname(cfg.hostname.data(), cfg.hostname.size()) != 0)
    return ErrnoError("sethostname");
  SBX_RETURN_IF_ERROR(LoopbackUp());
  SBX_RETURN_IF_ERROR(ConfigureVmNetwork(cfg));
  if (!cfg.nameserver.empty()) SBX_RETURN_IF_ERROR(WriteResolvConf(cfg.nameserver));

  UniqueFd lfd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!lfd.valid()) return ErrnoError("socket");
  socklen_t len;
  sockaddr_un addr = AgentAddr(&len);
  if (::bind(lfd.get(), reinterpret_cast<sockaddr*>(&addr), len) != 0) return ErrnoError("bind the agent's socket");
  if (::listen(lfd.get(), 128) != 0) return ErrnoError("listen");
  pid_t mux = ::fork();
  if (mux < 0) return ErrnoError("fork the port's mux");
  if (mux == 0) {
    lfd.Reset();
    RunPortMux(cfg.vsock);
  }
  // The agent's memory and /proc entries are closed to the sandbox's code.
  if (::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) return ErrnoError("PR_SET_DUMPABLE");
  if (cfg.no_new_privs && ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return ErrnoError("PR_SET_NO_NEW_PRIVS");
  return Serve(lfd.get(), /*is_init=*/true, /*outside_peers_only=*/false, /*only_peer=*/mux);
}

}  // namespace sbx::agent
