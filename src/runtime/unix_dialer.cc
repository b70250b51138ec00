#include "runtime/unix_dialer.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>

namespace sbx::runtime {

Result<std::optional<UniqueFd>> UnixDialer::TryDial() const {
  struct sockaddr_un addr;
  std::memset(&addr, 0, sizeof addr);
  addr.sun_family = AF_UNIX;
  if (address_.empty() || address_.size() >= sizeof addr.sun_path)
    return MakeError(Code::kInvalidArgument, "bad agent socket address");
  std::memcpy(addr.sun_path, address_.data(), address_.size());
  socklen_t len = sizeof addr;
  if (address_[0] == '@') {
    addr.sun_path[0] = '\0';  // abstract: the length, not a NUL, ends the name
    len = static_cast<socklen_t>(offsetof(struct sockaddr_un, sun_path) + address_.size());
  }
  const int type = SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK;
  UniqueFd fd;
  if (!netns_) {
    fd.Reset(::socket(AF_UNIX, type, 0));
    if (!fd.valid()) return ErrnoError("socket");
  } else {
    // A socket belongs to the network namespace of the thread that made it: this thread
    // enters the sandbox's for the socket() call only, and always comes back.
    static thread_local int own = ::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
    if (own < 0) return ErrnoError("open this thread's network namespace");
    if (!netns_->valid() || ::setns(netns_->get(), CLONE_NEWNET) != 0)
      return ErrnoError("enter the sandbox's network namespace");
    fd.Reset(::socket(AF_UNIX, type, 0));
    int err = errno;
    if (::setns(own, CLONE_NEWNET) != 0) std::abort();  // a thread left in a sandbox's namespace
    if (!fd.valid()) return ErrnoError("socket", err);
  }
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), len) == 0) return std::optional<UniqueFd>(std::move(fd));
  // A unix stream socket reports a full listen queue as EAGAIN (it never connects later
  // by itself, unlike TCP's EINPROGRESS).
  if (errno == EAGAIN) return std::optional<UniqueFd>();
  return ErrnoError("connect to the sandbox's agent");
}

Result<agent::DialerPtr> DialerInFolder(const std::string& dir, const std::string& name) {
  UniqueFd f(::open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!f.valid()) return ErrnoError("open " + dir);
  return agent::DialerPtr(std::make_shared<FolderDialer>(std::move(f), name));
}

}  // namespace sbx::runtime
