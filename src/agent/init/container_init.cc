#include "agent/init/container_init.h"

#include <fcntl.h>
#include <linux/capability.h>
#include <net/if.h>
#include <sched.h>
#include <seccomp.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>
#include <nlohmann/json.hpp>

#include "agent/init/mounts.h"

namespace sbx::agent {
namespace {

Status SetUpDev(const std::string& root) {
  std::string dev = root + "/dev";
  SBX_RETURN_IF_ERROR(EnsureDir(dev));
  SBX_RETURN_IF_ERROR(
      Mount("tmpfs", dev, "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=755,size=65536,nr_inodes=1024"));
  for (const char* n : {"null", "zero", "full", "random", "urandom", "tty"}) {
    std::string target = dev + "/" + n;
    SBX_RETURN_IF_ERROR(EnsureFile(target));
    SBX_RETURN_IF_ERROR(Mount((std::string("/dev/") + n).c_str(), target, nullptr, MS_BIND));
    SBX_RETURN_IF_ERROR(Mount(nullptr, target, nullptr,
                              MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NOEXEC));
  }
  SBX_RETURN_IF_ERROR(EnsureDir(dev + "/pts"));
  SBX_RETURN_IF_ERROR(Mount("devpts", dev + "/pts", "devpts", MS_NOSUID | MS_NOEXEC,
                            "newinstance,ptmxmode=0666,mode=0620"));
  SBX_RETURN_IF_ERROR(EnsureDir(dev + "/shm", 01777));
  SBX_RETURN_IF_ERROR(Mount("tmpfs", dev + "/shm", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
                            "mode=1777,size=67108864"));
  const std::pair<const char*, const char*> links[] = {{"pts/ptmx", "ptmx"},
                                                       {"/proc/self/fd", "fd"},
                                                       {"/proc/self/fd/0", "stdin"},
                                                       {"/proc/self/fd/1", "stdout"},
                                                       {"/proc/self/fd/2", "stderr"}};
  for (auto [to, name] : links)
    if (::symlink(to, (dev + "/" + name).c_str()) != 0) return ErrnoError("symlink /dev/" + std::string(name));
  return OkStatus();
}

}  // namespace

Status LoopbackUp() {
  int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) return ErrnoError("socket");
  struct ifreq ifr;
  std::memset(&ifr, 0, sizeof ifr);
  std::strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
  int rc = ::ioctl(s, SIOCGIFFLAGS, &ifr);
  if (rc == 0) {
    ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
    rc = ::ioctl(s, SIOCSIFFLAGS, &ifr);
  }
  int err = errno;
  ::close(s);
  if (rc != 0) return ErrnoError("bring up loopback", err);
  return OkStatus();
}

