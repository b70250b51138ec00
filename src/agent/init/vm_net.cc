#include "agent/init/vm_net.h"

#include <arpa/inet.h>
#include <net/if.h>
#include <net/route.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "base/fs.h"
#include "base/unique_fd.h"

namespace sbx::agent {
namespace {

constexpr const char* kIf = "eth0";

// The kernel's in6_ifreq (linux/ipv6.h clashes with glibc's netinet/in.h).
struct In6Ifreq {
  struct in6_addr addr;
  uint32_t prefixlen;
  int ifindex;
};

Status Ioctl(int fd, unsigned long req, void* arg, const char* what) {
  if (::ioctl(fd, req, arg) != 0) return ErrnoError(what);
  return OkStatus();
}

void SetSysctl(const std::string& path, const char* value) { (void)fs::WriteFile(path, value, false); }

Status ConfigureIpv4(const VmConfig& cfg) {
  UniqueFd s(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!s.valid()) return ErrnoError("socket");
  struct ifreq ifr = {};
  std::strncpy(ifr.ifr_name, kIf, IFNAMSIZ - 1);
  auto* sin = reinterpret_cast<sockaddr_in*>(&ifr.ifr_addr);
  sin->sin_family = AF_INET;
  if (::inet_pton(AF_INET, cfg.address.c_str(), &sin->sin_addr) != 1)
    return MakeError(Code::kInvalidArgument, "bad address " + cfg.address);
  SBX_RETURN_IF_ERROR(Ioctl(s.get(), SIOCSIFADDR, &ifr, "set eth0's address"));
  sin->sin_addr.s_addr = cfg.prefix == 0 ? 0 : htonl(~uint32_t{0} << (32 - cfg.prefix));
  SBX_RETURN_IF_ERROR(Ioctl(s.get(), SIOCSIFNETMASK, &ifr, "set eth0's netmask"));
  SBX_RETURN_IF_ERROR(Ioctl(s.get(), SIOCGIFFLAGS, &ifr, "read eth0's flags"));
  ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
  SBX_RETURN_IF_ERROR(Ioctl(s.get(), SIOCSIFFLAGS, &ifr, "bring eth0 up"));
  struct rtentry rt = {};
  auto* gw = reinterpret_cast<sockaddr_in*>(&rt.rt_gateway);
  gw->sin_family = AF_INET;
  if (::inet_pton(AF_INET, cfg.gateway.c_str(), &gw->sin_addr) != 1)
    return MakeError(Code::kInvalidArgument, "bad gateway " + cfg.gateway);
  reinterpret_cast<sockaddr_in*>(&rt.rt_dst)->sin_family = AF_INET;
  reinterpret_cast<sockaddr_in*>(&rt.rt_genmask)->sin_family = AF_INET;
  rt.rt_flags = RTF_UP | RTF_GATEWAY;
  char dev[IFNAMSIZ];
  std::strncpy(dev, kIf, sizeof dev);
  rt.rt_dev = dev;
  return Ioctl(s.get(), SIOCADDRT, &rt, "add the default route");
}

// As on the container wall: no router advertisements heard, no autoconfiguration, and the
// address used at once (no duplicate detection: the link has two ends, both sbxd's).
Status ConfigureIpv6(const VmConfig& cfg) {
  const std::string conf = std::string("/proc/sys/net/ipv6/conf/") + kIf + "/";
  for (const char* k : {"accept_ra", "autoconf", "accept_dad"}) SetSysctl(conf + k, "0");
  UniqueFd s(::socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!s.valid()) return ErrnoError("socket AF_INET6");
  In6Ifreq r = {};
  if (::inet_pton(AF_INET6, cfg.address6.c_str(), &r.addr) != 1)
    return MakeError(Code::kInvalidArgument, "bad address " + cfg.address6);
  r.prefixlen = 127;
  r.ifindex = static_cast<int>(::if_nametoindex(kIf));
  SBX_RETURN_IF_ERROR(Ioctl(s.get(), SIOCSIFADDR, &r, "set eth0's IPv6 address"));
  struct in6_rtmsg rt = {};
  if (::inet_pton(AF_INET6, cfg.gateway6.c_str(), &rt.rtmsg_gateway) != 1)
    return MakeError(Code::kInvalidArgument, "bad gateway " + cfg.gateway6);
  rt.rtmsg_flags = RTF_UP | RTF_GATEWAY;
  rt.rtmsg_metric = 1;
  rt.rtmsg_ifindex = r.ifindex;
  return Ioctl(s.get(), SIOCADDRT, &rt, "add the IPv6 default route");
}

}  // namespace

Status ReaddressVmNetwork(const std::string& net_json) {
  auto j = nlohmann::json::parse(net_json, nullptr, false);
  if (!j.is_object() || !j["address"].is_string() || !j["gateway"].is_string() || !j["prefix"].is_number_integer())
    return MakeError(Code::kInvalidArgument, "a network needs address, gateway and prefix");
  VmConfig cfg;
  cfg.address = j["address"].get<std::string>();
  cfg.gateway = j["gateway"].get<std::string>();
  cfg.prefix = j["prefix"].get<int>();
  cfg.address6 = j.value("address6", "");
  cfg.gateway6 = j.value("gateway6", "");
  UniqueFd s(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!s.valid()) return ErrnoError("socket");
  struct ifreq ifr = {};
  std::strncpy(ifr.ifr_name, kIf, IFNAMSIZ - 1);
  SBX_RETURN_IF_ERROR(Ioctl(s.get(), SIOCGIFFLAGS, &ifr, "read eth0's flags"));
  ifr.ifr_flags &= ~IFF_UP;
  SBX_RETURN_IF_ERROR(Ioctl(s.get(), SIOCSIFFLAGS, &ifr, "take eth0 down"));
  // The copy's own MAC (its IPv6 link-local address follows as eth0 comes up).
  if (const std::string mac = j.value("mac", ""); !mac.empty()) {
    unsigned b[6];
    if (std::sscanf(mac.c_str(), "%2x:%2x:%2x:%2x:%2x:%2x", &b[0], &b[1], &b[2], &b[3], &b[4], &b[5]) != 6 ||
        mac.size() != 17)
      return MakeError(Code::kInvalidArgument, "bad MAC " + mac);
    struct ifreq hw = {};
    std::strncpy(hw.ifr_name, kIf, IFNAMSIZ - 1);
    hw.ifr_hwaddr.sa_family = 1;  // ARPHRD_ETHER
    for (int i = 0; i < 6; ++i) hw.ifr_hwaddr.sa_data[i] = static_cast<char>(b[i]);
    SBX_RETURN_IF_ERROR(Ioctl(s.get(), SIOCSIFHWADDR, &hw, "set eth0's MAC"));
  }
  return ConfigureVmNetwork(cfg);
}

Status ConfigureVmNetwork(const VmConfig& cfg) {
  if (cfg.address.empty()) return OkStatus();
  SBX_RETURN_IF_ERROR(ConfigureIpv4(cfg));
  if (!cfg.address6.empty() && fs::Exists("/proc/sys/net/ipv6")) SBX_RETURN_IF_ERROR(ConfigureIpv6(cfg));
  return OkStatus();
}

}  // namespace sbx::agent
