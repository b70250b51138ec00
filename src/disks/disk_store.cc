#include "disks/disk_store.h"

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/statvfs.h>
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

bool DiskStore::Mounted(const std::string& id) const {
  std::ifstream in("/proc/self/mountinfo");
  std::string line, want = " " + MountPath(id) + " ";
  while (std::getline(in, line))
    if (line.find(want) != std::string::npos) return true;
  return false;
}

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
  auto fail = [&](Error e) -> Result<storage::DiskRecord> {
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
  if (mk->exit_code != 0) return fail(MakeError(Code::kInternal, "mkfs.ext4: " + mk->output));
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

int64_t DiskStore::UsedBytes(const std::string& id) const {
  struct statvfs v;
  if (::statvfs(MountPath(id).c_str(), &v) != 0) return 0;
  return static_cast<int64_t>((v.f_blocks - v.f_bfree) * v.f_frsize);
}

}  // namespace sbx::disks
