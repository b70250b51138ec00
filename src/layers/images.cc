#include "layers/images.h"

#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <set>
#include <sstream>

#include "base/fs.h"
#include "base/ids.h"
#include "base/log.h"
#include "base/reaper.h"

namespace sbx::layers {
namespace {

// Device nodes and sockets have no place in an image: sandboxes get their own /dev.
int DropSpecial(const char* p, const struct stat* st, int, struct FTW*) {
  if (S_ISCHR(st->st_mode) || S_ISBLK(st->st_mode) || S_ISSOCK(st->st_mode)) ::unlink(p);
  return 0;
}

}  // namespace

ImageStore::ImageStore(std::string data_dir, storage::Store* store, uid_t uid_base)
    : data_dir_(std::move(data_dir)), store_(store), uid_base_(uid_base) {}

Result<storage::ImageRecord> ImageStore::Commit(const std::string& name, const std::string& dir) {
  std::string rootfs = dir + "/rootfs";
  ::nftw(rootfs.c_str(), DropSpecial, 64, FTW_PHYS | FTW_MOUNT);
  for (const char* d : {"proc", "sys", "dev", "tmp"}) {
    std::string p = rootfs + "/" + d;
    struct stat st;
    if (::lstat(p.c_str(), &st) != 0) ::mkdir(p.c_str(), d[0] == 't' ? 01777 : 0755);
  }
  SBX_RETURN_IF_ERROR(fs::ShiftOwnership(rootfs, uid_base_));
  // The image root itself must be traversable by the sandbox's root.
  if (::chmod(rootfs.c_str(), 0755) != 0) return ErrnoError("chmod " + rootfs);
  storage::ImageRecord rec{name, rootfs, static_cast<int64_t>(fs::TreeSize(rootfs)), NowUnixMs()};
  SBX_RETURN_IF_ERROR(store_->PutImage(rec));
  return rec;
}

Result<storage::ImageRecord> ImageStore::ImportTar(const std::string& name, const std::string& tar) {
  if (!ValidName(name)) return MakeError(Code::kInvalidArgument, "invalid image name \"" + name + "\"");
  std::lock_guard<std::mutex> lock(mu_);
  std::string dir = data_dir_ + "/images/" + name + "-" + RandomHex(4);
  SBX_RETURN_IF_ERROR(fs::MkdirAll(dir + "/rootfs", 0755));
  auto r = Reaper::Get().Run({"tar", "--numeric-owner", "--same-permissions", "--no-overwrite-dir",
                              "-x", "-f", tar, "-C", dir + "/rootfs"});
  if (!r.ok() || r->exit_code != 0) {
    (void)fs::RemoveTree(dir);
    std::string why = r.ok() ? r->output : r.error().message;
    if (why.size() > 2000) why = why.substr(0, 2000) + "...";
    return MakeError(Code::kInvalidArgument, "the image is not a readable tar archive: " + why);
  }
  auto rec = Commit(name, dir);
  if (!rec.ok()) (void)fs::RemoveTree(dir);
  return rec;
}

Result<storage::ImageRecord> ImageStore::BuildBusybox(const std::string& name) {
  const std::string host_busybox = "/bin/busybox";
  if (!fs::Exists(host_busybox))
    return MakeError(Code::kFailedPrecondition, "/bin/busybox is missing (install busybox-static)");
  std::lock_guard<std::mutex> lock(mu_);
  std::string dir = data_dir_ + "/images/" + name + "-" + RandomHex(4);
  std::string root = dir + "/rootfs";
  for (const char* d : {"bin", "sbin", "usr/bin", "usr/sbin", "etc", "root", "tmp", "proc", "sys", "dev", "home", "var", "run"})
    SBX_RETURN_IF_ERROR(fs::MkdirAll(root + "/" + d, 0755));
  ::chmod((root + "/tmp").c_str(), 01777);
  auto bin = fs::ReadFile(host_busybox, 16 << 20);
  if (!bin.ok()) return bin.error();
  SBX_RETURN_IF_ERROR(fs::WriteFile(root + "/bin/busybox", *bin, true, 0755));
  auto list = Reaper::Get().Run({host_busybox, "--list-full"});
  if (!list.ok()) return list.error();
  std::stringstream ss(list->output);
  std::string applet;
  while (std::getline(ss, applet)) {
    if (applet.empty() || applet == "bin/busybox" || applet.find("..") != std::string::npos) continue;
    std::string link = root + "/" + applet;
    if (fs::Exists(link)) continue;
    std::string target = "/bin/busybox";
    if (::symlink(target.c_str(), link.c_str()) != 0 && errno != EEXIST)
      return ErrnoError("symlink " + applet);
  }
  SBX_RETURN_IF_ERROR(fs::WriteFile(root + "/etc/passwd",
                                    "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n"));
  SBX_RETURN_IF_ERROR(fs::WriteFile(root + "/etc/group", "root:x:0:\nnogroup:x:65534:\n"));
  SBX_RETURN_IF_ERROR(fs::WriteFile(root + "/etc/hosts", "127.0.0.1 localhost\n::1 localhost\n"));
  auto rec = Commit(name, dir);
  if (!rec.ok()) (void)fs::RemoveTree(dir);
  return rec;
}

Result<storage::ImageRecord> ImageStore::Get(const std::string& name) {
  SBX_ASSIGN_OR_RETURN(auto rec, store_->GetImage(name));
  if (!rec) return MakeError(Code::kNotFound, "image \"" + name + "\" not found");
  return *rec;
}

Result<std::vector<storage::ImageRecord>> ImageStore::List() { return store_->ListImages(); }

void ImageStore::CollectGarbage(const std::vector<std::string>& in_use) {
  std::set<std::string> keep(in_use.begin(), in_use.end());
  auto imgs = store_->ListImages();
  if (!imgs.ok()) return;
  for (const auto& i : *imgs) keep.insert(i.path);
  auto dirs = fs::ListDir(data_dir_ + "/images");
  if (!dirs.ok()) return;
  for (const auto& d : *dirs) {
    std::string rootfs = data_dir_ + "/images/" + d + "/rootfs";
    if (keep.count(rootfs)) continue;
    SBX_LOG(kInfo) << "removing unused image directory " << d;
    (void)fs::RemoveTree(data_dir_ + "/images/" + d);
  }
}

}  // namespace sbx::layers
