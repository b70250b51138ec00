#include "disks/disk_store.h"

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <fstream>

#include "base/unique_fd.h"

#include "base/fs.h"
#include "base/ids.h"
#include "base/log.h"
#include "base/reaper.h"

namespace sbx::disks {

DiskStore::DiskStore(std::string data_dir, storage::Store* store, uid_t uid_base)
    : data_dir_(std::move(data_dir)), store_(store), uid_base_(uid_base) {}

bool DiskStore::Mounted(const std::string& id) const { return fs::IsMountPoint(MountPath(id)); }

Status DiskStore::Mount(const std::string& id) {
  if (Mounted(id)) return OkStatus();
  std::string dir = data_dir_ + "/disks/" + id;
  SBX_RETURN_IF_ERROR(fs::MkdirAll(dir + "/mnt", 0755));
  // nosuid and nodev: whatever a sandbox leaves on its disk gains nothing in the next one.
  auto r = Reaper::Get().Run({"mount", "-o", "loop,nosuid,nodev,noatime", dir + "/disk.img", dir + "/mnt"});
  if (!r.ok()) return r.error();
  if (r->exit_code != 0) return MakeError(Code::kInternal, "mounting disk " + id + ": " + r->output);
  return OkStatus();
}

Result<storage::DiskRecord> DiskStore::Create(const std::string& name, int64_t size_mb) {
  if (!name.empty() && !ValidName(name))
    return MakeError(Code::kInvalidArgument, "invalid name: names match [a-z0-9][a-z0-9._-]{0,62}");
  if (size_mb < 16 || size_mb > (int64_t{1} << 22))
    return MakeError(Code::kInvalidArgument, "size_mb must be between 16 and 4194304");
  if (!name.empty()) {
    SBX_ASSIGN_OR_RETURN(auto existing, store_->GetDisk(name));
    if (existing) return MakeError(Code::kAlreadyExists, "a disk named \"" + name + "\" exists");
  }
  std::lock_guard<std::mutex> lock(mu_);
  storage::DiskRecord rec{NewId("dk"), name, size_mb, NowUnixMs()};
  std::string dir = data_dir_ + "/disks/" + rec.id;
  SBX_RETURN_IF_ERROR(fs::MkdirAll(dir, 0711));
  auto fail = [&](const Error& e) -> Result<storage::DiskRecord> {
    (void)::umount2((dir + "/mnt").c_str(), MNT_DETACH);
    (void)fs::RemoveTree(dir);
    return e.Wrap("creating disk");
  };
  {
    // Sparse: the size is a limit, not an allocation.
    UniqueFd img(::open((dir + "/disk.img").c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600));
    if (!img.valid()) return fail(ErrnoError("create the image"));
    if (::ftruncate(img.get(), size_mb << 20) != 0) return fail(ErrnoError("size the image"));
  }
  std::string owner = std::to_string(uid_base_) + ":" + std::to_string(uid_base_);
  auto mk = Reaper::Get().Run({"mkfs.ext4", "-q", "-F", "-m", "0", "-E", "root_owner=" + owner + ",lazy_itable_init=1",
                               dir + "/disk.img"});
  if (!mk.ok()) return fail(mk.error());
  if (mk->exit_code != 0) {
    Error e = MakeError(Code::kInternal, "mkfs.ext4: " + mk->output);
    // Out of space on the data dir's file system: say so (the caller makes it a 503).
    if (mk->output.find("No space left on device") != std::string::npos) e.sys_errno = ENOSPC;
    return fail(e);
  }
  if (auto st = Mount(rec.id); !st.ok()) return fail(st.error());
  // No lost+found clutter in the user's workspace.
  (void)::rmdir((dir + "/mnt/lost+found").c_str());
  if (auto st = store_->InsertDisk(rec); !st.ok()) {
    if (st.error().code == Code::kAlreadyExists)
      return fail(MakeError(Code::kAlreadyExists, "a disk named \"" + name + "\" exists"));
    return fail(st.error());
  }
  return rec;
}

Result<storage::DiskRecord> DiskStore::Get(const std::string& id) {
  if (!ValidName(id)) return MakeError(Code::kInvalidArgument, "invalid disk id");
  SBX_ASSIGN_OR_RETURN(auto rec, store_->GetDisk(id));
  if (!rec) return MakeError(Code::kNotFound, "disk " + id + " not found");
  return *rec;
}

Result<std::vector<storage::DiskRecord>> DiskStore::List() { return store_->ListDisks(); }

Result<std::string> DiskStore::Resolve(const std::string& ref) {
  SBX_ASSIGN_OR_RETURN(auto all, store_->ListDisks());
  for (const auto& d : all)
    if (d.id == ref) return d.id;
  for (const auto& d : all)
    if (!ref.empty() && d.name == ref) return d.id;
  std::vector<std::string> ids;
  for (const auto& d : all) ids.push_back(d.id);
  return PickByIdPrefix(ref, ids, "dk-", "disk");
}

Status DiskStore::Delete(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  std::string dir = data_dir_ + "/disks/" + id;
  if (Mounted(id) && ::umount2((dir + "/mnt").c_str(), 0) != 0) {
    if (errno == EBUSY) return MakeError(Code::kFailedPrecondition, "disk " + id + " is in use");
    return ErrnoError("unmount disk " + id);
  }
  SBX_RETURN_IF_ERROR(store_->DeleteDisk(id));
  return fs::RemoveTree(dir);
}

Status DiskStore::MountAll() {
  SBX_ASSIGN_OR_RETURN(auto disks, store_->ListDisks());
  for (const auto& d : disks) {
    Status st = Mount(d.id);
    if (!st.ok()) SBX_LOG(kError) << st.error().message;
  }
  return OkStatus();
}

namespace {

struct OpenHow {
  uint64_t flags, mode, resolve;
};
constexpr uint64_t kResolveNoXdev = 0x01, kResolveNoMagiclinks = 0x02, kResolveInRoot = 0x10;

// openat2 with `dir` as the root: "..", absolute paths and symlinks all stay inside it.
int OpenInRoot(int dir, const std::string& path, uint64_t flags, uint64_t mode = 0) {
  OpenHow how{flags | O_CLOEXEC, mode, kResolveInRoot | kResolveNoMagiclinks | kResolveNoXdev};
  return static_cast<int>(::syscall(SYS_openat2, dir, path.c_str(), &how, sizeof how));
}

Status CheckPath(const std::string& path) {
  if (path.empty() || path.size() > 4096 || path.find('\0') != std::string::npos)
    return MakeError(Code::kInvalidArgument, "path must be a non-empty path inside the disk");
  return OkStatus();
}

// A write through the disk files API that finds the disk full meets the disk's quota: 429
// `quota_exceeded` (docs/API.md), where the errno table says 413.
Error OnFullDisk(Error e) {
  if (e.sys_errno == ENOSPC || e.sys_errno == EDQUOT) e.code = Code::kResourceExhausted;
  return e;
}

}  // namespace

Result<std::string> DiskStore::ReadFile(const std::string& id, const std::string& path, size_t max_bytes) {
  SBX_RETURN_IF_ERROR(CheckPath(path));
  SBX_ASSIGN_OR_RETURN(auto disk, Get(id));
  UniqueFd root(::open(MountPath(disk.id).c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!root.valid()) return ErrnoError("open disk " + disk.id);
  // O_NONBLOCK: a fifo planted on the disk must not hang the daemon.
  UniqueFd fd(OpenInRoot(root.get(), path, O_RDONLY | O_NOCTTY | O_NONBLOCK));
  if (!fd.valid()) return ErrnoError(path);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return ErrnoError("stat " + path);
  if (!S_ISREG(st.st_mode)) return MakeError(Code::kInvalidArgument, path + " is not a regular file");
  if (static_cast<uint64_t>(st.st_size) > max_bytes)
    return MakeError(Code::kTooLarge, path + " is larger than " + std::to_string(max_bytes) + " bytes");
  std::string out;
  char buf[65536];
  ssize_t n;
  while ((n = ::read(fd.get(), buf, sizeof buf)) > 0) {
    out.append(buf, n);
    if (out.size() > max_bytes) return MakeError(Code::kTooLarge, path + " grew past the limit");
  }
  if (n < 0) return ErrnoError("read " + path);
  return out;
}

Status DiskStore::WriteFile(const std::string& id, const std::string& path, const std::string& data) {
  SBX_RETURN_IF_ERROR(CheckPath(path));
  SBX_ASSIGN_OR_RETURN(auto disk, Get(id));
  // Split into the parent directories and the file name.
  std::vector<std::string> parts;
  size_t i = 0;
  while (i <= path.size()) {
    size_t j = path.find('/', i);
    if (j == std::string::npos) j = path.size();
    std::string part = path.substr(i, j - i);
    if (part == "..") return MakeError(Code::kInvalidArgument, "path may not hold \"..\"");
    if (!part.empty() && part != ".") parts.push_back(part);
    i = j + 1;
  }
  if (parts.empty()) return MakeError(Code::kInvalidArgument, "path names no file");
  std::string name = parts.back();
  parts.pop_back();
  UniqueFd dir(::open(MountPath(disk.id).c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!dir.valid()) return ErrnoError("open disk " + disk.id);
  for (const auto& part : parts) {
    int next = OpenInRoot(dir.get(), part, O_PATH | O_DIRECTORY);
    if (next < 0 && errno == ENOENT) {
      if (::mkdirat(dir.get(), part.c_str(), 0755) != 0 && errno != EEXIST)
        return OnFullDisk(ErrnoError("mkdir " + part));
      (void)::fchownat(dir.get(), part.c_str(), uid_base_, uid_base_, AT_SYMLINK_NOFOLLOW);
      next = OpenInRoot(dir.get(), part, O_PATH | O_DIRECTORY);
    }
    if (next < 0) return ErrnoError(part);
    dir.Reset(next);
  }
  // O_PATH fds cannot be written through: reopen the directory for the *at calls.
  UniqueFd d(OpenInRoot(dir.get(), ".", O_RDONLY | O_DIRECTORY));
  if (!d.valid()) return ErrnoError("open the parent of " + path);
  std::string tmp = ".sbx-upload-" + RandomHex(6);
  UniqueFd fd(::openat(d.get(), tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644));
  if (!fd.valid()) return OnFullDisk(ErrnoError("create " + path));
  auto drop = [&] { (void)::unlinkat(d.get(), tmp.c_str(), 0); };
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = ::write(fd.get(), data.data() + off, data.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      Error e = OnFullDisk(ErrnoError("write " + path));
      drop();
      return e;  // ENOSPC on a full disk
    }
    off += n;
  }
  if (::fchown(fd.get(), uid_base_, uid_base_) != 0 || ::fchmod(fd.get(), 0644) != 0) {
    Error e = ErrnoError("chown " + path);
    drop();
    return e;
  }
  // The rename replaces whatever has the name, a symlink included, without following it.
  if (::renameat(d.get(), tmp.c_str(), d.get(), name.c_str()) != 0) {
    Error e = OnFullDisk(ErrnoError("rename to " + path));
    drop();
    return e;
  }
  return OkStatus();
}

int64_t DiskStore::UsedBytes(const std::string& id) const {
  struct statvfs v;
  if (::statvfs(MountPath(id).c_str(), &v) != 0) return 0;
  return static_cast<int64_t>((v.f_blocks - v.f_bfree) * v.f_frsize);
}

}  // namespace sbx::disks
