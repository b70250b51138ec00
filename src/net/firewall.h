// sbxd's packet filter for sandboxes' links: one nftables table of its own
// (`inet sbx_<tag>`; sbxd never touches another), made through libnftables in process.
// Each sandbox with a link has a chain and sets of its own, keyed by its slot; traffic
// from its host-side interface jumps to that chain. What every sandbox gets whatever its
// rules: no spoofed source, nothing into a sandbox that it did not open (other sandboxes
// included), nothing to the host but the resolver's port, no loopback or link-local
// (cloud metadata) destination, private ranges only when allowed, and a cap on its
// concurrent connections. DNS to any address is answered by sbxd's resolver.
#pragma once

#include <cstdint>
#include <memory>
#include <atomic>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/result.h"
#include "base/sync.h"
#include "net/rules.h"

struct nft_ctx;

namespace sbx::net {

struct FirewallOptions {
  std::string table;        // "sbx_<tag>"
  std::string link_prefix;  // every link of this sbxd is named so ("sx<tag>-")
  uint32_t mark_base = 0;   // a link's connections are marked mark_base | slot
  Cidr subnet;         // the sandboxes' addresses (IPv4)
  std::optional<Cidr> subnet6;  // and IPv6 (none: no IPv6 packet of a sandbox's passes)
  uint16_t resolver_port = 0;  // where sbxd's resolver listens (any address of the host)
  uint16_t resolver_tcp_port = 0;  // and for DNS over TCP
  int max_conns = 0;   // concurrent connections a sandbox may open (0: no cap)
  // New connections a second a sandbox may open (bursts of twice that; 0: no limit). With
  // the short conntrack timeouts of its closed TCP connections (kClosedSeconds, where the
  // kernel has timeout policies), this bounds what one sandbox holds in the host's
  // conntrack table in any state: max_conns open, about 2 x conn_rate x kClosedSeconds
  // closed, instead of 120 s of TIME_WAIT for every connection it ever closed.
  int conn_rate = 0;
  // The host forwarded nothing before sbxd turned forwarding on: forward nothing that is
  // not a sandbox's, as before.
  bool forward_only_sandboxes = false;
  bool forward_only_sandboxes6 = false;  // the same for IPv6
  // The folder holding this sbxd's state: the table's comment ("<folder> pid <pid>"), so
  // that another sbxd can tell the table is an orphan once the folder and sbxd are gone.
  std::string owner;
};

// One sandbox's link, as the firewall sees it.
struct LinkRules {
  int slot = 0;
  std::string host_if;
  Address sandbox;  // its address (IPv4)
  std::optional<Address> sandbox6;  // and IPv6, when sandboxes have it
  Rules rules;
  int mbps = 0;  // each way (0: no limit)
};

class Firewall {
 public:
  explicit Firewall(FirewallOptions o);
  ~Firewall();
  Firewall(const Firewall&) = delete;
  Firewall& operator=(const Firewall&) = delete;

  // Makes the table anew with these links, in one transaction (a restart replaces the
  // old table with no moment without rules). What the resolver had taught the old table
  // for these links (learned and refused addresses) is kept for its time left.
  Status Install(const std::vector<LinkRules>& links);
  // Install({}) unless the table exists (an earlier sbxd's, with its sandboxes' rules).
  Status InstallIfAbsent();
  // Adds or replaces one link's chain and sets (its learned addresses are forgotten).
  Status Apply(const LinkRules& link);
  // Removes what Apply or Install made for a link (`limited`: it had a bandwidth limit).
  Status Remove(int slot, const std::string& host_if, const Address& sandbox, const std::optional<Address>& sandbox6,
                bool limited);
  // Addresses answered for a name: allowed (an allow-list sandbox may reach them) or
  // denied, each for its TTL (at least `min_ttl` seconds).
  Status Learn(int slot, const std::vector<std::pair<Address, uint32_t>>& addrs, bool deny, uint32_t min_ttl);
  // Drops the table (sbxd with no sandboxes' links, and tests).
  Status Drop();
  // Drops other sbxds' tables that are orphans: the state folder their comment names is
  // gone (ENOENT), its sbxd's pid runs nothing, and no link of theirs is left (an sbxd killed and its folder removed leaves its
  // table, whose rules would go on applying to ports and addresses that are others' now).
  // A table without that comment, or with a link left, is kept. Returns the tables dropped.
  Result<std::vector<std::string>> DropOrphans();

  const FirewallOptions& options() const { return o_; }

 private:
  std::string LinkCommands(const LinkRules& l) const;
  // Commands that put the current table's learned and refused addresses of `links`
  // into a new one, each for its time left ("" when there is no table).
  std::string KeptAnswers(const std::vector<LinkRules>& links) const;
  std::string RemoveCommands(int slot, const std::string& host_if, const Address& sandbox,
                             const std::optional<Address>& sandbox6, bool limited) const;
  Status Run(const std::string& cmds) SBX_REQUIRES(mu_);
  // Run, and what nft printed.
  Result<std::string> Output(const std::string& cmds) SBX_REQUIRES(mu_);

  // Whether this kernel takes conntrack timeout policies (probed by Install).
  bool ProbeCtTimeouts() SBX_REQUIRES(mu_);

  FirewallOptions o_;
  std::atomic<bool> ct_timeouts_{false};
  Mutex mu_;
  nft_ctx* ctx_ SBX_GUARDED_BY(mu_) = nullptr;
};

}  // namespace sbx::net