// /etc/resolv.conf names sbxd's resolver (after the pivot: every path is the sandbox's).
// A symbolic link there (to a host-side resolver's file) is replaced by the file.
Status WriteResolvConf(const std::string& nameserver) {
  struct stat st;
  if (::stat("/etc", &st) != 0 || !S_ISDIR(st.st_mode)) return OkStatus();
  const std::string text = "# sbx: the sandbox's resolver (its network rules apply to names)\nnameserver " +
                           nameserver + "\n";
  // Not a FIFO or a device an image (or a snapshot) put there: a regular file, or none.
  if (::lstat("/etc/resolv.conf", &st) == 0 && !S_ISREG(st.st_mode) && ::unlink("/etc/resolv.conf") != 0)
    return OkStatus();  // a folder there: the image's stays
  int fd = ::open("/etc/resolv.conf", O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
  if (fd < 0) return OkStatus();  // a read-only or odd /etc: the image's stays
  ssize_t n = ::write(fd, text.data(), text.size());
  ::close(fd);
  if (n != static_cast<ssize_t>(text.size())) return ErrnoError("write /etc/resolv.conf");
  return OkStatus();
}

Result<SandboxConfig> SandboxConfig::FromJson(const std::string& s) {
  auto j = nlohmann::json::parse(s, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return MakeError(Code::kInvalidArgument, "sandbox config is not a JSON object");
  SandboxConfig c;
  try {
    c.base = j.value("base", std::string());
    c.lower = j.at("lower").get<std::vector<std::string>>();
    c.upper = j.at("upper").get<std::string>();
    c.work = j.at("work").get<std::string>();
    c.rootfs = j.at("rootfs").get<std::string>();
    c.socket_path = j.at("socket").get<std::string>();
    c.hostname = j.value("hostname", std::string("sandbox"));
    c.tmp_bytes = j.value("tmp_bytes", uint64_t{0});
    c.api_dir = j.value("api_dir", std::string());
    c.agent_exe = j.value("agent_exe", std::string());
    c.no_new_privs = j.value("no_new_privs", true);
    c.nameserver = j.value("nameserver", std::string());
    if (j.contains("binds"))
      for (const auto& b : j["binds"])
        c.binds.emplace_back(b.at("source").get<std::string>(), b.at("target").get<std::string>());
    if (j.contains("kernel_files"))
      for (const auto& b : j["kernel_files"])
        c.kernel_files.emplace_back(b.at("source").get<std::string>(), b.at("target").get<std::string>());
  } catch (const std::exception& e) {
    return MakeError(Code::kInvalidArgument, std::string("sandbox config: ") + e.what());
  }
  return c;
}

std::string SandboxConfig::ToJson() const {
  nlohmann::json j = {{"base", base}, {"lower", lower},   {"upper", upper},       {"work", work},
                      {"rootfs", rootfs}, {"socket", socket_path}, {"hostname", hostname},
                      {"tmp_bytes", tmp_bytes}, {"api_dir", api_dir},
                      {"agent_exe", agent_exe}, {"no_new_privs", no_new_privs}, {"nameserver", nameserver}};
  return j.dump();
}

const int kSandboxCapabilities[] = {CAP_CHOWN,  CAP_DAC_OVERRIDE, CAP_FOWNER,           CAP_FSETID,
                                    CAP_KILL,   CAP_SETGID,       CAP_SETUID,           CAP_SETPCAP,
                                    CAP_NET_BIND_SERVICE, CAP_SYS_CHROOT, CAP_SETFCAP, CAP_AUDIT_WRITE};

Status LimitCapabilities() {
  uint64_t keep = 0;
  for (int cap : kSandboxCapabilities) keep |= uint64_t{1} << cap;
  for (int cap = 0; cap <= 63; ++cap) {
    if ((keep >> cap) & 1) continue;
    if (::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL)
      return ErrnoError("drop capability " + std::to_string(cap) + " from the bounding set");
  }
  if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 && errno != EINVAL)
    return ErrnoError("clear ambient capabilities");
  struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct data[2];
  std::memset(data, 0, sizeof data);
  data[0].permitted = data[0].effective = static_cast<uint32_t>(keep);
  data[1].permitted = data[1].effective = static_cast<uint32_t>(keep >> 32);
  if (::syscall(SYS_capset, &hdr, data) != 0) return ErrnoError("capset");
  return OkStatus();
}

Status LoadSeccomp(bool no_new_privs) {
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
  if (!ctx) return MakeError(Code::kInternal, "seccomp_init failed");
  struct Guard {
    scmp_filter_ctx c;
    ~Guard() { seccomp_release(c); }
  } guard{ctx};
  // Other architectures' entry points (i386 int 0x80, x32) are not in this filter: any
  // such syscall kills the process.
  if (seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS) != 0)
    return MakeError(Code::kInternal, "seccomp: cannot set the bad-arch action");
  // libseccomp sets no_new_privs itself unless told not to.
  if (seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, no_new_privs ? 1 : 0) != 0)
    return MakeError(Code::kInternal, "seccomp: cannot set the no_new_privs attribute");
  auto deny = [&](int nr, int err = EPERM) -> Status {
    if (nr < 0) return OkStatus();  // not on this architecture
    int rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(err), nr, 0);
    if (rc != 0) return MakeError(Code::kInternal, "seccomp rule " + std::to_string(nr) + ": " + std::strerror(-rc));
    return OkStatus();
  };
  const char* blocked[] = {
      "unshare",       "setns",          "mount",           "umount2",      "pivot_root",
      "move_mount",     "open_tree",       "fsopen",       "fsconfig",
      "fsmount",       "fspick",         "mount_setattr",   "io_uring_setup", "io_uring_enter",
      "io_uring_register", "bpf",        "perf_event_open", "userfaultfd",  "keyctl",
      "add_key",       "request_key",    "kexec_load",      "kexec_file_load", "init_module",
      "finit_module",  "delete_module",  "acct",            "swapon",       "swapoff",
      "reboot",        "syslog",         "open_by_handle_at", "name_to_handle_at",
      "lookup_dcookie", "quotactl",      "quotactl_fd",     "iopl",         "ioperm",
      "settimeofday",  "clock_settime",  "clock_adjtime",   "adjtimex",     "vhangup",
      "nfsservctl",    "uselib",         "fanotify_init",   "create_module", "get_kernel_syms",
      "query_module",  "_sysctl",        "ustat",           "sysfs",
      // NUMA placement: Docker allows these only with CAP_SYS_NICE, which no sandbox has
      // (they move other processes' pages, or pin memory to the host's nodes).
      "mbind",         "set_mempolicy",  "move_pages",      "migrate_pages",
  };
  for (const char* name : blocked) SBX_RETURN_IF_ERROR(deny(seccomp_syscall_resolve_name(name)));
  // clone3 passes its flags in memory that a filter cannot read: make it look absent so
  // libc falls back to clone, whose flags are checked below.
  SBX_RETURN_IF_ERROR(deny(SCMP_SYS(clone3), ENOSYS));
  const uint64_t ns_flags[] = {CLONE_NEWNS,  CLONE_NEWUTS, CLONE_NEWIPC,   CLONE_NEWUSER,
                               CLONE_NEWPID, CLONE_NEWNET, CLONE_NEWCGROUP, 0x80 /*NEWTIME*/};
  for (uint64_t f : ns_flags) {
    if (seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
                         SCMP_A0(SCMP_CMP_MASKED_EQ, f, f)) != 0)
      return MakeError(Code::kInternal, "seccomp: clone rule");
  }
  // Address families that reach the host's kernel crypto, raw links or its hypervisor.
  for (scmp_datum_t family : {38ULL /*AF_ALG*/, 17ULL /*AF_PACKET*/, 40ULL /*AF_VSOCK*/}) {
    if (seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), SCMP_SYS(socket), 1,
                         SCMP_A0(SCMP_CMP_EQ, family)) != 0)
      return MakeError(Code::kInternal, "seccomp: socket rule");
  }
  // personality: only the plain Linux personalities (and the query) are allowed.
  const uint64_t bad_persona[] = {0x0040000 /*ADDR_NO_RANDOMIZE*/, 0x0100000 /*MMAP_PAGE_ZERO*/,
                                  0x0200000 /*ADDR_COMPAT_LAYOUT*/, 0x0400000 /*READ_IMPLIES_EXEC*/,
                                  0x0800000 /*ADDR_LIMIT_32BIT*/,  0x8000000 /*ADDR_LIMIT_3GB*/};
  for (uint64_t f : bad_persona) {
    if (seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(personality), 2,
                         SCMP_A0(SCMP_CMP_MASKED_EQ, f, f),
                         SCMP_A0(SCMP_CMP_NE, 0xffffffffULL)) != 0) {
      // Older libseccomp refuses two comparisons on one argument: block the flag outright.
      if (seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(personality), 1,
                           SCMP_A0(SCMP_CMP_MASKED_EQ, f, f)) != 0)
        return MakeError(Code::kInternal, "seccomp: personality rule");
    }
  }
  int rc = seccomp_load(ctx);
  if (rc != 0) return MakeError(Code::kInternal, std::string("seccomp_load: ") + std::strerror(-rc));
  return OkStatus();
}

