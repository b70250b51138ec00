// Images: read-only root filesystems that sandboxes start from, stored under
// <data>/images/<name>-<nonce>/rootfs with ownership shifted into the sandboxes' uid range.
// Any thread; imports of the same name are serialized.
#pragma once

#include <sys/types.h>

#include <mutex>
#include <string>
#include <vector>

#include "base/result.h"
#include "storage/store.h"

namespace sbx::layers {

class ImageStore {
 public:
  ImageStore(std::string data_dir, storage::Store* store, uid_t uid_base);

  // Extracts a tar (a rootfs tarball or `docker export` output) as image `name`,
  // replacing an older one (sandboxes already using it keep their copy).
  Result<storage::ImageRecord> ImportTar(const std::string& name, const std::string& tar_path);
  // Builds the tiny `busybox` image from the host's static busybox.
  Result<storage::ImageRecord> BuildBusybox(const std::string& name = "busybox");
  Result<storage::ImageRecord> Get(const std::string& name);
  Result<std::vector<storage::ImageRecord>> List();
  // Removes image directories that no image record and no listed user refers to.
  void CollectGarbage(const std::vector<std::string>& in_use);

 private:
  Result<storage::ImageRecord> Commit(const std::string& name, const std::string& staging);
  std::string data_dir_;
  storage::Store* store_;
  uid_t uid_base_;
  std::mutex mu_;
};

}  // namespace sbx::layers
