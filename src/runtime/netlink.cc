#include "runtime/netlink.h"

// net/if.h before the kernel's headers (which then leave out what it defines).
#include <net/if.h>
//
#include <linux/if_tun.h>
#include <arpa/inet.h>
#include <linux/pkt_sched.h>
#include <fcntl.h>
#include <linux/if_link.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/veth.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

#include "base/fs.h"
#include "base/unique_fd.h"

namespace sbx::runtime::netlink {

namespace {

// One request, built in place: the header, the family header, then attributes (nests
// are closed by End).
class Msg {
 public:
  Msg(uint16_t type, uint16_t flags, const void* fam, size_t fam_len) {
    buf_.resize(NLMSG_HDRLEN);
    Header()->nlmsg_type = type;
    Header()->nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK | flags;
    Append(fam, fam_len);
  }
  void Attr(uint16_t type, const void* data, size_t len) {
    size_t at = buf_.size();
    buf_.resize(at + RTA_ALIGN(RTA_LENGTH(len)));
    auto* a = reinterpret_cast<struct rtattr*>(buf_.data() + at);
    a->rta_len = static_cast<unsigned short>(RTA_LENGTH(len));
    a->rta_type = type;
    if (len) std::memcpy(RTA_DATA(a), data, len);
  }
  void Str(uint16_t type, const std::string& s) { Attr(type, s.c_str(), s.size() + 1); }
  void U32(uint16_t type, uint32_t v) { Attr(type, &v, sizeof v); }
  void U64(uint16_t type, uint64_t v) { Attr(type, &v, sizeof v); }
  size_t Begin(uint16_t type) {
    size_t at = buf_.size();
    Attr(type, nullptr, 0);
    return at;
  }
  void End(size_t at) {
    auto* a = reinterpret_cast<struct rtattr*>(buf_.data() + at);
    a->rta_len = static_cast<unsigned short>(buf_.size() - at);
  }
  // Raw bytes inside a nest (a peer's ifinfomsg).
  void Raw(const void* data, size_t len) { Append(data, len); }
  std::vector<char>& Done() {
    Header()->nlmsg_len = static_cast<uint32_t>(buf_.size());
    return buf_;
  }

