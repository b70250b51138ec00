#include "runtime/container/host_setup.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <vector>

#include "base/fs.h"
#include "base/log.h"
#include "base/reaper.h"
#include "base/unique_fd.h"
#include "runtime/cgroup.h"
#include "runtime/quota.h"

namespace sbx::runtime {
namespace {

// --store-mb: the sandboxes' folders, the snapshot layers and the checkpoints of
// hibernated sandboxes live on a btrfs file system of that size, in a preallocated image
// under the data dir (so a full store never becomes a full host disk), loop-mounted with
// quotas on: each sandbox's folder is a subvolume held to its disk_mb, and copies into
// layers share blocks (reflink). The image and mounts are reused across restarts.
Status SetUpStore(const std::string& data_dir, int64_t store_mb) {
  const std::string img = data_dir + "/store.img", mnt = data_dir + "/store";
  auto run = [](std::vector<std::string> argv) -> Status {
    auto r = Reaper::Get().Run(argv);
    if (!r.ok()) return r.error();
    if (r->exit_code != 0) return MakeError(Code::kInternal, argv[0] + ": " + r->output);
    return OkStatus();
  };
  if (!fs::IsMountPoint(mnt)) {
    if (::access(img.c_str(), F_OK) != 0) {
      for (const char* d : {"sandboxes", "layers"}) {
        auto entries = fs::ListDir(data_dir + "/" + d);
        if (entries.ok() && !entries->empty())
          return MakeError(Code::kFailedPrecondition, std::string("--store-mb needs a data dir without sandboxes or layers yet (") +
                                                          data_dir + "/" + d + " is not empty)");
      }
      UniqueFd fd(::open(img.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600));
      if (!fd.valid()) return ErrnoError("create " + img);
      if (::fallocate(fd.get(), 0, 0, store_mb << 20) != 0) {
        Error e = ErrnoError("allocate " + std::to_string(store_mb) + " MB for " + img);
        ::unlink(img.c_str());
        return e;
      }
      fd.Reset();
      if (auto st = run({"mkfs.btrfs", "-q", img}); !st.ok()) {
        ::unlink(img.c_str());
        return st.error();
      }
    }
    SBX_RETURN_IF_ERROR(fs::MkdirAll(mnt, 0711));
    SBX_RETURN_IF_ERROR(run({"mount", "-o", "loop,noatime,nosuid,nodev", img, mnt}));
    SBX_ASSIGN_OR_RETURN(std::string kind, EnableQuotas(mnt));
    SBX_LOG(kInfo) << "store " << img << " mounted at " << mnt << " (" << kind << " quotas)";
  }
  ::chmod(mnt.c_str(), 0711);
  for (const char* d : {"sandboxes", "layers", "hibernated"}) {
    std::string inside = mnt + "/" + d, outside = data_dir + "/" + d;
    if (std::string(d) == "hibernated" && !fs::IsMountPoint(outside)) {
      // Checkpoints that an earlier sbxd wrote on the host's disk stay there.
      auto there = fs::ListDir(outside);
      if (there.ok() && !there->empty()) {
        SBX_LOG(kWarn) << outside << " holds checkpoints from before the store: they stay on the host's disk";
        continue;
      }
    }
    SBX_RETURN_IF_ERROR(fs::MkdirAll(inside, 0711));
    ::chmod(inside.c_str(), 0711);
    SBX_RETURN_IF_ERROR(fs::MkdirAll(outside, 0711));
    if (!fs::IsMountPoint(outside)) SBX_RETURN_IF_ERROR(run({"mount", "--bind", inside, outside}));
  }
  return OkStatus();
}

}  // namespace

Status SetUpContainerHost(const std::string& data_dir, int64_t store_mb) {
  if (store_mb > 0)
    if (auto st = SetUpStore(data_dir, store_mb); !st.ok()) return st.error().Wrap("setting up the store");
  if (auto st = FavorDynamicCgroups(data_dir + "/cgroup-favor"); !st.ok())
    SBX_LOG(kWarn) << st.error().message << ": each sandbox start waits for an RCU grace period";
  return OkStatus();
}

}  // namespace sbx::runtime
