#include "agent/frame_io.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

namespace sbx::agent {
namespace {

using nlohmann::json;

}  // namespace

bool WriteAllBlocking(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = ::write(fd, s.data() + off, s.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {
        struct pollfd p = {fd, POLLOUT, 0};
        ::poll(&p, 1, 1000);
        continue;
      }
      return false;
    }
    off += n;
  }
  return true;
}

bool SendAll(int fd, std::string_view s) {
  while (!s.empty()) {
    ssize_t n = ::send(fd, s.data(), s.size(), MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    s.remove_prefix(n);
  }
  return true;
}

bool Send(int sock, FrameType t, std::string_view payload) {
  return SendAll(sock, EncodeHeader(t, static_cast<uint32_t>(payload.size()))) && SendAll(sock, payload);
}

bool SendJson(int sock, const json& j) {
  return Send(sock, FrameType::kResult, j.dump(-1, ' ', false, json::error_handler_t::replace));
}

bool NextFrame(int sock, FrameDecoder* in, Frame* f) {
  while (true) {
    auto next = in->Next();
    if (!next.ok()) return false;
    if (next->has_value()) {
      *f = std::move(**next);
      return true;
    }
    char buf[65536];
    ssize_t n = ::read(sock, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    in->Feed(buf, n);
  }
}

void SendError(int sock, const Error& e) {
  json j = {{"message", e.message}, {"code", CodeName(e.code)}};
  Send(sock, FrameType::kError, j.dump(-1, ' ', false, json::error_handler_t::replace));
}

void SendErrorMessage(int sock, const std::string& msg) {
  WriteAllBlocking(sock, EncodeFrame(FrameType::kError, json{{"message", msg}}.dump()));
}

Error Errno(int err, const std::string& what) {
  std::string msg = what + ": " + std::strerror(err);
  if (err == ENOSPC || err == EDQUOT) msg = what + ": no space left on the sandbox's disk";
  if (err == EXDEV) msg = what + ": a move cannot cross file systems (mounts) inside the sandbox";
  Error e = MakeError(CodeOfErrno(err), msg);
  e.sys_errno = err;
  return e;
}

}  // namespace sbx::agent