 private:
  struct nlmsghdr* Header() { return reinterpret_cast<struct nlmsghdr*>(buf_.data()); }
  void Append(const void* data, size_t len) {
    size_t at = buf_.size();
    buf_.resize(at + NLMSG_ALIGN(len));
    if (len) std::memcpy(buf_.data() + at, data, len);
  }
  std::vector<char> buf_;
};

Result<UniqueFd> Open() {
  UniqueFd fd(::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE));
  if (!fd.valid()) return ErrnoError("netlink socket");
  struct sockaddr_nl sa = {};
  sa.nl_family = AF_NETLINK;
  if (::bind(fd.get(), reinterpret_cast<struct sockaddr*>(&sa), sizeof sa) != 0) return ErrnoError("bind netlink");
  return fd;
}

// Sends one request and reads its acknowledgement: the kernel's errno, or ok.
Status Call(int fd, Msg& m, const std::string& what) {
  std::vector<char>& b = m.Done();
  if (::send(fd, b.data(), b.size(), 0) < 0) return ErrnoError(what);
  char reply[8192];
  for (;;) {
    ssize_t n = ::recv(fd, reply, sizeof reply, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError(what);
    }
    for (auto* h = reinterpret_cast<struct nlmsghdr*>(reply); NLMSG_OK(h, static_cast<unsigned>(n));
         h = NLMSG_NEXT(h, n)) {
      if (h->nlmsg_type != NLMSG_ERROR) continue;
      int err = -reinterpret_cast<struct nlmsgerr*>(NLMSG_DATA(h))->error;
      if (err == 0) return OkStatus();
      return ErrnoError(what, err);
    }
  }
}

Status SetUp(int fd, int index, const std::string& what) {
  struct ifinfomsg ifi = {};
  ifi.ifi_family = AF_UNSPEC;
  ifi.ifi_index = index;
  ifi.ifi_flags = IFF_UP;
  ifi.ifi_change = IFF_UP;
  Msg m(RTM_NEWLINK, 0, &ifi, sizeof ifi);
  return Call(fd, m, what);
}

// An address on a link: IPv4 (4 bytes) or IPv6 (16, used at once: no duplicate
// address detection on a point-to-point link whose other end is ours).
Status AddAddress(int fd, int index, int family, const void* addr, int prefix, const std::string& what) {
  struct ifaddrmsg ifa = {};
  ifa.ifa_family = static_cast<unsigned char>(family);
  ifa.ifa_prefixlen = static_cast<unsigned char>(prefix);
  ifa.ifa_index = static_cast<unsigned>(index);
  if (family == AF_INET6) ifa.ifa_flags = IFA_F_NODAD;
  Msg m(RTM_NEWADDR, NLM_F_CREATE | NLM_F_REPLACE, &ifa, sizeof ifa);
  if (family == AF_INET) {
    m.Attr(IFA_LOCAL, addr, 4);
    m.Attr(IFA_ADDRESS, addr, 4);
  } else {
    m.Attr(IFA_ADDRESS, addr, 16);
  }
  return Call(fd, m, what);
}

Status AddAddress4(int fd, int index, uint32_t host_order, int prefix, const std::string& what) {
  const uint32_t addr = htonl(host_order);
  return AddAddress(fd, index, AF_INET, &addr, prefix, what);
}

Status AddDefaultRoute(int fd, int index, int family, const void* gateway) {
  struct rtmsg rt = {};
  rt.rtm_family = static_cast<unsigned char>(family);
  rt.rtm_table = RT_TABLE_MAIN;
  rt.rtm_protocol = RTPROT_BOOT;
  rt.rtm_scope = RT_SCOPE_UNIVERSE;
  rt.rtm_type = RTN_UNICAST;
  Msg m(RTM_NEWROUTE, NLM_F_CREATE | NLM_F_REPLACE, &rt, sizeof rt);
  m.Attr(RTA_GATEWAY, gateway, family == AF_INET ? 4 : 16);
  m.U32(RTA_OIF, static_cast<uint32_t>(index));
  return Call(fd, m, family == AF_INET ? "add the sandbox's default route" : "add the sandbox's IPv6 default route");
}

// A token bucket (tbf) as the link's root queue: `mbps` out of this end, a burst of 10 ms
// (at least 1 MiB: a segmentation-offloaded frame is up to 64 KiB and must fit whole), and
// 100 ms of queue behind it.
Status AddPacing(int fd, int index, int mbps) {
  const uint64_t rate = static_cast<uint64_t>(mbps) * 125000;  // bytes/s
  const uint64_t burst = std::max<uint64_t>(1 << 20, rate / 100);
  struct tcmsg tc = {};
  tc.tcm_family = AF_UNSPEC;
  tc.tcm_ifindex = index;
  tc.tcm_parent = TC_H_ROOT;
  Msg m(RTM_NEWQDISC, NLM_F_CREATE | NLM_F_REPLACE, &tc, sizeof tc);
  m.Str(TCA_KIND, "tbf");
  size_t opts = m.Begin(TCA_OPTIONS);
  struct tc_tbf_qopt q = {};
  q.rate.linklayer = TC_LINKLAYER_ETHERNET;
  q.rate.rate = static_cast<uint32_t>(std::min<uint64_t>(rate, UINT32_MAX));
  q.limit = static_cast<uint32_t>(std::min<uint64_t>(burst + rate / 10, UINT32_MAX));
  m.Attr(TCA_TBF_PARMS, &q, sizeof q);
  if (rate > UINT32_MAX) m.U64(TCA_TBF_RATE64, rate);
  m.U32(TCA_TBF_BURST, static_cast<uint32_t>(std::min<uint64_t>(burst, UINT32_MAX)));
  m.End(opts);
  return Call(fd, m, "pace the sandbox's eth0 at " + std::to_string(mbps) + " Mbit/s");
}

Status WriteSysctl(const std::string& path, const std::string& value) {
  return fs::WriteFile(path, value, false);
}

// IPv6 on one end of a link (this thread's network namespace): off, or on with its
// address given (no router advertisements heard: the other end is ours).
Status ConfigureIpv6(const std::string& ifname, bool on) {
  const std::string conf = "/proc/sys/net/ipv6/conf/" + ifname + "/";
  if (!on) {
    (void)WriteSysctl(conf + "disable_ipv6", "1");  // a host without IPv6 has no such file
    return OkStatus();
  }
  SBX_RETURN_IF_ERROR(WriteSysctl(conf + "accept_ra", "0"));
  SBX_RETURN_IF_ERROR(WriteSysctl(conf + "autoconf", "0"));
  return WriteSysctl(conf + "disable_ipv6", "0");
}

Status ConfigureInside(const NetLink& link, int netns_fd, bool pace) {
  Status result = OkStatus();
  // setns changes the calling thread only: a thread of its own, so sbxd's stay on the host.
  std::thread t([&] {
    if (::setns(netns_fd, CLONE_NEWNET) != 0) {
      result = ErrnoError("enter the sandbox's network namespace");
      return;
    }
    auto fd = Open();
    if (!fd.ok()) {
      result = fd.error();
      return;
    }
    int index = static_cast<int>(::if_nametoindex("eth0"));
    if (index == 0) {
      result = ErrnoError("find the sandbox's eth0");
      return;
    }
    // /proc/sys/net is the opening thread's namespace's.
    result = ConfigureIpv6("eth0", link.has_v6);
    if (result.ok()) result = AddAddress4(fd->get(), index, link.sandbox, link.prefix, "address the sandbox's eth0");
    if (result.ok() && link.has_v6)
      result = AddAddress(fd->get(), index, AF_INET6, link.sandbox6.data(), 127, "address the sandbox's eth0 (IPv6)");
    if (result.ok() && pace && link.mbps > 0) result = AddPacing(fd->get(), index, link.mbps);
    if (result.ok()) result = SetUp(fd->get(), index, "bring the sandbox's eth0 up");
    const uint32_t gateway = htonl(link.gateway);
    if (result.ok()) result = AddDefaultRoute(fd->get(), index, AF_INET, &gateway);
    if (result.ok() && link.has_v6) result = AddDefaultRoute(fd->get(), index, AF_INET6, link.gateway6.data());
  });
  t.join();
  return result;
}

}  // namespace

