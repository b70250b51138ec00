// What a microVM boots from, made on the host: the initramfs (sbx-agent as /init and the
// guest kernel's modules), one read-only ext4 image per layer (built once, cached), and
// each sandbox's own disk (a sparse ext4 image holding its overlay's upper folder). The
// layers stay folders, shared with the other walls: an image is a cache of one.
#pragma once

#include <sys/types.h>

#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "base/result.h"
#include "runtime/runtime.h"

namespace sbx::runtime::microvm {

// The guest kernel's folder (scripts/vm/guest.sh): vmlinux, modules/, modules.list.
struct GuestKernel {
  std::string dir;
  std::string vmlinux() const { return dir + "/vmlinux"; }
  // Checks the folder has what a boot needs.
  Status Check() const;
  // Whether it has what a guest with disks loads (a folder made before disks had none).
  bool HasDiskModules() const { return HasSection("disks", "9p"); }
  // Whether it has the vsock modules (the agent's channel on a host with vhost-vsock).
  bool HasVsockModules() const { return HasSection("vsock", "vmw_vsock_virtio_transport"); }
  // Whether modules.list has the line "@section" and modules/ the section's last `module`.
  bool HasSection(const std::string& section, const std::string& module) const;
};

// Writes the initramfs (newc cpio, uncompressed: the kernel reads it at memory speed) to
// `out`: `agent` as /init, the kernel's modules and their order, a /dev/console node.
Status WriteInitramfs(const GuestKernel& kernel, const std::string& agent, const std::string& out);

// A layer captured from a microVM is its own disk's image (whole: its file system frozen
// for the copy), in this file of the layer's folder; the layer is the disk's /upper. Only
// microVMs read such a layer (in their guest kernel: the host never mounts a disk a guest
// wrote); the other walls refuse it.
bool IsVmDiskLayer(const std::string& layer);

// Read-only ext4 images of layers, in `cache_dir`, named by a hash of the layer's path
// (layers never change once made). The layers' files are owned by the sandbox-root range
// on the host (uid_base up); the image holds them as the guest sees them (from 0), read
// through an id-mapped mount. Any thread; two callers wanting the same image share one build.
class LayerImages {
 public:
  LayerImages(std::string cache_dir, uid_t uid_base) : dir_(std::move(cache_dir)), uid_base_(uid_base) {}
  // Makes the folder (readable through by every VM's user).
  Status Open();
  // The disk that holds `layer` and the folder on it that is the layer (a VM-made
  // layer's own image, its "upper"; else the layer folder's cached image, its root).
  struct Disk {
    std::string image, root;
  };
  Result<Disk> ImageOf(const std::string& layer);
  // Removes the images of a layer that is going, and of the layers inside its folder (no
  // error if there is none).
  void Forget(const std::string& layer);
  std::string PathOf(const std::string& layer) const;

 private:
  // The note beside an image that names its layer.
  static std::string LayerNoteOf(const std::string& image);
  Status Build(const std::string& layer, const std::string& image);
  std::string dir_;
  uid_t uid_base_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, bool> building_;  // image paths being built now
};

// A sandbox's own disk: a sparse ext4 image of `bytes` at `path` (its root owned by root;
// the guest makes the overlay's folders on it at its first boot).
Status MakeOwnDisk(const std::string& path, uint64_t bytes);
// Whether the ext4 image at `path` needs no journal replay (its file system was frozen or
// unmounted when its VM ended). Reads the superblock only.
bool DiskIsClean(const std::string& path);
// Copies a disk image: a reflink where the file system has them (the btrfs store), else
// its data extents only (the copy stays sparse). Returns the bytes the copy holds.
Result<uint64_t> CopyDisk(const std::string& from, const std::string& to);

}  // namespace sbx::runtime::microvm
