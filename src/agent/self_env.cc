#include "agent/self_env.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/frame_io.h"
#include "base/unique_fd.h"

namespace sbx::agent {
namespace {

bool g_enabled = false;

// What the file holds now ("" if it is missing, not a regular file, or larger than any
// content sbxd sends).
std::string Current() {
  UniqueFd fd(::open(kSelfEnvPath, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  struct stat st;
  if (!fd.valid() || ::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > 4096) return "";
  std::string out(static_cast<size_t>(st.st_size), '\0');
  ssize_t n = ::read(fd.get(), out.data(), out.size());
  if (n != st.st_size) return "";
  return out;
}

}  // namespace

void EnableSelfEnv(bool in_sandbox) { g_enabled = in_sandbox; }

Status SyncSelfEnv(const std::string& content) {
  if (!g_enabled || content.empty() || Current() == content) return OkStatus();
  const std::string tmp = std::string(kSelfEnvPath) + ".new." + std::to_string(::getpid());
  ::unlink(tmp.c_str());
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
  if (!fd.valid()) return ErrnoError("create " + tmp);
  if (::fchmod(fd.get(), 0644) != 0 || !WriteAllBlocking(fd.get(), content)) {
    Error err = ErrnoError("write " + tmp);
    ::unlink(tmp.c_str());
    return err;
  }
  fd.Reset();
  if (::rename(tmp.c_str(), kSelfEnvPath) != 0) {
    Error err = ErrnoError(std::string("rename to ") + kSelfEnvPath);
    ::unlink(tmp.c_str());
    return err;
  }
  return OkStatus();
}

}  // namespace sbx::agent
