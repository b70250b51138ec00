#include "runtime/microvm/guest_files.h"

#include <fcntl.h>
#include <ftw.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <set>
#include <cstring>

#include "base/fs.h"
#include "base/log.h"
#include "base/reaper.h"
#include "base/unique_fd.h"

// linux/fs.h's (which clashes with glibc's sys/mount.h).
#ifndef FICLONE
#define FICLONE _IOW(0x94, 9, int)
#endif

namespace sbx::runtime::microvm {
namespace {

// ---- newc cpio -------------------------------------------------------------------------

class Cpio {
 public:
  void Dir(const std::string& name) { Entry(name, S_IFDIR | 0755, "", 0, 0); }
  void CharDev(const std::string& name, unsigned major, unsigned minor) {
    Entry(name, S_IFCHR | 0600, "", major, minor);
  }
  void File(const std::string& name, mode_t mode, const std::string& data) { Entry(name, S_IFREG | mode, data, 0, 0); }
  std::string Finish() {
    Entry("TRAILER!!!", 0, "", 0, 0);
    return std::move(out_);
  }

 private:
  void Entry(const std::string& name, mode_t mode, const std::string& data, unsigned rmaj, unsigned rmin) {
    char h[111];
    std::snprintf(h, sizeof h, "070701%08X%08X%08X%08X%08X%08X%08zX%08X%08X%08X%08X%08zX%08X", ++ino_,
                  static_cast<unsigned>(mode), 0u, 0u, S_ISDIR(mode) ? 2u : 1u, 0u, data.size(), 0u, 0u, rmaj,
                  rmin, name.size() + 1, 0u);
    out_.append(h, 110);
    out_ += name;
    out_.push_back('\0');
    Pad();
    out_ += data;
    Pad();
  }
  void Pad() {
    while (out_.size() % 4) out_.push_back('\0');
  }
  std::string out_;
  unsigned ino_ = 0;
};

// ---- id-mapped view of a layer -----------------------------------------------------------

struct MountAttr {
  uint64_t attr_set, attr_clr, propagation, userns_fd;
};
constexpr uint64_t kAttrRdonly = 0x1, kAttrIdmap = 0x100000;
constexpr unsigned kOpenTreeClone = 1, kMoveMountFEmptyPath = 0x4;

// A user namespace whose ids [uid_base, uid_base + 65536) are the host's [0, 65536): an
// id-mapped mount through it shows files owned by sandbox root as owned by root.
Result<UniqueFd> UnshiftNamespace(uid_t uid_base) {
  int ready[2];
  if (::pipe2(ready, O_CLOEXEC) != 0) return ErrnoError("pipe");
  UniqueFd r(ready[0]), w(ready[1]);
  pid_t pid = static_cast<pid_t>(::syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, nullptr, nullptr, nullptr, nullptr));
  if (pid < 0) return ErrnoError("clone a user namespace");
  if (pid == 0) {
    char c;
    w.Reset();
    (void)!::read(r.get(), &c, 1);  // until the parent has the namespace
    _exit(0);
  }
  auto done = [&] {
    w.Reset();
    // The reaper may take the child first: either way it is gone after this.
    (void)::waitpid(pid, nullptr, 0);
  };
  const std::string map = std::to_string(uid_base) + " 0 65536\n";
  const std::string p = "/proc/" + std::to_string(pid);
  Status st = fs::WriteFile(p + "/uid_map", map, false);
  if (st.ok()) st = fs::WriteFile(p + "/setgroups", "deny", false);
  if (st.ok()) st = fs::WriteFile(p + "/gid_map", map, false);
  UniqueFd ns(st.ok() ? ::open((p + "/ns/user").c_str(), O_RDONLY | O_CLOEXEC) : -1);
  int err = errno;
  done();
  if (!st.ok()) return st.error();
  if (!ns.valid()) return ErrnoError("open the user namespace", err);
  return ns;
}

Status MountUnshifted(const std::string& layer, const std::string& at, uid_t uid_base) {
  SBX_ASSIGN_OR_RETURN(UniqueFd ns, UnshiftNamespace(uid_base));
  UniqueFd tree(static_cast<int>(::syscall(SYS_open_tree, AT_FDCWD, layer.c_str(), kOpenTreeClone | O_CLOEXEC)));
  if (!tree.valid()) return ErrnoError("open_tree " + layer);
  MountAttr attr = {kAttrIdmap | kAttrRdonly, 0, 0, static_cast<uint64_t>(ns.get())};
  if (::syscall(SYS_mount_setattr, tree.get(), "", AT_EMPTY_PATH, &attr, sizeof attr) != 0)
    return ErrnoError("id-map the mount of " + layer);
  if (::syscall(SYS_move_mount, tree.get(), "", AT_FDCWD, at.c_str(), kMoveMountFEmptyPath) != 0)
    return ErrnoError("mount " + layer + " at " + at);
  return OkStatus();
}

// The bytes and entries of a tree (for the image's size and inode count).
thread_local uint64_t t_bytes, t_entries;
int Count(const char*, const struct stat* st, int, struct FTW*) {
  t_bytes += static_cast<uint64_t>(st->st_size);
  ++t_entries;
  return 0;
}

std::string Hash(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  char b[17];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(h));
  return b;
}

}  // namespace

