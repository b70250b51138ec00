#include "base/proc.h"

#include <dirent.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "base/fs.h"

namespace sbx::proc {

uint64_t StartTime(pid_t pid) {
  auto stat = fs::ReadFile("/proc/" + std::to_string(pid) + "/stat", 8192);
  if (!stat.ok()) return 0;
  // Field 22 (starttime); the comm field (2) may hold spaces and parens, so skip to
  // the last ')'.
  const std::string& s = *stat;
  size_t p = s.rfind(')');
  if (p == std::string::npos) return 0;
  const char* c = s.c_str() + p + 2;
  for (int field = 3; field < 22 && *c; ++field) {
    c = std::strchr(c, ' ');
    if (!c) return 0;
    ++c;
  }
  return std::strtoull(c, nullptr, 10);
}

Result<UniqueFd> PidfdOpen(pid_t pid) {
  int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (fd < 0) return ErrnoError("pidfd_open " + std::to_string(pid));
  return UniqueFd(fd);
}

Status PidfdSignal(int pidfd, int sig) {
  if (::syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0) != 0 && errno != ESRCH)
    return ErrnoError("pidfd_send_signal");
  return OkStatus();
}

bool PidfdExited(int pidfd) { return PidfdWait(pidfd, 0); }

bool PidfdWait(int pidfd, int timeout_ms) {
  struct pollfd p = {pidfd, POLLIN, 0};
  int rc;
  do {
    rc = ::poll(&p, 1, timeout_ms);
  } while (rc < 0 && errno == EINTR);
  return rc > 0;
}

uint64_t SelfRssBytes() {
  auto s = fs::ReadFile("/proc/self/statm", 4096);
  if (!s.ok()) return 0;
  unsigned long size = 0, rss = 0;
  if (std::sscanf(s->c_str(), "%lu %lu", &size, &rss) != 2) return 0;
  return static_cast<uint64_t>(rss) * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
}

int SelfFdCount() {
  auto l = fs::ListDir("/proc/self/fd");
  return l.ok() ? static_cast<int>(l->size()) - 1 : -1;  // minus the one opendir holds
}

}  // namespace sbx::proc