std::optional<LinkCounters> ReadCounters(const std::string& host_if) {
  const std::string dir = "/sys/class/net/" + host_if + "/statistics/";
  auto rx = fs::ReadFile(dir + "rx_bytes"), tx = fs::ReadFile(dir + "tx_bytes");
  if (!rx.ok() || !tx.ok()) return std::nullopt;
  // The host's end receives what the sandbox sends.
  return LinkCounters{std::stoull(*rx), std::stoull(*tx)};
}

bool LinkExists(const std::string& host_if) { return ::if_nametoindex(host_if.c_str()) != 0; }

namespace {

Status DeleteIndex(int index, const std::string& what) {
  SBX_ASSIGN_OR_RETURN(UniqueFd fd, Open());
  struct ifinfomsg ifi = {};
  ifi.ifi_family = AF_UNSPEC;
  ifi.ifi_index = index;
  Msg m(RTM_DELLINK, 0, &ifi, sizeof ifi);
  Status st = Call(fd.get(), m, "delete link " + what);
  if (!st.ok() && st.error().sys_errno == ENODEV) return OkStatus();  // gone meanwhile
  return st;
}

}  // namespace

Status DeleteLink(const std::string& host_if) {
  int index = static_cast<int>(::if_nametoindex(host_if.c_str()));
  if (index == 0) return OkStatus();
  Status st = DeleteIndex(index, host_if);
  if (!st.ok() && !LinkExists(host_if)) return OkStatus();
  return st;
}

Status DeleteLinkLater(const std::string& host_if) {
  int index = static_cast<int>(::if_nametoindex(host_if.c_str()));
  if (index == 0) return OkStatus();
  {
    SBX_ASSIGN_OR_RETURN(UniqueFd fd, Open());
    struct ifinfomsg ifi = {};
    ifi.ifi_family = AF_UNSPEC;
    ifi.ifi_index = index;
    ifi.ifi_change = IFF_UP;  // flags 0: down
    Msg m(RTM_NEWLINK, 0, &ifi, sizeof ifi);
    SBX_RETURN_IF_ERROR(Call(fd.get(), m, "take " + host_if + " down"));
  }
  std::thread([index, host_if] { (void)DeleteIndex(index, host_if); }).detach();
  return OkStatus();
}

