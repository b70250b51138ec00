#include "base/proc.h"

#include <dirent.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "base/fs.h"

namespace sbx::proc {

namespace {
// Numeric fields of /proc/PID/stat from `first` to `last` (1-based); empty if gone. The
// comm field (2) may hold spaces and parens, so parsing starts after the last ')'.
std::vector<uint64_t> StatFields(pid_t pid, int first, int last) {
  auto stat = fs::ReadFile("/proc/" + std::to_string(pid) + "/stat", 8192);
  if (!stat.ok()) return {};
  const std::string& s = *stat;
  size_t p = s.rfind(')');
  if (p == std::string::npos || p + 2 > s.size()) return {};
  const char* c = s.c_str() + p + 2;
  std::vector<uint64_t> out;
  for (int field = 3; field <= last && *c; ++field) {
    if (field >= first) out.push_back(std::strtoull(c, nullptr, 10));
    c = std::strchr(c, ' ');
    if (!c) break;
    ++c;
  }
  if (static_cast<int>(out.size()) != last - first + 1) return {};
  return out;
}
}  // namespace

uint64_t StartTime(pid_t pid) {
  auto f = StatFields(pid, 22, 22);
  return f.empty() ? 0 : f[0];
}

uint64_t CpuTimeNs(pid_t pid) {
  auto f = StatFields(pid, 14, 17);  // utime, stime, cutime, cstime
  if (f.empty()) return 0;
  static const long hz = ::sysconf(_SC_CLK_TCK);
  return (f[0] + f[1] + f[2] + f[3]) * (1000000000ULL / static_cast<uint64_t>(hz > 0 ? hz : 100));
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

uint64_t SelfPeakRssBytes() {
  auto s = fs::ReadFile("/proc/self/status", 1 << 16);
  if (!s.ok()) return 0;
  auto at = s->find("VmHWM:");
  return at == std::string::npos ? 0 : std::strtoull(s->c_str() + at + 6, nullptr, 10) * 1024;
}

int SelfFdCount() {
  auto l = fs::ListDir("/proc/self/fd");
  return l.ok() ? static_cast<int>(l->size()) - 1 : -1;  // minus the one opendir holds
}

ssize_t SendWithFd(int sock, const std::string& data, int fd) {
  struct iovec iov = {const_cast<char*>(data.data()), data.size()};
  struct msghdr m = {};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  if (fd >= 0) {
    m.msg_control = control;
    m.msg_controllen = sizeof control;
    struct cmsghdr* c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
  }
  return ::sendmsg(sock, &m, MSG_NOSIGNAL);
}

}  // namespace sbx::proc
