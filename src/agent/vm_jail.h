// QEMU's view of the host, after the Firecracker jailer's idea: `sbx-agent --vm-launch`
// enters it as root, just before it drops to the VM's user. It is a mount namespace of
// the VM's own, whose root is an empty read-only tmpfs holding, each at its host path:
//   - the system's programs and libraries: /usr and the top-level links or folders into
//     it (/bin, /lib, /lib64, ...), and /etc/ld.so.cache, read-only;
//   - a /dev of null, zero, full, random, urandom and kvm (where the host has it);
//   - a /proc of its own that shows a process only to its own user (hidepid=invisible),
//     and /sys read-only;
//   - QEMU itself where it lives elsewhere, read-only;
//   - the files the VM boots from (kernel, initramfs, layer images), read-only;
//   - its own folder and disk, read-write.
// Nothing else of the host is there: no other VM's folder, disk or template, no data
// dir, no /etc, /home or /root. So a QEMU that its guest took over reads only its own.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/result.h"

namespace sbx::agent {

struct JailFiles {
  std::string dir;                       // the VM's folder: read-write, the jail's cwd
  std::vector<std::string> read_only;    // absolute paths of files QEMU reads
  std::vector<std::string> read_write;   // absolute paths of files QEMU writes
  std::string program;                   // QEMU's own path, where absolute (read-only, executable)
};

// Enters the jail (root only; the caller's mounts elsewhere are untouched). On success
// the process's root is the jail and its working directory `dir`.
Status EnterVmJail(const JailFiles& files);

// The ids of a QEMU that serves the sandbox's disks (9p, passthrough): a user namespace of
// its own, where ids 0 to count-1 are the sandboxes' (host `base` up, as a container
// sandbox's root and users are) and QEMU's own uid and gid are the id `count`. It keeps, in
// that namespace, what a file server needs over the sandboxes' files (chown, bypassing
// modes, an owner's rights, keeping set-gid) and nothing else; its namespace owns no other
// namespace, so those rights reach no other file, process or mount of the host's. QEMU's
// host uid stays the VM's own, so it can signal or trace no other sandbox's processes.
struct ShareIds {
  uid_t base = 0;
  uid_t count = 0;
};
// The parent's part, once the child has made its namespace: the maps, as root.
Status MapShareIds(pid_t child, const ShareIds& ids, uid_t uid, gid_t gid);
// The child's part, after the jail and before its exec: the namespace (the parent maps it
// between `unshare` and `mapped`), then QEMU's ids and capabilities there.
Status UnshareIds();
Status TakeShareIds(const ShareIds& ids);

// Becomes `uid` and `gid` (no supplementary groups), keeping of root's capabilities only
// those in `keep` (bits by number, below 32) as permitted and effective, none across exec.
Status BecomeKeeping(uid_t uid, gid_t gid, uint32_t keep);
// Sets the permitted and effective capabilities to `keep` (none inheritable).
Status SetCapabilities(uint32_t keep);

}  // namespace sbx::agent