Status ConfigureHostEnd(const NetLink& link) {
  SBX_RETURN_IF_ERROR(ConfigureIpv6(link.host_if, link.has_v6));
  // Strict reverse-path filtering: a packet from the sandbox's end must come from its
  // address (for IPv6, the firewall checks it).
  SBX_RETURN_IF_ERROR(WriteSysctl("/proc/sys/net/ipv4/conf/" + link.host_if + "/rp_filter", "1"));
  SBX_ASSIGN_OR_RETURN(UniqueFd fd, Open());
  int index = static_cast<int>(::if_nametoindex(link.host_if.c_str()));
  if (index == 0) return ErrnoError("find link " + link.host_if);
  SBX_RETURN_IF_ERROR(AddAddress4(fd.get(), index, link.gateway, link.prefix, "address " + link.host_if));
  if (link.has_v6)
    SBX_RETURN_IF_ERROR(AddAddress(fd.get(), index, AF_INET6, link.gateway6.data(), 127, "address " + link.host_if + " (IPv6)"));
  return SetUp(fd.get(), index, "bring " + link.host_if + " up");
}

namespace {

// Creates the pair: the host's end and `peer`, in `netns_fd` (-1: on the host too).
Status CreatePair(int fd, const std::string& host_if, const std::string& peer, int netns_fd) {
  struct ifinfomsg ifi = {};
  ifi.ifi_family = AF_UNSPEC;
  Msg m(RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL, &ifi, sizeof ifi);
  m.Str(IFLA_IFNAME, host_if);
  size_t info = m.Begin(IFLA_LINKINFO);
  m.Str(IFLA_INFO_KIND, "veth");
  size_t data = m.Begin(IFLA_INFO_DATA);
  size_t peer_at = m.Begin(VETH_INFO_PEER);
  struct ifinfomsg peer_ifi = {};
  peer_ifi.ifi_family = AF_UNSPEC;
  m.Raw(&peer_ifi, sizeof peer_ifi);
  m.Str(IFLA_IFNAME, peer);
  if (netns_fd >= 0) m.U32(IFLA_NET_NS_FD, static_cast<uint32_t>(netns_fd));
  m.End(peer_at);
  m.End(data);
  m.End(info);
  Status st = Call(fd, m, "create the sandbox's link " + host_if);
  if (!st.ok() && LinkExists(host_if)) {
    // A pair of a namespace that the kernel is still tearing down, or of a failed restore.
    SBX_RETURN_IF_ERROR(DeleteLink(host_if));
    st = Call(fd, m, "create the sandbox's link " + host_if);
  }
  return st;
}

}  // namespace

Status CreateHostPair(const NetLink& link, const std::string& peer) {
  SBX_ASSIGN_OR_RETURN(UniqueFd fd, Open());
  (void)DeleteLink(peer);
  return CreatePair(fd.get(), link.host_if, peer, -1);
}

Status AttachVeth(const NetLink& link, int netns_fd, bool pace) {
  SBX_ASSIGN_OR_RETURN(UniqueFd fd, Open());
  SBX_RETURN_IF_ERROR(CreatePair(fd.get(), link.host_if, "eth0", netns_fd));
  Status configured = ConfigureHostEnd(link);
  if (configured.ok()) configured = ConfigureInside(link, netns_fd, pace);
  if (!configured.ok()) (void)DeleteLink(link.host_if);
  return configured;
}

Status CreateTap(const NetLink& link, uid_t owner) {
  if (LinkExists(link.host_if)) SBX_RETURN_IF_ERROR(DeleteLink(link.host_if));
  UniqueFd tun(::open("/dev/net/tun", O_RDWR | O_CLOEXEC));
  if (!tun.valid()) return ErrnoError("open /dev/net/tun");
  struct ifreq ifr = {};
  if (link.host_if.size() >= IFNAMSIZ) return MakeError(Code::kInvalidArgument, "link name too long: " + link.host_if);
  std::memcpy(ifr.ifr_name, link.host_if.data(), link.host_if.size());
  ifr.ifr_flags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR;
  if (::ioctl(tun.get(), TUNSETIFF, &ifr) != 0) return ErrnoError("make tap " + link.host_if);
  if (::ioctl(tun.get(), TUNSETOWNER, static_cast<unsigned long>(owner)) != 0 ||
      ::ioctl(tun.get(), TUNSETPERSIST, 1) != 0)
    return ErrnoError("keep tap " + link.host_if);
  tun.Reset();
  Status configured = ConfigureHostEnd(link);
  if (!configured.ok()) (void)DeleteLink(link.host_if);
  return configured;
}

}  // namespace sbx::runtime::netlink
