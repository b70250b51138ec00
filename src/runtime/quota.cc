#include "runtime/quota.h"

#include <fcntl.h>
#include <linux/btrfs.h>
#include <linux/btrfs_tree.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "base/fs.h"
#include "base/unique_fd.h"

namespace sbx::runtime {

namespace {

// The id of the subvolume whose root is `fd`.
Result<uint64_t> SubvolumeId(int fd, const std::string& dir) {
  struct btrfs_ioctl_ino_lookup_args args = {};
  args.treeid = 0;
  args.objectid = BTRFS_FIRST_FREE_OBJECTID;
  if (::ioctl(fd, BTRFS_IOC_INO_LOOKUP, &args) != 0) return ErrnoError("looking up the subvolume of " + dir);
  return static_cast<uint64_t>(args.treeid);
}

Status Limit(int fd, const std::string& dir, uint64_t bytes) {
  SBX_ASSIGN_OR_RETURN(uint64_t id, SubvolumeId(fd, dir));
  struct btrfs_ioctl_qgroup_limit_args args = {};
  args.qgroupid = id;  // level 0: the subvolume's own qgroup
  args.lim.flags = BTRFS_QGROUP_LIMIT_MAX_RFER;
  args.lim.max_rfer = bytes;
  if (::ioctl(fd, BTRFS_IOC_QGROUP_LIMIT, &args) != 0) return ErrnoError("limiting the disk of " + dir);
  return OkStatus();
}

std::pair<std::string, std::string> Split(const std::string& dir) {
  size_t slash = dir.rfind('/');
  return {slash == 0 ? "/" : dir.substr(0, slash), dir.substr(slash + 1)};
}

}  // namespace

Result<std::string> EnableQuotas(const std::string& mnt) {
  UniqueFd fd(::open(mnt.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd.valid()) return ErrnoError("open " + mnt);
  // BTRFS_FEATURE_INCOMPAT_SIMPLE_QUOTA: the file system's simple quotas are on.
  auto simple = [&] {
    struct btrfs_ioctl_feature_flags features = {};
    return ::ioctl(fd.get(), BTRFS_IOC_GET_FEATURES, &features) == 0 && (features.incompat_flags & (1ULL << 16));
  };
  if (simple()) return std::string("simple");
  struct btrfs_ioctl_quota_ctl_args args = {};
  args.cmd = 4;  // BTRFS_QUOTA_CTL_ENABLE_SIMPLE_QUOTA (Linux 6.7+)
  // On a store whose full qgroups are on already, this changes nothing: they stay.
  if (::ioctl(fd.get(), BTRFS_IOC_QUOTA_CTL, &args) == 0) return std::string(simple() ? "simple" : "full");
  args = {};
  args.cmd = BTRFS_QUOTA_CTL_ENABLE;
  if (::ioctl(fd.get(), BTRFS_IOC_QUOTA_CTL, &args) != 0) return ErrnoError("turning quotas on in " + mnt);
  return std::string("full");
}

Status MakeLimitedDir(const std::string& dir, uint64_t bytes) {
  auto [parent, name] = Split(dir);
  if (name.empty() || name.size() >= BTRFS_PATH_NAME_MAX) return MakeError(Code::kInvalidArgument, "bad folder name " + dir);
  UniqueFd pfd(::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!pfd.valid()) return ErrnoError("open " + parent);
  struct btrfs_ioctl_vol_args args = {};
  std::strncpy(args.name, name.c_str(), BTRFS_PATH_NAME_MAX);
  if (::ioctl(pfd.get(), BTRFS_IOC_SUBVOL_CREATE, &args) != 0) return ErrnoError("creating the subvolume " + dir);
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd.valid()) return ErrnoError("open " + dir);
  ::fchmod(fd.get(), 0711);
  if (bytes == 0) return OkStatus();
  return Limit(fd.get(), dir, bytes);
}

Status SetDirLimit(const std::string& dir, uint64_t bytes) {
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd.valid()) return ErrnoError("open " + dir);
  return Limit(fd.get(), dir, bytes);
}

Status SnapshotDir(const std::string& dir, const std::string& dst) {
  auto [parent, name] = Split(dst);
  if (name.empty() || name.size() >= BTRFS_SUBVOL_NAME_MAX) return MakeError(Code::kInvalidArgument, "bad snapshot name " + dst);
  UniqueFd src(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW));
  if (!src.valid()) return ErrnoError("open " + dir);
  UniqueFd pfd(::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!pfd.valid()) return ErrnoError("open " + parent);
  struct btrfs_ioctl_vol_args_v2 args = {};
  args.fd = src.get();
  args.flags = BTRFS_SUBVOL_RDONLY;
  std::strncpy(args.name, name.c_str(), BTRFS_SUBVOL_NAME_MAX);
  if (::ioctl(pfd.get(), BTRFS_IOC_SNAP_CREATE_V2, &args) != 0) return ErrnoError("snapshot of " + dir);
  return OkStatus();
}

Status RemoveLimitedDir(const std::string& dir) {
  uint64_t id = 0;
  {
    UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW));
    if (!fd.valid()) return errno == ENOENT ? OkStatus() : ErrnoError("open " + dir);
    auto sid = SubvolumeId(fd.get(), dir);
    if (sid.ok()) id = *sid;
    // A read-only snapshot is made writable first, or nothing in it could be removed.
    uint64_t flags = 0;
    if (::ioctl(fd.get(), BTRFS_IOC_SUBVOL_GETFLAGS, &flags) == 0 && (flags & BTRFS_SUBVOL_RDONLY)) {
      flags &= ~static_cast<uint64_t>(BTRFS_SUBVOL_RDONLY);
      if (::ioctl(fd.get(), BTRFS_IOC_SUBVOL_SETFLAGS, &flags) != 0) return ErrnoError("making " + dir + " writable");
    }
  }
  // An empty subvolume's root goes with rmdir, like any folder.
  SBX_RETURN_IF_ERROR(fs::RemoveTree(dir));
  if (id > BTRFS_FS_TREE_OBJECTID) {
    // Its qgroup would linger (empty) otherwise; the cleaner may still hold it: best effort.
    auto [parent, name] = Split(dir);
    UniqueFd pfd(::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    struct btrfs_ioctl_qgroup_create_args args = {};
    args.create = 0;
    args.qgroupid = id;
    if (pfd.valid()) (void)::ioctl(pfd.get(), BTRFS_IOC_QGROUP_CREATE, &args);
  }
  return OkStatus();
}

}  // namespace sbx::runtime
