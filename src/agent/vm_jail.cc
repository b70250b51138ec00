#include "agent/vm_jail.h"

#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <linux/capability.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>

#include "agent/init/mounts.h"
#include "base/fs.h"
#include "base/unique_fd.h"

namespace sbx::agent {
namespace {

// Where the jail's tmpfs is built, inside the private namespace (the host's /tmp is
// untouched; anything the jail takes from below it was opened before).
constexpr const char* kRoot = "/tmp";

// A host path the jail shows, open before the jail's tmpfs hides anything.
struct Source {
  std::string path;
  UniqueFd fd;  // O_PATH
  bool dir = false;
  bool writable = false;
};

Result<Source> Open(const std::string& path, bool writable) {
  if (path.size() < 2 || path[0] != '/') return MakeError(Code::kInvalidArgument, "not an absolute path: " + path);
  Source s;
  s.path = path;
  s.writable = writable;
  s.fd = UniqueFd(::open(path.c_str(), O_PATH | O_CLOEXEC));
  if (!s.fd.valid()) return ErrnoError("open " + path);
  struct stat st;
  if (::fstat(s.fd.get(), &st) != 0) return ErrnoError("stat " + path);
  s.dir = S_ISDIR(st.st_mode);
  return s;
}

// Binds `s` at its own path in the jail: read-only unless writable, never a device or a
// set-uid program, and never executable but for the system's own files (`exec`).
Status Show(const Source& s, bool exec = false) {
  const size_t slash = s.path.rfind('/');
  if (slash > 0) SBX_RETURN_IF_ERROR(EnsureDirsUnder(kRoot, s.path.substr(0, slash)));
  const std::string target = kRoot + s.path;
  SBX_RETURN_IF_ERROR(s.dir ? EnsureDir(target) : EnsureFile(target));
  const std::string from = "/proc/self/fd/" + std::to_string(s.fd.get());
  SBX_RETURN_IF_ERROR(Mount(from.c_str(), target, nullptr, MS_BIND));
  unsigned long flags = MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NODEV;
  if (!s.writable) flags |= MS_RDONLY;
  if (!exec) flags |= MS_NOEXEC;
  return Mount(nullptr, target, nullptr, flags);
}

Status ShowDev() {
  const std::string dev = std::string(kRoot) + "/dev";
  SBX_RETURN_IF_ERROR(EnsureDir(dev));
  SBX_RETURN_IF_ERROR(Mount("tmpfs", dev, "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=755,size=65536,nr_inodes=64"));
  for (const char* n : {"null", "zero", "full", "random", "urandom", "kvm"}) {
    const std::string host = std::string("/dev/") + n;
    struct stat st;
    if (::stat(host.c_str(), &st) != 0 || !S_ISCHR(st.st_mode)) continue;
    const std::string target = dev + "/" + n;
    SBX_RETURN_IF_ERROR(EnsureFile(target));
    SBX_RETURN_IF_ERROR(Mount(host.c_str(), target, nullptr, MS_BIND));
    SBX_RETURN_IF_ERROR(Mount(nullptr, target, nullptr, MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NOEXEC));
  }
  return Mount(nullptr, dev, nullptr, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NOEXEC);
}

Status ShowProc() {
  const std::string proc = std::string(kRoot) + "/proc";
  SBX_RETURN_IF_ERROR(EnsureDir(proc));
  const unsigned long flags = MS_NOSUID | MS_NODEV | MS_NOEXEC;
  // A proc of its own: QEMU's user sees its own processes and no other's.
  if (::mount("proc", proc.c_str(), "proc", flags, "hidepid=invisible") == 0) return OkStatus();
  if (errno != EINVAL) return ErrnoError("mount proc on " + proc);
  return Mount("proc", proc, "proc", flags, "hidepid=2");  // kernels before 5.8
}

}  // namespace

Status EnterVmJail(const JailFiles& files) {
  if (::unshare(CLONE_NEWNS) != 0) return ErrnoError("unshare a mount namespace");
  // Nothing done here reaches the host's mounts.
  SBX_RETURN_IF_ERROR(Mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE));

  // Every source is opened first: the jail's tmpfs may cover some of their paths.
  // A merged-/usr system's /bin, /lib, ... are links into /usr, made again in the jail;
  // older layouts have folders, shown read-only.
  std::vector<std::pair<std::string, std::string>> links;  // (path, target)
  std::vector<Source> system, vm;
  auto open = [](std::vector<Source>& into, const std::string& p, bool writable) -> Status {
    auto s = Open(p, writable);
    if (!s.ok()) return s.error();
    into.push_back(std::move(*s));
    return OkStatus();
  };
  for (const char* top : {"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/usr", "/etc/ld.so.cache", "/sys"}) {
    struct stat st;
    if (::lstat(top, &st) != 0) continue;
    if (S_ISLNK(st.st_mode)) {
      char to[PATH_MAX];
      ssize_t n = ::readlink(top, to, sizeof(to) - 1);
      if (n < 0) return ErrnoError(std::string("readlink ") + top);
      links.emplace_back(top, std::string(to, static_cast<size_t>(n)));
    } else {
      SBX_RETURN_IF_ERROR(open(system, top, false));
    }
  }
  if (files.program.rfind('/', 0) == 0) SBX_RETURN_IF_ERROR(open(system, files.program, false));
  SBX_RETURN_IF_ERROR(open(vm, files.dir, true));
  for (const auto& p : files.read_only) SBX_RETURN_IF_ERROR(open(vm, p, false));
  for (const auto& p : files.read_write) SBX_RETURN_IF_ERROR(open(vm, p, true));

