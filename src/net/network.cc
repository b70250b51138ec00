#include "net/network.h"

#include <array>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "base/fs.h"
#include "base/log.h"
#include "net/conntrack.h"

namespace sbx::net {

namespace {

constexpr uint32_t kMinLearnedTtl = 60;

int SlotCount(const Cidr& subnet) { return 1 << (32 - subnet.prefix - 1); }

// Whether the host forwarded none of a family's packets before sbxd first turned
// forwarding on (remembered in `was_file`, across restarts).
Result<bool> ForwardedNothingBefore(const std::string& was_file, const std::string& sysctl) {
  if (!fs::Exists(was_file)) {
    SBX_ASSIGN_OR_RETURN(std::string now, fs::ReadFile(sysctl));
    SBX_RETURN_IF_ERROR(fs::WriteFileAtomic(was_file, now.substr(0, 1) + "\n", 0600));
  }
  SBX_ASSIGN_OR_RETURN(std::string was, fs::ReadFile(was_file));
  return was.rfind('0', 0) == 0;
}

// /proc/net/ipv6_route's rows: destination, prefix length, RTF_* flags, device.
struct Route6 {
  std::array<uint8_t, 16> dst{};
  int len = 0;
  unsigned long flags = 0;
  std::string dev;
};

std::vector<Route6> Ipv6Routes() {
  std::vector<Route6> out;
  std::ifstream in("/proc/net/ipv6_route");
  for (std::string line; std::getline(in, line);) {
    std::istringstream w(line);
    std::string dst, dst_len, src, src_len, hop, metric, ref, use, flags, dev;
    if (!(w >> dst >> dst_len >> src >> src_len >> hop >> metric >> ref >> use >> flags >> dev) || dst.size() != 32)
      continue;
    Route6 r;
    for (int i = 0; i < 16; ++i) r.dst[i] = static_cast<uint8_t>(std::strtoul(dst.substr(2 * i, 2).c_str(), nullptr, 16));
    r.len = static_cast<int>(std::strtol(dst_len.c_str(), nullptr, 16));
    r.flags = std::strtoul(flags.c_str(), nullptr, 16);
    r.dev = dev;
    out.push_back(std::move(r));
  }
  return out;
}

constexpr unsigned long kRtfGateway = 0x2, kRtfDefault = 0x10000, kRtfAddrconf = 0x40000;

// A host that takes its IPv6 default route from router advertisements stops hearing them
// once it forwards (accept_ra 1 means "unless forwarding"), and would lose that route when
// it expires: such interfaces get 2 ("even when forwarding"). Only those: any other link
// (a container's, say) goes on ignoring advertisements, so it can never become the
// host's router.
void KeepRouterAdvertisements() {
  std::set<std::string> devs;
  for (const auto& r : Ipv6Routes())
    if ((r.flags & kRtfDefault) && (r.flags & kRtfAddrconf) && r.dev.find('/') == std::string::npos && r.dev != "." &&
        r.dev != "..")
      devs.insert(r.dev);
  for (const auto& dev : devs) {
    const std::string path = "/proc/sys/net/ipv6/conf/" + dev + "/accept_ra";
    auto v = fs::ReadFile(path);
    if (v.ok() && v->rfind('1', 0) == 0 && fs::WriteFile(path, "2", false).ok())
      SBX_LOG(kInfo) << "network: " << dev << " takes the host's IPv6 default route from router advertisements: "
                     << "accept_ra 2, so it keeps them while the host forwards for sandboxes";
  }
}

// The networks the host is on: its on-link routes (no gateway) other than the default,
// loopback, link-local, multicast and sandboxes' links ("sx*": every sbxd's), from
// /proc/net/route and /proc/net/ipv6_route as they are at sbxd's start.
std::vector<Cidr> HostNetworks() {
  std::vector<Cidr> out;
  auto skip_dev = [](const std::string& dev) { return dev == "lo" || dev.rfind("sx", 0) == 0; };
  std::ifstream v4("/proc/net/route");
  std::string line;
  std::getline(v4, line);  // the header
  while (std::getline(v4, line)) {
    std::istringstream w(line);
    std::string dev, dst, gw, flags, ref, use, metric, mask;
    if (!(w >> dev >> dst >> gw >> flags >> ref >> use >> metric >> mask) || skip_dev(dev)) continue;
    // Hex of the address as it sits in memory (network byte order read as a host int).
    const uint32_t d = static_cast<uint32_t>(std::strtoul(dst.c_str(), nullptr, 16));
    const uint32_t g = static_cast<uint32_t>(std::strtoul(gw.c_str(), nullptr, 16));
    const uint32_t m = static_cast<uint32_t>(std::strtoul(mask.c_str(), nullptr, 16));
    if (g != 0 || m == 0) continue;
    Cidr c;
    std::memcpy(c.base.bytes.data(), &d, 4);
    c.prefix = __builtin_popcount(m);
    if (!c.base.bytes[0] || c.base.bytes[0] == 127 || c.base.bytes[0] >= 224) continue;
    out.push_back(c);
  }
  for (const auto& r : Ipv6Routes()) {
    if (skip_dev(r.dev) || r.len == 0 || r.len == 128 || (r.flags & kRtfGateway)) continue;
    Cidr c;
    c.base.v6 = true;
    c.base.bytes = r.dst;
    c.prefix = r.len;
    if (c.base.bytes[0] == 0xff || (c.base.bytes[0] == 0xfe && (c.base.bytes[1] & 0xc0) == 0x80)) continue;
    out.push_back(c);
  }
  return out;
}

}  // namespace

Cidr DefaultSubnet6(const Cidr& v4) {
  Cidr c;
  c.base.v6 = true;
  c.base.bytes[0] = 0xfd;
  c.base.bytes[1] = 0x5b;
  for (int i = 0; i < 4; ++i) c.base.bytes[2 + i] = v4.base.bytes[i];
  c.prefix = 64;
  return c;
}

Result<std::unique_ptr<Network>> Network::Open(const NetworkOptions& opts) {
  NetworkOptions o = opts;
  if (o.subnet.base.v6 || o.subnet.prefix < 16 || o.subnet.prefix > 24)
    return MakeError(Code::kInvalidArgument, "the sandboxes' subnet must be an IPv4 /16 to /24");
  if (o.subnet6 && (!o.subnet6->base.v6 || o.subnet6->prefix < 64 || o.subnet6->prefix > 112))
    return MakeError(Code::kInvalidArgument, "the sandboxes' IPv6 subnet must be an IPv6 /64 to /112");
  if (o.upstream.v6) return MakeError(Code::kInvalidArgument, "the upstream resolver must be an IPv4 address");
  const std::string sysctl6 = "/proc/sys/net/ipv6/conf/all/forwarding";
  if (o.subnet6 && !fs::Exists(sysctl6)) {
    SBX_LOG(kWarn) << "network: this host has no IPv6: sandboxes reach out over IPv4 only";
    o.subnet6.reset();
  }
  std::unique_ptr<Network> n(new Network(o));
  // Forwarding: on for the sandboxes. A host that forwarded nothing of a family before
  // sbxd first turned it on forwards only theirs.
  SBX_RETURN_IF_ERROR(fs::MkdirAll(o.state_dir, 0700));
  const std::string sysctl = "/proc/sys/net/ipv4/ip_forward";
  SBX_ASSIGN_OR_RETURN(bool only4, ForwardedNothingBefore(o.state_dir + "/ip_forward-before", sysctl));
  bool only6 = false;
  const std::string was6 = o.state_dir + "/ip6_forward-before";
  if (o.subnet6) {
    SBX_ASSIGN_OR_RETURN(only6, ForwardedNothingBefore(was6, sysctl6));
    if (only6) KeepRouterAdvertisements();
  } else if (auto before = fs::ReadFile(was6); before.ok()) {
    // An earlier run with IPv6 turned forwarding on; this one has none, yet the host
    // still forwards (another sbxd may need it): it forwards only sandboxes' packets.
    only6 = before->rfind('0', 0) == 0;
  }

  Network* self = n.get();
  n->resolver_ = std::make_unique<Resolver>(
      o.upstream, o.upstream_port, [self](const Address& a) { return self->ClientOf(a); },
      [self](int slot, const std::vector<std::pair<Address, uint32_t>>& addrs, bool deny) {
        if (auto st = self->firewall_->Learn(slot, addrs, deny, kMinLearnedTtl); !st.ok())
          SBX_LOG(kWarn) << "resolver: " << st.error().message;
      });
  n->resolver_->set_rate(o.dns_rate);
  SBX_ASSIGN_OR_RETURN(auto ports, n->resolver_->Start(o.resolver_port, o.resolver_tcp_port));
  n->resolver_port_ = ports.first;
  n->resolver_tcp_port_ = ports.second;
  FirewallOptions fo;
  fo.table = "sbx_" + o.tag;
  fo.link_prefix = "sx" + o.tag.substr(0, 5) + "-";
  fo.mark_base = static_cast<uint32_t>(std::stoul(o.tag.substr(0, 2), nullptr, 16)) << 24;
  fo.subnet = o.subnet;
  fo.subnet6 = o.subnet6;
  fo.resolver_port = n->resolver_port_;
  fo.resolver_tcp_port = n->resolver_tcp_port_;
  fo.max_conns = o.max_conns;
  fo.conn_rate = o.conn_rate;
  fo.forward_only_sandboxes = only4;
  fo.forward_only_sandboxes6 = only6;
  AddHostNetworks(HostNetworks());  // the resolver's rebinding check judges by them too
  fo.owner = o.state_dir;
  n->firewall_ = std::make_unique<Firewall>(fo);
  if (auto gone = n->firewall_->DropOrphans(); !gone.ok()) {
    SBX_LOG(kWarn) << "looking for orphaned firewall tables: " << gone.error().message;
  } else {
    for (const auto& t : *gone) SBX_LOG(kInfo) << "dropped the firewall table " << t << " of an sbxd whose folder is gone";
  }
  // The walls before forwarding: no moment when a link passes unfiltered. (An earlier
  // sbxd's table stays in force until this one's, with the sandboxes' rules, replaces it
  // at Install; only a host without it gets the empty one here.)
  SBX_RETURN_IF_ERROR(n->firewall_->InstallIfAbsent());
  SBX_RETURN_IF_ERROR(fs::WriteFile(sysctl, "1", false));
  if (o.subnet6) SBX_RETURN_IF_ERROR(fs::WriteFile(sysctl6, "1", false));
  return n;
}

Result<std::pair<Address, uint16_t>> ParseUpstream(const std::string& flag) {
  std::string text = flag;
  if (text.empty()) {
    std::ifstream in("/etc/resolv.conf");
    for (std::string line; std::getline(in, line);) {
      std::istringstream words(line);
      std::string key, addr;
      if (words >> key >> addr && key == "nameserver" && Address::Parse(addr) && !Address::Parse(addr)->v6) {
        text = addr;
        break;
      }
    }
    if (text.empty()) return MakeError(Code::kFailedPrecondition, "/etc/resolv.conf names no IPv4 nameserver (use --dns-upstream)");
  }
  uint16_t port = 53;
  if (auto colon = text.find(':'); colon != std::string::npos) {
    try {
      int p = std::stoi(text.substr(colon + 1));
      if (p < 1 || p > 65535) throw std::out_of_range("port");
      port = static_cast<uint16_t>(p);
    } catch (const std::exception&) {
      return MakeError(Code::kInvalidArgument, "--dns-upstream wants an IPv4 ADDR[:PORT]");
    }
    text = text.substr(0, colon);
  }
  auto a = Address::Parse(text);
  if (!a || a->v6) return MakeError(Code::kInvalidArgument, "--dns-upstream wants an IPv4 ADDR[:PORT]");
  return std::make_pair(*a, port);
}

Network::~Network() {
  if (resolver_) resolver_->Stop();
}

Network::Link Network::LinkOf(int slot) const {
  Link l;
  l.slot = slot;
  char name[16];
  std::snprintf(name, sizeof name, "sx%s-%x", o_.tag.substr(0, 5).c_str(), slot);
  l.host_if = name;
  const uint32_t base = o_.subnet.base.v4();
  l.gateway = Address::V4(base + 2 * static_cast<uint32_t>(slot));
  l.sandbox = Address::V4(base + 2 * static_cast<uint32_t>(slot) + 1);
  if (o_.subnet6) {
    // The subnet's last 16 bits are its hosts' (a /112 at most); 2 * slot + 1 fits them.
    for (int i : {0, 1}) {
      Address a = o_.subnet6->base;
      const unsigned v = 2 * static_cast<unsigned>(slot) + static_cast<unsigned>(i);
      a.bytes[14] = static_cast<uint8_t>(v >> 8);
      a.bytes[15] = static_cast<uint8_t>(v);
      (i == 0 ? l.gateway6 : l.sandbox6) = a;
    }
  }
  return l;
}

Address Network::resolver_address() const { return Address::V4(o_.subnet.base.v4() + 1); }

Result<int> Network::Take(const std::string& id) {
  MutexLock lock(mu_);
  if (auto it = slot_of_.find(id); it != slot_of_.end()) return it->second;
  const int count = SlotCount(o_.subnet);
  for (int i = 0; i < count; ++i) {
    int slot = next_;
    next_ = next_ + 1 >= count ? 1 : next_ + 1;
    if (slot == 0 || owner_of_.count(slot)) continue;
    slot_of_[id] = slot;
    owner_of_[slot] = id;
    return slot;
  }
  return MakeError(Code::kResourceExhausted, "every address of the sandboxes' subnet is in use");
}

Status Network::Hold(const std::string& id, int slot) {
  MutexLock lock(mu_);
  if (slot <= 0 || slot >= SlotCount(o_.subnet))
    return MakeError(Code::kFailedPrecondition, "slot " + std::to_string(slot) + " is outside the sandboxes' subnet");
  if (auto it = owner_of_.find(slot); it != owner_of_.end() && it->second != id)
    return MakeError(Code::kAlreadyExists, "slot " + std::to_string(slot) + " is held by " + it->second);
  slot_of_[id] = slot;
  owner_of_[slot] = id;
  return OkStatus();
}

void Network::Release(const std::string& id) {
  MutexLock lock(mu_);
  auto it = slot_of_.find(id);
  if (it == slot_of_.end()) return;
  owner_of_.erase(it->second);
  slot_of_.erase(it);
}

LinkRules Network::RulesOf(const Entry& e) const {
  LinkRules l;
  l.slot = e.slot;
  const Link link = LinkOf(e.slot);
  l.host_if = link.host_if;
  l.sandbox = link.sandbox;
  l.sandbox6 = link.sandbox6;
  l.rules = e.rules;
  l.mbps = e.mbps;
  return l;
}

Status Network::Install(const std::vector<Entry>& entries) {
  std::vector<LinkRules> links;
  for (const auto& e : entries) links.push_back(RulesOf(e));
  SBX_RETURN_IF_ERROR(firewall_->Install(links));
  MutexLock lock(mu_);
  rules_.clear();
  for (const auto& e : entries) rules_[e.slot] = e;
  return OkStatus();
}

Status Network::Apply(const Entry& e) {
  SBX_RETURN_IF_ERROR(firewall_->Apply(RulesOf(e)));
  MutexLock lock(mu_);
  rules_[e.slot] = e;
  return OkStatus();
}

Status Network::Remove(const std::string& id, int slot) {
  Entry installed;
  {
    MutexLock lock(mu_);
    // Another sandbox's by now: not this one's to remove.
    if (auto o = owner_of_.find(slot); o != owner_of_.end() && o->second != id) return OkStatus();
    auto it = rules_.find(slot);
    if (it == rules_.end()) return OkStatus();  // not in the firewall
    installed = it->second;
  }
  const Link l = LinkOf(slot);
  SBX_RETURN_IF_ERROR(firewall_->Remove(slot, l.host_if, l.sandbox, l.sandbox6, installed.mbps > 0));
  {
    MutexLock lock(mu_);
    rules_.erase(slot);
  }
  return ForgetConnections(slot);
}

Status Network::ForgetConnections(int slot) {
  return net::ForgetConnections(MarkOf(slot));
}

uint32_t Network::MarkOf(int slot) const { return firewall_->options().mark_base | static_cast<uint32_t>(slot); }

std::optional<Resolver::Client> Network::ClientOf(const Address& a) {
  if (a.v6 || !o_.subnet.Contains(a)) return std::nullopt;
  const uint32_t off = a.v4() - o_.subnet.base.v4();
  if (off % 2 == 0) return std::nullopt;
  const int slot = static_cast<int>(off / 2);
  MutexLock lock(mu_);
  auto it = rules_.find(slot);
  if (it == rules_.end()) return std::nullopt;
  return Resolver::Client{slot, it->second.rules};
}

}  // namespace sbx::net
