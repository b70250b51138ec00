#include "runtime/microvm/vm_host.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <thread>
#include <cstdio>
#include <cstring>

#include "base/fs.h"
#include "base/proc.h"

namespace sbx::runtime::microvm {

std::string Ipv4(uint32_t host_order) {
  struct in_addr a = {htonl(host_order)};
  char b[INET_ADDRSTRLEN];
  return ::inet_ntop(AF_INET, &a, b, sizeof b) ? b : "";
}
std::string Ipv6(const std::array<uint8_t, 16>& a) {
  char b[INET6_ADDRSTRLEN];
  return ::inet_ntop(AF_INET6, a.data(), b, sizeof b) ? b : "";
}

std::string MacOf(const NetLink& l) {
  char b[18];
  std::snprintf(b, sizeof b, "52:54:%02x:%02x:%02x:%02x", (l.sandbox >> 24) & 255, (l.sandbox >> 16) & 255,
                (l.sandbox >> 8) & 255, l.sandbox & 255);
  return b;
}

std::string Tail(const std::string& path, size_t n) {
  auto text = fs::ReadOwnedFile(path, 4 << 20);  // QEMU's: a link it planted is not followed
  if (!text.ok()) return "";
  std::string t = *text;
  while (!t.empty() && (t.back() == '\n' || t.back() == '\r')) t.pop_back();
  return t.size() > n ? t.substr(t.size() - n) : t;
}

std::string WhatItSaid(const std::string& vm) {
  std::string q = Tail(vm + "/qemu.log", 400), c = Tail(vm + "/console.log", 600);
  return (q.empty() ? "" : "QEMU: " + q + "; ") + (c.empty() ? "the console is empty" : "console: " + c);
}

Result<std::pair<pid_t, UniqueFd>> WaitForQemu(const std::string& vm, const std::function<std::vector<pid_t>()>& pids) {
  pid_t pid = 0;
  for (int i = 0; i < 1000 && pid <= 0; ++i) {
    auto pid_text = fs::ReadOwnedFile(vm + "/qemu.pid", 64);
    if (pid_text.ok()) pid = static_cast<pid_t>(std::atoi(pid_text->c_str()));
    if (pid <= 0) {
      if (pids().empty()) break;  // it ended
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  if (pid <= 0) return MakeError(Code::kInternal, "QEMU did not start: " + Tail(vm + "/qemu.log"));
  if (auto in = pids(); std::find(in.begin(), in.end(), pid) == in.end())
    return MakeError(Code::kInternal, "QEMU's pid file names a process outside its cgroup");
  auto pidfd = proc::PidfdOpen(pid);
  if (!pidfd.ok()) return MakeError(Code::kInternal, "QEMU ended at start: " + Tail(vm + "/qemu.log"));
  return std::make_pair(pid, std::move(*pidfd));
}

Result<bool> UseVsock(const std::string& channel, const std::string& vhost_vsock) {
  if (channel == "serial") return false;
  const int fd = ::open(vhost_vsock.c_str(), O_RDWR | O_CLOEXEC);
  const int err = errno;
  if (fd >= 0) ::close(fd);
  if (channel == "auto") return fd >= 0;
  if (channel != "vsock") return MakeError(Code::kInvalidArgument, "a microVM channel is auto, vsock or serial");
  if (fd < 0)
    return MakeError(Code::kFailedPrecondition, "--microvm-channel vsock: cannot open " + vhost_vsock + " (" +
                                                    std::strerror(err) + "): this host has no vhost-vsock");
  return true;
}

}  // namespace sbx::runtime::microvm