Status GuestKernel::Check() const {
  for (const char* f : {"/vmlinux", "/modules.list"})
    if (!fs::Exists(dir + f))
      return MakeError(Code::kFailedPrecondition, "the guest kernel folder " + dir + " has no " + (f + 1) +
                                                      " (make it with scripts/vm/guest.sh)");
  return OkStatus();
}

bool GuestKernel::HasSection(const std::string& section, const std::string& module) const {
  auto list = fs::ReadFile(dir + "/modules.list", 1 << 16);
  return list.ok() && list->find("@" + section + "\n") != std::string::npos &&
         fs::Exists(dir + "/modules/" + module + ".ko");
}

Status WriteInitramfs(const GuestKernel& kernel, const std::string& agent, const std::string& out) {
  SBX_RETURN_IF_ERROR(kernel.Check());
  Cpio c;
  for (const char* d : {"dev", "proc", "sys", "mnt", "newroot", "lib", "lib/modules"}) c.Dir(d);
  c.CharDev("dev/console", 5, 1);
  SBX_ASSIGN_OR_RETURN(std::string list, fs::ReadFile(kernel.dir + "/modules.list", 1 << 16));
  size_t at = 0;
  while (at < list.size()) {
    size_t nl = list.find('\n', at);
    std::string name = list.substr(at, nl == std::string::npos ? std::string::npos : nl - at);
    at = nl == std::string::npos ? list.size() : nl + 1;
    if (name.empty() || name[0] == '@') continue;  // "@disks": the modules after it are the disks'
    SBX_ASSIGN_OR_RETURN(std::string ko, fs::ReadFile(kernel.dir + "/modules/" + name + ".ko", 64 << 20));
    c.File("lib/modules/" + name + ".ko", 0644, ko);
  }
  c.File("modules", 0644, list);
  SBX_ASSIGN_OR_RETURN(std::string bin, fs::ReadFile(agent, 256 << 20));
  c.File("init", 0755, bin);
  return fs::WriteFileAtomic(out, c.Finish(), 0644);
}

std::string LayerImages::PathOf(const std::string& layer) const {
  return dir_ + "/" + Hash(layer) + ".ext4";
}

bool IsVmDiskLayer(const std::string& layer) { return fs::Exists(layer + "/" + kVmDiskLayer); }


Result<LayerImages::Disk> LayerImages::ImageOf(const std::string& layer) {
  if (IsVmDiskLayer(layer)) return Disk{layer + "/" + kVmDiskLayer, "upper"};
  const std::string image = PathOf(layer);
  {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return !building_.count(image); });
    if (fs::Exists(image)) return Disk{image, ""};
    building_[image] = true;
  }
  Status st = Build(layer, image);
  {
    std::lock_guard<std::mutex> l(mu_);
    building_.erase(image);
  }
  cv_.notify_all();
  if (!st.ok()) return st.error().Wrap("the disk image of layer " + layer);
  return Disk{image, ""};
}

Status LayerImages::Open() {
  // Every VM's QEMU (each its own user) reads the images: they hold the layers' files,
  // which every sandbox on them sees anyway.
  SBX_RETURN_IF_ERROR(fs::MkdirAll(dir_, 0711));
  if (::chmod(dir_.c_str(), 0711) != 0) return ErrnoError("chmod " + dir_);
  return OkStatus();
}

Status LayerImages::Build(const std::string& layer, const std::string& image) {
  const std::string staging = image + ".view", tmp = image + ".tmp";
  (void)::umount2(staging.c_str(), MNT_DETACH);
  (void)::rmdir(staging.c_str());
  (void)::unlink(tmp.c_str());
  if (::mkdir(staging.c_str(), 0700) != 0) return ErrnoError("mkdir " + staging);
  auto cleanup = [&] {
    (void)::umount2(staging.c_str(), MNT_DETACH);
    (void)::rmdir(staging.c_str());
  };
  if (auto st = MountUnshifted(layer, staging, uid_base_); !st.ok()) {
    cleanup();
    return st;
  }
  t_bytes = t_entries = 0;
  ::nftw(staging.c_str(), Count, 32, FTW_PHYS);
  // Room for every file's blocks and its inode, the directories' blocks and ext4's own.
  const uint64_t inodes = t_entries + t_entries / 4 + 1024;
  const uint64_t bytes = (t_bytes + t_bytes / 4 + inodes * 4096 + (64ull << 20) + 4095) / 4096 * 4096;
  auto ran = Reaper::Get().Run({"mkfs.ext4", "-q", "-F", "-O", "^has_journal", "-b", "4096", "-N",
                                std::to_string(inodes), "-d", staging, tmp, std::to_string(bytes / 1024) + "k"},
                               "", 0, nullptr, 600000);
  cleanup();
  if (!ran.ok()) return ran.error();
  if (ran->exit_code != 0) {
    (void)::unlink(tmp.c_str());
    return MakeError(Code::kInternal, "mkfs.ext4 failed: " + ran->output);
  }
  // mkfs made a lost+found the layer does not have: it would show in the sandbox's root.
  auto rm = Reaper::Get().Run({"debugfs", "-w", "-R", "rmdir /lost+found", tmp}, "", 0, nullptr, 60000);
  if (!rm.ok() || rm->exit_code != 0) SBX_LOG(kWarn) << "debugfs could not remove lost+found from " << tmp;
  if (::chmod(tmp.c_str(), 0644) != 0) return ErrnoError("chmod " + tmp);
  // Which layer it is of, for Forget (a layer is collected by its folder).
  SBX_RETURN_IF_ERROR(fs::WriteFileAtomic(LayerNoteOf(image), layer, 0600));
  if (::rename(tmp.c_str(), image.c_str()) != 0) return ErrnoError("rename " + tmp);
  return OkStatus();
}

