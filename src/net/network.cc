#include "net/network.h"

#include <fstream>
#include <sstream>

#include "base/fs.h"
#include "base/log.h"
#include "net/conntrack.h"

namespace sbx::net {

namespace {

constexpr uint32_t kMinLearnedTtl = 60;

int SlotCount(const Cidr& subnet) { return 1 << (32 - subnet.prefix - 1); }

}  // namespace

Result<std::unique_ptr<Network>> Network::Open(const NetworkOptions& o) {
  if (o.subnet.base.v6 || o.subnet.prefix < 16 || o.subnet.prefix > 24)
    return MakeError(Code::kInvalidArgument, "the sandboxes' subnet must be an IPv4 /16 to /24");
  if (o.upstream.v6) return MakeError(Code::kInvalidArgument, "the upstream resolver must be an IPv4 address");
  std::unique_ptr<Network> n(new Network(o));
  // Forwarding: on for the sandboxes. A host that forwarded nothing before sbxd first
  // turned it on (remembered in the state folder, across restarts) forwards only theirs.
  SBX_RETURN_IF_ERROR(fs::MkdirAll(o.state_dir, 0700));
  const std::string was_file = o.state_dir + "/ip_forward-before";
  const std::string sysctl = "/proc/sys/net/ipv4/ip_forward";
  if (!fs::Exists(was_file)) {
    SBX_ASSIGN_OR_RETURN(std::string now, fs::ReadFile(sysctl));
    SBX_RETURN_IF_ERROR(fs::WriteFileAtomic(was_file, now.substr(0, 1) + "\n", 0600));
  }
  SBX_ASSIGN_OR_RETURN(std::string was, fs::ReadFile(was_file));

  Network* self = n.get();
  n->resolver_ = std::make_unique<Resolver>(
      o.upstream, o.upstream_port, [self](const Address& a) { return self->ClientOf(a); },
      [self](int slot, const std::vector<std::pair<Address, uint32_t>>& addrs, bool deny) {
        if (auto st = self->firewall_->Learn(slot, addrs, deny, kMinLearnedTtl); !st.ok())
          SBX_LOG(kWarn) << "resolver: " << st.error().message;
      });
  SBX_ASSIGN_OR_RETURN(n->resolver_port_, n->resolver_->Start(o.resolver_port));
  FirewallOptions fo;
  fo.table = "sbx_" + o.tag;
  fo.link_prefix = "sx" + o.tag.substr(0, 5) + "-";
  fo.mark_base = static_cast<uint32_t>(std::stoul(o.tag.substr(0, 2), nullptr, 16)) << 24;
  fo.subnet = o.subnet;
  fo.resolver_port = n->resolver_port_;
  fo.max_conns = o.max_conns;
  fo.forward_only_sandboxes = was.rfind('0', 0) == 0;
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
  l.host_if = LinkOf(e.slot).host_if;
  l.sandbox = LinkOf(e.slot).sandbox;
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
  SBX_RETURN_IF_ERROR(firewall_->Remove(slot, l.host_if, l.sandbox, installed.mbps > 0));
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