  SBX_RETURN_IF_ERROR(Mount("tmpfs", kRoot, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=755,size=1048576"));
  for (const auto& [path, to] : links) {
    const size_t slash = path.rfind('/');
    if (slash > 0) SBX_RETURN_IF_ERROR(EnsureDirsUnder(kRoot, path.substr(0, slash)));
    if (::symlink(to.c_str(), (kRoot + path).c_str()) != 0) return ErrnoError("symlink " + path);
  }
  for (const auto& s : system) SBX_RETURN_IF_ERROR(Show(s, /*exec=*/s.path != "/sys"));
  SBX_RETURN_IF_ERROR(ShowDev());
  SBX_RETURN_IF_ERROR(ShowProc());
  for (const auto& s : vm) SBX_RETURN_IF_ERROR(Show(s));
  SBX_RETURN_IF_ERROR(Mount(nullptr, kRoot, nullptr, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC));

  if (::chdir(kRoot) != 0) return ErrnoError(std::string("chdir ") + kRoot);
  if (::syscall(SYS_pivot_root, ".", ".") != 0) return ErrnoError("pivot_root");
  if (::umount2(".", MNT_DETACH) != 0) return ErrnoError("detach the host's root");
  if (::chdir(files.dir.c_str()) != 0) return ErrnoError("chdir " + files.dir + " in the jail");
  return OkStatus();
}

Status MapShareIds(pid_t child, const ShareIds& ids, uid_t uid, gid_t gid) {
  if (ids.count == 0 || (uid >= ids.base && uid - ids.base < ids.count) || (gid >= ids.base && gid - ids.base < ids.count))
    return MakeError(Code::kInvalidArgument, "QEMU's own ids fall in the sandboxes' range");
  const std::string own = std::to_string(ids.count) + " ";
  const std::string range = "0 " + std::to_string(ids.base) + " " + std::to_string(ids.count) + "\n";
  const std::string proc = "/proc/" + std::to_string(child);
  SBX_RETURN_IF_ERROR(fs::WriteFile(proc + "/uid_map", range + own + std::to_string(uid) + " 1\n"));
  return fs::WriteFile(proc + "/gid_map", range + own + std::to_string(gid) + " 1\n");
}

Status UnshareIds() {
  if (::unshare(CLONE_NEWUSER) != 0) return ErrnoError("unshare a user namespace");
  return OkStatus();
}

Status TakeShareIds(const ShareIds& ids) {
  // The five rights are capabilities 0 to 4: CHOWN, DAC_OVERRIDE, DAC_READ_SEARCH, FOWNER, FSETID.
  constexpr uint32_t kKeep = (1u << CAP_CHOWN) | (1u << CAP_DAC_OVERRIDE) | (1u << CAP_DAC_READ_SEARCH) |
                             (1u << CAP_FOWNER) | (1u << CAP_FSETID);
  for (int cap = 0; cap < 64; ++cap)
    if (cap >= 32 || !(kKeep & (1u << cap)))
      if (::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL) return ErrnoError("drop a capability");
  if (::prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0) != 0) return ErrnoError("PR_SET_KEEPCAPS");
  // Supplementary groups stay those set before (the namespace's setgroups is not needed).
  const uid_t own = ids.count;
  if (::setresgid(own, own, own) != 0 || ::setresuid(own, own, own) != 0) return ErrnoError("take QEMU's ids");
  struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct data[2] = {};
  data[0].effective = data[0].permitted = data[0].inheritable = kKeep;
  if (::syscall(SYS_capset, &hdr, data) != 0) return ErrnoError("capset");
  for (int cap = 0; cap < 32; ++cap)
    if ((kKeep & (1u << cap)) && ::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, cap, 0, 0) != 0)
      return ErrnoError("keep a capability across exec");
  return OkStatus();
}

Status BecomeKeeping(uid_t uid, gid_t gid, uint32_t keep) {
  for (int cap = 0; cap < 64; ++cap)
    if (cap >= 32 || !(keep & (1u << cap)))
      if (::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL) return ErrnoError("drop a capability");
  if (::prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0) != 0) return ErrnoError("PR_SET_KEEPCAPS");
  if (::setgroups(0, nullptr) != 0 || ::setresgid(gid, gid, gid) != 0 || ::setresuid(uid, uid, uid) != 0)
    return ErrnoError("become uid " + std::to_string(uid));
  return SetCapabilities(keep);
}

Status SetCapabilities(uint32_t keep) {
  struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct data[2] = {};
  data[0].effective = data[0].permitted = keep;
  if (::syscall(SYS_capset, &hdr, data) != 0) return ErrnoError("capset");
  return OkStatus();
}

}  // namespace sbx::agent