Result<UniqueFd> InitSandbox(const SandboxConfig& cfg) {
  if (::unshare(CLONE_NEWCGROUP) != 0) return ErrnoError("unshare cgroup namespace");
  SBX_RETURN_IF_ERROR(Mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE));

  // The listening socket has an abstract name in the sandbox's own network namespace,
  // taken before any of the sandbox's code runs. The sandbox's processes could dial it,
  // but the agent serves only peers outside the sandbox's pid namespace (sbxd).
  UniqueFd lfd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!lfd.valid()) return ErrnoError("socket");
  struct sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  if (cfg.socket_path.size() < 2 || cfg.socket_path[0] != '@' || cfg.socket_path.size() >= sizeof addr.sun_path)
    return MakeError(Code::kInvalidArgument, "bad agent socket name: " + cfg.socket_path);
  std::memcpy(addr.sun_path + 1, cfg.socket_path.data() + 1, cfg.socket_path.size() - 1);
  socklen_t len = static_cast<socklen_t>(offsetof(struct sockaddr_un, sun_path) + cfg.socket_path.size());
  if (::bind(lfd.get(), reinterpret_cast<sockaddr*>(&addr), len) != 0)
    return ErrnoError("bind " + cfg.socket_path);
  if (::listen(lfd.get(), 128) != 0) return ErrnoError("listen");

  std::string lower;
  for (const auto& l : cfg.lower) lower += (lower.empty() ? "" : ":") + l;
  const std::string& root = cfg.rootfs;
  // Layer paths relative to the sandbox's directory keep the host's layout out of the
  // sandbox's /proc/mounts.
  if (!cfg.base.empty() && ::chdir(cfg.base.c_str()) != 0) return ErrnoError("chdir " + cfg.base);
  // nosuid unless setuid programs are to work (no_new_privs off): a setuid-root program
  // then gains root of the sandbox's user namespace, with kSandboxCapabilities at most.
  SBX_RETURN_IF_ERROR(Mount("overlay", root, "overlay", (cfg.no_new_privs ? MS_NOSUID : 0) | MS_NODEV,
                            "lowerdir=" + lower + ",upperdir=" + cfg.upper + ",workdir=" +
                                cfg.work + ",userxattr"));
  SBX_RETURN_IF_ERROR(EnsureDir(root + "/proc"));
  SBX_RETURN_IF_ERROR(Mount("proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC));
  SBX_RETURN_IF_ERROR(EnsureDir(root + "/sys"));
  SBX_RETURN_IF_ERROR(
      Mount("sysfs", root + "/sys", "sysfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC));
  SBX_RETURN_IF_ERROR(SetUpDev(root));
  std::string tmp_size = cfg.tmp_bytes ? ",size=" + std::to_string(cfg.tmp_bytes) : "";
  SBX_RETURN_IF_ERROR(EnsureDir(root + "/tmp", 01777));
  SBX_RETURN_IF_ERROR(
      Mount("tmpfs", root + "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777" + tmp_size));

  // /run is a small tmpfs (as on a booted system) holding sbxd's API socket for code in
  // the sandbox: the one host socket's folder, bound read-only; sbxd knows each caller by
  // its cgroup.
  if (!cfg.api_dir.empty()) {
    SBX_RETURN_IF_ERROR(EnsureDir(root + "/run"));
    SBX_RETURN_IF_ERROR(Mount("tmpfs", root + "/run", "tmpfs", MS_NOSUID | MS_NODEV,
                              "mode=755,size=16777216,nr_inodes=4096"));
    std::string target = root + "/run/sbx";
    SBX_RETURN_IF_ERROR(EnsureDir(target));
    SBX_RETURN_IF_ERROR(Mount(cfg.api_dir.c_str(), target, nullptr, MS_BIND));
    // Executable: the agent's binary is there (read-only, nosuid: it grants nothing).
    SBX_RETURN_IF_ERROR(Mount(nullptr, target, nullptr, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV));
  }

  // Disks: bind mounts of host filesystems that sbxd mounted nosuid,nodev (flags a bind
  // inside a user namespace cannot clear).
  for (const auto& [source, target] : cfg.binds) {
    SBX_RETURN_IF_ERROR(EnsureDirsUnder(root, target));
    // The bind keeps the source's nosuid,nodev,noatime, locked by the user namespace.
    SBX_RETURN_IF_ERROR(Mount(source.c_str(), root + target, nullptr, MS_BIND | MS_REC));
  }

  for (const char* p : {"/proc/kcore", "/proc/keys", "/proc/timer_list", "/proc/sched_debug",
                        "/proc/latency_stats", "/proc/acpi", "/proc/scsi", "/sys/firmware",
                        "/proc/kallsyms", "/proc/kpagecount", "/proc/kpageflags", "/proc/config.gz"})
    SBX_RETURN_IF_ERROR(Mask(root + p));
  // The host's kernel command line and boot id stay the host's.
  for (const auto& [source, target] : cfg.kernel_files) {
    SBX_RETURN_IF_ERROR(Mount(source.c_str(), root + target, nullptr, MS_BIND));
    SBX_RETURN_IF_ERROR(Mount(nullptr, root + target, nullptr,
                              MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC));
  }
  for (const char* p : {"/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus", "/proc/fs"})
    SBX_RETURN_IF_ERROR(BindReadOnly(root + p));

  if (!cfg.hostname.empty() && ::sethostname(cfg.hostname.data(), cfg.hostname.size()) != 0)
    return ErrnoError("sethostname");
  SBX_RETURN_IF_ERROR(LoopbackUp());

  if (::chdir(root.c_str()) != 0) return ErrnoError("chdir " + root);
  if (::syscall(SYS_pivot_root, ".", ".") != 0) return ErrnoError("pivot_root");
  if (::umount2(".", MNT_DETACH) != 0) return ErrnoError("detach the old root");
  if (::chdir("/") != 0) return ErrnoError("chdir /");
  if (!cfg.nameserver.empty()) SBX_RETURN_IF_ERROR(WriteResolvConf(cfg.nameserver));

  // The agent's own memory and /proc entries are closed to the sandbox's code.
  if (::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) return ErrnoError("PR_SET_DUMPABLE");
  // The filter first: without no_new_privs, loading it takes CAP_SYS_ADMIN (of the
  // sandbox's user namespace), which LimitCapabilities drops.
  if (cfg.no_new_privs && ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return ErrnoError("PR_SET_NO_NEW_PRIVS");
  SBX_RETURN_IF_ERROR(LoadSeccomp(cfg.no_new_privs));
  SBX_RETURN_IF_ERROR(LimitCapabilities());
  return lfd;
}

}  // namespace sbx::agent
