#include "agent/port_relay.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "agent/frame_io.h"
#include "base/unique_fd.h"

namespace sbx::agent {

using nlohmann::json;

void ServePortOpen(int sock, FrameDecoder* in, const std::string& request) {
  json req = json::parse(request, nullptr, false);
  int port = req.is_object() && req.contains("port") && req["port"].is_number_integer() ? req["port"].get<int>() : 0;
  if (port < 1 || port > 65535) return SendError(sock, MakeError(Code::kInvalidArgument, "port must be between 1 and 65535"));
  UniqueFd tcp(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!tcp.valid()) return SendError(sock, Errno(errno, "socket"));
  struct sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int rc;
  do {
    rc = ::connect(tcp.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    int err = errno;
    return SendError(sock, MakeError(Code::kUnavailable, "nothing answers on port " + std::to_string(port) +
                                                             " in the sandbox: " + std::strerror(err)));
  }
  if (!SendJson(sock, {{"port", port}})) return;
  // Raw bytes from here. Anything the client sent early is already decoded as frames: it
  // must wait for the answer, so there is nothing.
  (void)in;
  int fds[2] = {sock, tcp.get()};
  bool open_in[2] = {true, true};  // still reading from fds[i]
  std::string pending[2];           // read from fds[i], to write to fds[1-i]
  char buf[65536];
  while (open_in[0] || open_in[1] || !pending[0].empty() || !pending[1].empty()) {
    struct pollfd p[2];
    for (int i = 0; i < 2; ++i) {
      short ev = 0;
      if (open_in[i] && pending[i].size() < sizeof buf) ev |= POLLIN;
      if (!pending[1 - i].empty()) ev |= POLLOUT;
      p[i] = {ev ? fds[i] : -1, ev, 0};  // nothing to wait for on it: not polled
    }
    if (::poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    for (int i = 0; i < 2; ++i) {
      if (p[i].fd < 0) continue;
      if ((p[i].events & POLLIN) && (p[i].revents & (POLLIN | POLLHUP | POLLERR))) {
        ssize_t n = ::read(fds[i], buf, sizeof buf);
        if (n > 0) {
          pending[i].append(buf, n);
        } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
          open_in[i] = false;
          if (pending[i].empty()) ::shutdown(fds[1 - i], SHUT_WR);
        }
      }
      if ((p[i].events & POLLOUT) && (p[i].revents & (POLLOUT | POLLHUP | POLLERR))) {
        ssize_t n = ::send(fds[i], pending[1 - i].data(), pending[1 - i].size(), MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
          pending[1 - i].erase(0, n);
          if (pending[1 - i].empty() && !open_in[1 - i]) ::shutdown(fds[i], SHUT_WR);
        } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
          return;  // that side is gone
        }
      }
    }
  }
}

}  // namespace sbx::agent