std::string LayerImages::LayerNoteOf(const std::string& image) {
  return image.substr(0, image.size() - std::string(".ext4").size()) + ".layer";
}

void LayerImages::Forget(const std::string& layer) {
  // The images of `layer` and of any layer inside its folder (a capture's root is a
  // folder in it), by the notes beside them; an image made before notes, by its name.
  std::set<std::string> images = {PathOf(layer)};
  if (auto names = fs::ListDir(dir_); names.ok())
    for (const auto& n : *names) {
      if (n.size() < 6 || n.compare(n.size() - 6, 6, ".layer") != 0) continue;
      auto of = fs::ReadFile(dir_ + "/" + n, 1 << 16);
      if (of.ok() && (*of == layer || of->rfind(layer + "/", 0) == 0))
        images.insert(dir_ + "/" + n.substr(0, n.size() - 6) + ".ext4");
    }
  std::unique_lock<std::mutex> l(mu_);
  for (const auto& image : images) {
    cv_.wait(l, [&] { return !building_.count(image); });
    if (::unlink(image.c_str()) != 0 && errno != ENOENT) SBX_LOG(kWarn) << "remove " << image << ": " << std::strerror(errno);
    (void)::unlink(LayerNoteOf(image).c_str());
  }
}

Status MakeOwnDisk(const std::string& path, uint64_t bytes) {
  const std::string tmp = path + ".tmp";
  (void)::unlink(tmp.c_str());
  auto ran = Reaper::Get().Run({"mkfs.ext4", "-q", "-F", "-b", "4096", "-E", "root_owner=0:0,lazy_itable_init=1",
                                tmp, std::to_string(bytes / 1024) + "k"},
                               "", 0, nullptr, 120000);
  if (!ran.ok()) return ran.error();
  if (ran->exit_code != 0) {
    (void)::unlink(tmp.c_str());
    return MakeError(Code::kInternal, "mkfs.ext4 failed: " + ran->output);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) return ErrnoError("rename " + tmp);
  return OkStatus();
}

bool DiskIsClean(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  unsigned char sb[0x64];
  if (!fd.valid() || ::pread(fd.get(), sb, sizeof sb, 1024) != static_cast<ssize_t>(sizeof sb)) return false;
  if (sb[0x38] != 0x53 || sb[0x39] != 0xEF) return false;  // not ext4 (its magic)
  const uint32_t incompat = sb[0x60] | (sb[0x61] << 8) | (sb[0x62] << 16) | (static_cast<uint32_t>(sb[0x63]) << 24);
  return (incompat & 0x4) == 0;  // EXT4_FEATURE_INCOMPAT_RECOVER: the journal needs a replay
}

Result<uint64_t> CopyDisk(const std::string& from, const std::string& to) {
  UniqueFd in(::open(from.c_str(), O_RDONLY | O_CLOEXEC));
  if (!in.valid()) return ErrnoError("open " + from);
  struct stat st;
  if (::fstat(in.get(), &st) != 0) return ErrnoError("stat " + from);
  UniqueFd out(::open(to.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (!out.valid()) return ErrnoError("create " + to);
  auto fail = [&](const std::string& what) {
    Error e = ErrnoError(what);
    (void)::unlink(to.c_str());
    return e;
  };
  if (::ioctl(out.get(), FICLONE, in.get()) == 0) return static_cast<uint64_t>(st.st_blocks) * 512;
  if (::ftruncate(out.get(), st.st_size) != 0) return fail("size " + to);
  auto copied = fs::CopyData(in.get(), out.get(), static_cast<uint64_t>(st.st_size));
  if (!copied.ok()) {
    (void)::unlink(to.c_str());
    return copied.error().Wrap("copying " + from);
  }
  if (::fsync(out.get()) != 0) return fail("sync " + to);
  return *copied;
}

}  // namespace sbx::runtime::microvm
