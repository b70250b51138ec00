// A microVM saved to files and loaded back. The guest's RAM is a memfd QEMU maps shared
// (--vm-launch --ram): a save stops the VM, has QEMU write its devices' state (its
// migration stream without the shared RAM, tens of KB) to a descriptor sbxd hands it
// over its monitor, and copies the RAM's data (only the pages the guest touched) to a
// sparse file. A restore fills a new memfd from that file and starts QEMU with
// `-incoming` on the stream (microvm/qemu.h). The saved VM's shape goes beside: a restore
// must have the same devices. For hibernate now; the same files are what a memory
// template keeps. Any thread, one call per VM at a time.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <utility>

#include "agent/protocol.h"
#include "agent/vm_config.h"
#include "base/result.h"

namespace sbx::runtime::microvm {

// The names in a saved VM's folder: the stream, then its shape (written last: a folder
// with it is whole).
constexpr const char* kSavedMemory = "vm.mem";  // the devices' state
constexpr const char* kSavedRam = "vm.ram";
constexpr const char* kSavedShape = "vm.json";

struct SavedShape {
  std::string accel;  // a TCG guest's state does not load under KVM, nor the other way
  int cpus = 1;
  uint64_t memory_mb = 0;
  int layers = 0;     // read-only disks beside the VM's own
  bool tap = false;   // whether it had a network device
  bool vsock = false; // whether its agent's channel was a vsock device (else virtio-serial)
  uint64_t bytes = 0; // the RAM's data and the stream, on disk
};

// A running VM as a save finds it: QEMU's monitor in `dir`, served by `uid`, and its
// process `pid` with the guest's RAM on its descriptor agent::kRamFd, the memfd
// (device, inode) that --vm-launch made.
struct RunningVm {
  std::string dir;
  uid_t uid = 0;
  pid_t pid = 0;
  uint64_t ram_dev = 0, ram_ino = 0;
};

// The (device, inode) of the RAM of QEMU `pid`, to know it again at a save.
Result<std::pair<uint64_t, uint64_t>> RamIdentity(pid_t pid);

// Stops the VM, and saves it into
// the folder `out` (which must exist, empty). On success QEMU is left stopped, its disks
// flushed and released: end it. On failure the VM runs on, and `out` may hold a partial
// stream.
// Returns the bytes saved (the RAM's data and the stream).
Result<uint64_t> SaveVm(const RunningVm& vm, const SavedShape& shape, const std::string& out, int timeout_ms);

// The shape of the saved VM in `dir` (an error if the folder is not whole).
Result<SavedShape> ReadSavedShape(const std::string& dir);

// Waits until the QEMU in `vm_dir` (started with `-incoming`) has loaded its saved VM,
// then lets it run.
Status RunLoadedVm(const std::string& vm_dir, uid_t uid, int timeout_ms);

// A loaded VM, as RenewLoadedVm finds it: QEMU's folder `dir` served by `uid`, its agent.
struct LoadedVm {
  std::string dir;
  uid_t uid = 0;
  const agent::Dialer& agent;
  const agent::VmConfig* copy = nullptr;  // another sandbox's VM (a template's copy): its own config
  uint64_t grow_to = 0;                   // its disk's size, where larger than the saved VM's
};
// After a load: sets the guest's clock to the host's and mixes fresh host entropy into its
// kernel's pool (the saved VM's clock stood still and its random state is the saved one's);
// for a copy also its hostname and network addresses; thaws its disk (frozen at the save),
// and grows it (GrowLoadedDisk).
Status RenewLoadedVm(const LoadedVm& vm, int timeout_ms);

// Whether the disk file `path` is smaller than `bytes`; with `now`, it is made that large
// (a boot's guest then grows its file system to it: agent/init/vm_disk.h).
Result<bool> GrowDiskFile(const std::string& path, uint64_t bytes, bool now);

// A memory template's copy starts on a copy of the template's disk `from` (its files are
// there), as `to`; its first start grows it to the copy's `disk_bytes` (an ext4 cannot
// shrink: a smaller disk_bytes is refused, 409, for sandbox `id`).
Status CopyTemplateDisk(const std::string& from, const std::string& to, uint64_t disk_bytes, const std::string& id);

// Why a copy of a memory template whose saved VM has `shape` cannot load it, as a sandbox
// of `cpus` vCPUs and `memory_mb` MiB, with or without a network `link` and `disks` ("":
// it can). A copy that cannot boots on its template's files instead.
std::string WhyNotLoad(const Result<SavedShape>& shape, int cpus, uint64_t memory_mb, bool link, bool disks);

// A loaded VM whose own disk file the guest knows smaller than `bytes` (a template's copy
// with a larger disk_mb): QEMU grows the disk (`block_resize`, which tells the guest's
// driver), then the agent grows its file system (agent/init/vm_disk.h).
Status GrowLoadedDisk(const std::string& vm_dir, uid_t uid, const agent::Dialer& agent, uint64_t bytes,
                      int timeout_ms);

// Lets a VM that a save left stopped run again (a save cut short by sbxd's end); a
// running one is left as it is.
Status ContinueVm(const std::string& vm_dir, uid_t uid, int timeout_ms);

}  // namespace sbx::runtime::microvm
