#include "runtime/microvm/vm_host.h"

#include <arpa/inet.h>

#include <cstdio>

#include "base/fs.h"

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
  auto text = fs::ReadFile(path, 4 << 20);
  if (!text.ok()) return "";
  std::string t = *text;
  while (!t.empty() && (t.back() == '\n' || t.back() == '\r')) t.pop_back();
  return t.size() > n ? t.substr(t.size() - n) : t;
}

std::string WhatItSaid(const std::string& vm) {
  std::string q = Tail(vm + "/qemu.log", 400), c = Tail(vm + "/console.log", 600);
  return (q.empty() ? "" : "QEMU: " + q + "; ") + (c.empty() ? "the console is empty" : "console: " + c);
}

}  // namespace sbx::runtime::microvm
