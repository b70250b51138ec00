// Process helpers: start times (to tell a pid from its reuse), pidfds. Any thread.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "base/result.h"
#include "base/unique_fd.h"

namespace sbx::proc {

// The start time (clock ticks since boot) from /proc/PID/stat, or 0 if gone.
uint64_t StartTime(pid_t pid);
Result<UniqueFd> PidfdOpen(pid_t pid);
Status PidfdSignal(int pidfd, int sig);
// True if the pidfd's process has exited (poll with zero timeout).
bool PidfdExited(int pidfd);
// Waits up to timeout_ms for the pidfd to become readable; true if it exited.
bool PidfdWait(int pidfd, int timeout_ms);
// utime + stime of a process and of the children it has waited for, in nanoseconds.
uint64_t CpuTimeNs(pid_t pid);
// Resident set size of this process in bytes, and its open fd count.
uint64_t SelfRssBytes();
// The most resident memory this process has had (VmHWM).
uint64_t SelfPeakRssBytes();
int SelfFdCount();
// One sendmsg(2) of `data` on the unix socket `sock`, with the descriptor `fd` along
// (SCM_RIGHTS) where it is >= 0; MSG_NOSIGNAL. Returns sendmsg's result (errno set).
ssize_t SendWithFd(int sock, const std::string& data, int fd);

}  // namespace sbx::proc
