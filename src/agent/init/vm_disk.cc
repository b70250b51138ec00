#include "agent/init/vm_disk.h"

#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include "base/fs.h"
#include "base/unique_fd.h"

#ifndef EXT4_IOC_RESIZE_FS
#define EXT4_IOC_RESIZE_FS _IOW('f', 16, uint64_t)
#endif

namespace sbx::agent {
namespace {

// The size in bytes of the block device `dev`.
Result<uint64_t> DeviceBytes(dev_t dev) {
  const std::string path = "/sys/dev/block/" + std::to_string(major(dev)) + ":" + std::to_string(minor(dev)) + "/size";
  SBX_ASSIGN_OR_RETURN(std::string sectors, fs::ReadFile(path, 64));
  return std::strtoull(sectors.c_str(), nullptr, 10) * 512;  // always in 512-byte sectors
}

Result<uint64_t> DeviceBytes(int fs_fd) {
  struct stat st;
  if (::fstat(fs_fd, &st) != 0) return ErrnoError("stat the disk's file system");
  return DeviceBytes(st.st_dev);
}

uint32_t Le32(const unsigned char* p) {
  return p[0] | (p[1] << 8) | (p[2] << 16) | (static_cast<uint32_t>(p[3]) << 24);
}

}  // namespace

Result<bool> FileSystemSmaller(const std::string& device) {
  UniqueFd fd(::open(device.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return ErrnoError("open " + device);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0 || !S_ISBLK(st.st_mode)) return ErrnoError("stat " + device);
  SBX_ASSIGN_OR_RETURN(uint64_t bytes, DeviceBytes(st.st_rdev));
  unsigned char sb[1024];  // the superblock, at byte 1024
  if (::pread(fd.get(), sb, sizeof sb, 1024) != static_cast<ssize_t>(sizeof sb)) return ErrnoError("read " + device);
  if (sb[0x38] != 0x53 || sb[0x39] != 0xEF) return MakeError(Code::kInternal, device + " holds no ext4");
  const uint32_t log_block = Le32(sb + 0x18);
  if (log_block > 6) return MakeError(Code::kInternal, device + "'s file system has a bad block size");
  uint64_t blocks = Le32(sb + 0x04);
  if (Le32(sb + 0x60) & 0x80) blocks |= static_cast<uint64_t>(Le32(sb + 0x150)) << 32;  // INCOMPAT_64BIT
  return blocks < bytes / (1024ull << log_block);
}

Status GrowToDevice(int fs_fd, uint64_t at_least, int timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  SBX_ASSIGN_OR_RETURN(uint64_t device, DeviceBytes(fs_fd));
  while (device < at_least) {
    if (std::chrono::steady_clock::now() > deadline)
      return MakeError(Code::kDeadlineExceeded, "the disk is " + std::to_string(device >> 20) + " MiB, not the " +
                                                    std::to_string(at_least >> 20) + " MiB it was grown to");
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    SBX_ASSIGN_OR_RETURN(device, DeviceBytes(fs_fd));
  }
  struct statvfs sv;
  if (::fstatvfs(fs_fd, &sv) != 0 || sv.f_frsize == 0) return ErrnoError("statvfs the disk's file system");
  uint64_t blocks = device / sv.f_frsize;
  if (::ioctl(fs_fd, EXT4_IOC_RESIZE_FS, &blocks) != 0) return ErrnoError("grow the disk's file system");
  return OkStatus();
}

}  // namespace sbx::agent
