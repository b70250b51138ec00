// DiskStore: persistent disks. Each is a sparse ext4 image of its own size (so a full disk
// is ENOSPC inside, never a full host), loop-mounted nosuid,nodev on the host at
// <data>/disks/<id>/mnt and bind-mounted into the sandboxes that use it. Any thread.
#pragma once

#include <sys/types.h>

#include <mutex>
#include <string>
#include <vector>

#include "base/result.h"
#include "storage/store.h"

namespace sbx::disks {

class DiskStore {
 public:
  DiskStore(std::string data_dir, storage::Store* store, uid_t uid_base);

  Result<storage::DiskRecord> Create(const std::string& name, int64_t size_mb);
  Result<storage::DiskRecord> Get(const std::string& id_or_name);
  // The id of the disk that `ref` names: an id, then a name, then a unique prefix of an id
  // (with or without its "dk-"). kNotFound, or kInvalidArgument ("ambiguous ...").
  Result<std::string> Resolve(const std::string& ref);
  Result<std::vector<storage::DiskRecord>> List();
  // Unmounts and removes a disk (the caller checks that nothing uses it).
  Status Delete(const std::string& id);
  // Mounts every disk that is not mounted (at start-up).
  Status MountAll();
  // Where the disk's filesystem is mounted on the host.
  std::string MountPath(const std::string& id) const { return data_dir_ + "/disks/" + id + "/mnt"; }
  // A file of the disk, `path` resolved inside the disk (symlinks too; no way out).
  Result<std::string> ReadFile(const std::string& id, const std::string& path, size_t max_bytes);
  // Writes a file (whole, atomically: a temporary then a rename), creating missing parent
  // directories. It belongs to the sandboxes' root, without set-id bits.
  Status WriteFile(const std::string& id, const std::string& path, const std::string& data);
  // Bytes used on the disk's filesystem.
  int64_t UsedBytes(const std::string& id) const;

 private:
  Status Mount(const std::string& id);
  bool Mounted(const std::string& id) const;
  std::string data_dir_;
  storage::Store* store_;
  uid_t uid_base_;
  std::mutex mu_;
};

}  // namespace sbx::disks
