// Sandboxes' networking on this host, whatever their wall: their addresses (a slot each in
// sbxd's subnet: a /31 whose lower address is the host's end, and the same in its IPv6
// subnet as a /127), the firewall that holds
// their rules and sbxd's resolver. A wall makes the link itself (runtime/netlink.h for a
// veth) from the addresses given here; core keeps each sandbox's slot and rules in its row.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/result.h"
#include "base/sync.h"
#include "net/firewall.h"
#include "net/resolver.h"
#include "net/rules.h"

namespace sbx::net {

struct NetworkOptions {
  std::string tag;  // a few hex digits unique to this sbxd on the host (its links' and table's names)
  Cidr subnet;      // IPv4, a /16 to a /24
  // IPv6, a /64 to a /112 (none: sandboxes reach out over IPv4 only). Turned off when the
  // host has no IPv6.
  std::optional<Cidr> subnet6;
  Address upstream;  // where the resolver asks (IPv4)
  uint16_t upstream_port = 53;
  uint16_t resolver_port = 0;  // 0: any free port
  uint16_t resolver_tcp_port = 0;  // the same, for DNS over TCP
  int max_conns = 0;
  int dns_rate = 0;  // DNS queries a second asked upstream per sandbox (0: no limit)
  int conn_rate = 0;  // new connections a second per sandbox (FirewallOptions::conn_rate)
  std::string state_dir;  // where what sbxd changed on the host is remembered
};

// The IPv6 subnet that goes with an IPv4 one when none is given: a unique local /64 made
// from its base (10.250.0.0/16: fd5b:afa:0::/64), so that sbxds on one host with
// different IPv4 subnets never share one.
Cidr DefaultSubnet6(const Cidr& v4);

// Where the resolver asks: `flag` as ADDR[:PORT] (IPv4), or when empty the first IPv4
// nameserver of the host's /etc/resolv.conf (sbxd asks from the host, so a loopback
// resolver such as systemd-resolved's works).
Result<std::pair<Address, uint16_t>> ParseUpstream(const std::string& flag);

class Network {
 public:
  static Result<std::unique_ptr<Network>> Open(const NetworkOptions& o);
  ~Network();

  struct Link {
    int slot = 0;
    std::string host_if;
    Address sandbox, gateway;
    std::optional<Address> sandbox6, gateway6;  // when sandboxes have IPv6
  };
  Link LinkOf(int slot) const;
  // The resolver's address in every sandbox (any address on port 53 reaches it too).
  Address resolver_address() const;
  uint16_t resolver_port() const { return resolver_port_; }
  uint16_t resolver_tcp_port() const { return resolver_tcp_port_; }
  const std::optional<Cidr>& subnet6() const { return o_.subnet6; }

  // A free slot for sandbox `id` (kResourceExhausted when the subnet is full); Hold
  // takes a slot that a row names again (sbxd's start).
  Result<int> Take(const std::string& id);
  Status Hold(const std::string& id, int slot);
  void Release(const std::string& id);  // after Remove

  // Rules: all at sbxd's start (one transaction), one sandbox's, and its removal.
  struct Entry {
    int slot = 0;
    Rules rules;
    int mbps = 0;
  };
  Status Install(const std::vector<Entry>& entries);
  Status Apply(const Entry& e);
  // Removes the rules of `id`'s slot (nothing if the slot is another's now) and forgets
  // its connections.
  Status Remove(const std::string& id, int slot);
  // Forgets the connections a slot's sandbox made (its link went: they cannot go on, and
  // a later sandbox with its address must not match them).
  Status ForgetConnections(int slot);
  // The connection tracking mark of a slot's connections: 8 bits of the tag, the slot.
  uint32_t MarkOf(int slot) const;

  const Resolver::Stats& resolver_stats() const { return resolver_->stats(); }

 private:
  explicit Network(const NetworkOptions& o) : o_(o) {}
  LinkRules RulesOf(const Entry& e) const;
  std::optional<Resolver::Client> ClientOf(const Address& a);

  NetworkOptions o_;
  std::unique_ptr<Firewall> firewall_;
  std::unique_ptr<Resolver> resolver_;
  uint16_t resolver_port_ = 0, resolver_tcp_port_ = 0;
  Mutex mu_;
  std::map<std::string, int> slot_of_ SBX_GUARDED_BY(mu_);
  std::map<int, std::string> owner_of_ SBX_GUARDED_BY(mu_);
  std::map<int, Entry> rules_ SBX_GUARDED_BY(mu_);  // what the firewall holds, by slot
  int next_ SBX_GUARDED_BY(mu_) = 1;
};

}  // namespace sbx::net
