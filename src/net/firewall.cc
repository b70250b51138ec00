#include "net/firewall.h"

#include "base/log.h"

#include <nftables/libnftables.h>

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "base/fs.h"

namespace sbx::net {

namespace {

// DNS queries a link may have tracked at once (UDP entries live 30 s unanswered, 120 s
// once answered): a flood of them cannot fill the host's connection tracking table.
constexpr int kDnsConns = 512;
// DNS connections over TCP a link may have open at once (the resolver serves 64 in all).
constexpr int kDnsTcpConns = 8;
// How long the host's conntrack keeps a sandbox's TCP connection once it is closed
// (TIME_WAIT, CLOSE), instead of the kernel's 120 s: a late segment then finds no entry
// and is dropped, which its ends' own TIME_WAIT makes harmless.
constexpr int kClosedSeconds = 2;
// The table's timeout policy for that.
constexpr const char* kClosedPolicy = "closed";

std::string Elements(const std::vector<Cidr>& cidrs, bool v6) {
  std::string out;
  for (const auto& c : cidrs) {
    if (c.base.v6 != v6) continue;
    out += (out.empty() ? "" : ", ") + c.ToString();
  }
  return out;
}

std::string Quoted(const std::string& s) { return "\"" + s + "\""; }

// The families a link's sets are kept for: each set's name suffix before its slot (IPv6
// sets end "6_"), and its element type.
std::vector<std::pair<const char*, const char*>> Families(bool v6) {
  std::vector<std::pair<const char*, const char*>> f = {{"", "ipv4_addr"}};
  if (v6) f.emplace_back("6_", "ipv6_addr");
  return f;
}

// What a table's comment can carry: nft takes 128 characters at most, and a quote or
// backslash would end or escape the string.
bool Commentable(const std::string& s) {
  return !s.empty() && s.size() <= 128 && s.find_first_of("\"\\\n") == std::string::npos;
}

// A table's owner as its comment says it: "<state folder> pid <pid>".
struct Owner {
  std::string folder;
  long pid = 0;
};

Owner ParseOwner(const std::string& comment) {
  Owner o;
  const auto at = comment.rfind(" pid ");
  if (at == std::string::npos) return o;
  o.folder = comment.substr(0, at);
  const std::string n = comment.substr(at + 5);
  if (n.empty() || n.size() > 9 || n.find_first_not_of("0123456789") != std::string::npos) return Owner{};
  o.pid = std::stol(n);
  return o;
}

// Whether a path is certainly gone: only "no such file" says so (a folder this process
// cannot see or reach, say in another mount namespace, is not gone).
bool Gone(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) != 0 && (errno == ENOENT || errno == ENOTDIR);
}

// The comment of a table as `nft list table` prints it (empty if it has none).
std::string CommentOf(const std::string& listing) {
  std::istringstream in(listing);
  std::string line;
  std::getline(in, line);  // "table inet NAME {"
  while (std::getline(in, line)) {
    const auto at = line.find_first_not_of(" \t");
    if (at == std::string::npos) continue;
    if (line.compare(at, 9, "comment \"") != 0) return "";  // the comment comes first
    const auto end = line.rfind('"');
    return end > at + 9 ? line.substr(at + 9, end - at - 9) : "";
  }
  return "";
}

}  // namespace

Firewall::Firewall(FirewallOptions o) : o_(std::move(o)) {
  MutexLock lock(mu_);
  ctx_ = nft_ctx_new(NFT_CTX_DEFAULT);
  if (ctx_) {
    nft_ctx_buffer_output(ctx_);
    nft_ctx_buffer_error(ctx_);
  }
}

Firewall::~Firewall() {
  MutexLock lock(mu_);
  if (ctx_) nft_ctx_free(ctx_);
}

Status Firewall::Run(const std::string& cmds) {
  if (!ctx_) return MakeError(Code::kInternal, "libnftables: cannot make a context");
  if (nft_run_cmd_from_buffer(ctx_, cmds.c_str()) != 0) {
    std::string err = nft_ctx_get_error_buffer(ctx_);
    while (!err.empty() && (err.back() == '\n' || err.back() == ' ')) err.pop_back();
    return MakeError(Code::kInternal, "nftables: " + err.substr(0, 2000));
  }
  return OkStatus();
}

Result<std::string> Firewall::Output(const std::string& cmds) {
  SBX_RETURN_IF_ERROR(Run(cmds));
  return std::string(nft_ctx_get_output_buffer(ctx_));
}

// A link's chain `sN` (its outbound traffic) and sets: allowN and denyN (the rules'
// CIDRs), learnedN and refusedN (addresses the resolver answered for permitted and for
// denied names, each with a timeout); with IPv6, the same sets for it (allow6_N, ...).
std::string Firewall::LinkCommands(const LinkRules& l) const {
  const std::string t = "inet " + o_.table + " ";
  const std::string n = std::to_string(l.slot);
  const std::string chain = t + "s" + n;
  const bool v6 = o_.subnet6 && l.sandbox6;
  std::ostringstream c;
  c << "add chain " << chain << "\n"
    << "flush chain " << chain << "\n";
  for (const auto& [fam, type] : Families(v6)) {
    for (const char* set : {"allow", "deny"}) {
      c << "add set " << t << set << fam << n << " { type " << type << "; flags interval; auto-merge; }\n"
        << "flush set " << t << set << fam << n << "\n";
    }
    for (const char* set : {"learned", "refused"}) {
      c << "add set " << t << set << fam << n << " { type " << type << "; flags timeout; }\n"
        << "flush set " << t << set << fam << n << "\n";
    }
    const bool is6 = *fam != '\0';
    if (auto e = Elements(l.rules.allow_cidrs, is6); !e.empty()) c << "add element " << t << "allow" << fam << n << " { " << e << " }\n";
    if (auto e = Elements(l.rules.deny_cidrs, is6); !e.empty()) c << "add element " << t << "deny" << fam << n << " { " << e << " }\n";
  }
  auto rule = [&](const std::string& r) { c << "add rule " << chain << " " << r << "\n"; };
  // A destination check in each family the link has: `set` names a set of the link's
  // ("deny") or, starting with '@', one of the table's ("@closed").
  auto both = [&](const std::string& set, const std::string& verdict) {
    const bool own = set[0] != '@';
    rule("ip daddr @" + (own ? set + n : set.substr(1)) + " " + verdict);
    if (v6) rule("ip6 daddr @" + (own ? set + "6_" + n : set.substr(1) + "6") + " " + verdict);
  };
  // Its own source addresses only (no IPv6 at all on a link without it).
  rule("ip saddr != " + l.sandbox.ToString() + " drop");
  rule(v6 ? "ip6 saddr != " + l.sandbox6->ToString() + " drop" : "meta nfproto ipv6 drop");
  // The type's limit each way, policed by a token bucket that holds one second at that
  // rate (nftables' own): a burst passes at full speed, a sustained stream at the rate.
  const std::string limit = "limit rate over " + std::to_string(int64_t{l.mbps} * 125000) + " bytes/second drop";
  if (l.mbps > 0) rule(limit);
  rule("ct state established,related accept");
  if (l.rules.mode != "outbound") {
    rule("goto refuse");
  } else {
    both("@closed", "goto refuse");
    // Other sandboxes, whatever `allow` says.
    rule("ip daddr " + o_.subnet.ToString() + " goto refuse");
    if (v6) rule("ip6 daddr " + o_.subnet6->ToString() + " goto refuse");
    both("deny", "goto refuse");
    both("refused", "goto refuse");
    if (o_.max_conns > 0) rule("ct state new ct count over " + std::to_string(o_.max_conns) + " goto refuse");
    if (o_.conn_rate > 0)
      rule("ct state new limit rate over " + std::to_string(o_.conn_rate) + "/second burst " +
           std::to_string(2 * o_.conn_rate) + " packets goto refuse");
    if (ct_timeouts_) rule(std::string("ct state new ct timeout set \"") + kClosedPolicy + "\"");
    both("allow", "accept");
    both("@private", "goto refuse");
    if (l.rules.has_allow()) {
      both("learned", "accept");
      rule("goto refuse");
    } else {
      rule("accept");
    }
  }
  c << "add element " << t << "links { " << Quoted(l.host_if) << " }\n"
    << "add element " << t << "sources { " << Quoted(l.host_if) << " . " << l.sandbox.ToString() << " }\n";
  if (v6) c << "add element " << t << "sources6 { " << Quoted(l.host_if) << " . " << l.sandbox6->ToString() << " }\n";
  c << "add element " << t << "marks { " << Quoted(l.host_if) << " : " << (o_.mark_base | static_cast<uint32_t>(l.slot))
    << " }\n"
    << "add element " << t << "out { " << Quoted(l.host_if) << " : jump s" << n << " }\n";
  if (l.mbps > 0) {
    // What comes back to it, limited the same.
    c << "add chain " << t << "d" << n << "\nflush chain " << t << "d" << n << "\n"
      << "add rule " << t << "d" << n << " " << limit << "\n"
      << "add element " << t << "in { " << Quoted(l.host_if) << " : jump d" << n << " }\n";
  }
  return c.str();
}

std::string Firewall::RemoveCommands(int slot, const std::string& host_if, const Address& sandbox,
                                     const std::optional<Address>& sandbox6, bool limited) const {
  const std::string t = "inet " + o_.table + " ";
  const std::string n = std::to_string(slot);
  const bool v6 = o_.subnet6 && sandbox6;
  std::ostringstream c;
  c << "delete element " << t << "out { " << Quoted(host_if) << " }\n"
    << "delete element " << t << "links { " << Quoted(host_if) << " }\n"
    << "delete element " << t << "sources { " << Quoted(host_if) << " . " << sandbox.ToString() << " }\n"
    << "delete element " << t << "marks { " << Quoted(host_if) << " }\n";
  if (v6) c << "delete element " << t << "sources6 { " << Quoted(host_if) << " . " << sandbox6->ToString() << " }\n";
  if (limited)
    c << "delete element " << t << "in { " << Quoted(host_if) << " }\nflush chain " << t << "d" << n
      << "\ndelete chain " << t << "d" << n << "\n";
  c << "flush chain " << t << "s" << n << "\ndelete chain " << t << "s" << n << "\n";
  for (const auto& [fam, type] : Families(v6))
    for (const char* set : {"allow", "deny", "learned", "refused"}) c << "delete set " << t << set << fam << n << "\n";
  return c.str();
}

std::string Firewall::KeptAnswers(const std::vector<LinkRules>& links) const {
  // The table's learned and refused sets as they are now (a JSON listing; nothing when
  // there is no table yet), for the slots still to be installed.
  std::set<std::string> wanted;
  for (const auto& l : links)
    for (const auto& [fam, type] : Families(o_.subnet6 && l.sandbox6))
      for (const char* set : {"learned", "refused"}) wanted.insert(set + std::string(fam) + std::to_string(l.slot));
  // A context of its own for JSON (switching the shared one's output to JSON does not
  // always take once it has listed in text).
  nft_ctx* json_ctx = nft_ctx_new(NFT_CTX_DEFAULT);
  if (!json_ctx) return "";
  nft_ctx_buffer_output(json_ctx);
  nft_ctx_buffer_error(json_ctx);
  nft_ctx_output_set_flags(json_ctx, NFT_CTX_OUTPUT_JSON);
  const std::string cmd = "list table inet " + o_.table + "\n";
  std::string listing;
  if (nft_run_cmd_from_buffer(json_ctx, cmd.c_str()) == 0) listing = nft_ctx_get_output_buffer(json_ctx);
  nft_ctx_free(json_ctx);
  const auto j = nlohmann::json::parse(listing, nullptr, false);
  if (!j.is_object() || !j.contains("nftables") || !j["nftables"].is_array()) return "";
  std::ostringstream c;
  for (const auto& o : j["nftables"]) {
    if (!o.is_object() || !o.contains("set") || !o["set"].is_object()) continue;
    const auto& set = o["set"];
    const std::string name = set.value("name", "");
    if (!wanted.count(name) || !set.contains("elem") || !set["elem"].is_array()) continue;
    std::string elems;
    for (const auto& e : set["elem"]) {
      if (!e.is_object() || !e.contains("elem") || !e["elem"].is_object()) continue;
      const auto& el = e["elem"];
      if (!el.contains("val") || !el["val"].is_string() || !el.contains("expires") || !el["expires"].is_number_integer())
        continue;
      auto a = Address::Parse(el["val"].get<std::string>());
      const int64_t left = el["expires"].get<int64_t>();
      if (!a || left <= 0) continue;
      elems += (elems.empty() ? "" : ", ") + a->ToString() + " timeout " + std::to_string(left) + "s";
    }
    if (!elems.empty()) c << "add element inet " << o_.table << " " << name << " { " << elems << " }\n";
  }
  return c.str();
}

Status Firewall::Install(const std::vector<LinkRules>& links) {
  const std::string t = "inet " + o_.table;
  const std::string subnet = o_.subnet.ToString();
  const std::string port = std::to_string(o_.resolver_port);
  const std::string tcp_port = std::to_string(o_.resolver_tcp_port);
  // The host's neighbours count as private (AddHostNetworks): what its own networks hold
  // is reached only through an `allow` CIDR.
  const std::vector<Cidr>& private_ranges = PrivateRanges();
  std::ostringstream c;
  // Its comment names its owner, for another sbxd to tell an orphan (DropOrphans).
  const std::string owner = o_.owner + " pid " + std::to_string(::getpid());
  c << "add table " << t << "\ndelete table " << t << "\nadd table " << t;
  if (Commentable(owner)) c << " { comment " << Quoted(owner) << "; }";
  c << "\n";
  {
    MutexLock lock(mu_);
    ct_timeouts_ = ProbeCtTimeouts();
  }
  if (ct_timeouts_)
    c << "add ct timeout " << t << " " << kClosedPolicy << " { protocol tcp; l3proto inet; policy = { time_wait: "
      << kClosedSeconds << ", close: " << kClosedSeconds << " }; }\n";
  c << "add set " << t << " links { type ifname; }\n"
    << "add map " << t << " out { type ifname : verdict; }\n"
    << "add map " << t << " in { type ifname : verdict; }\n"
    << "add map " << t << " marks { type ifname : mark; }\n"
    << "add set " << t << " sources { type ifname . ipv4_addr; }\n"
    << "add set " << t << " dns { type ifname; flags dynamic; size 65535; }\n"
    << "add set " << t << " dnstcp { type ifname; flags dynamic; size 65535; }\n"
    << "add set " << t << " closed { type ipv4_addr; flags interval; auto-merge; elements = { "
    << Elements(ClosedRanges(), false) << " } }\n"
    << "add set " << t << " private { type ipv4_addr; flags interval; auto-merge; elements = { "
    << Elements(private_ranges, false) << " } }\n";
  if (o_.subnet6)
    c << "add set " << t << " sources6 { type ifname . ipv6_addr; }\n"
      << "add set " << t << " closed6 { type ipv6_addr; flags interval; auto-merge; elements = { "
      << Elements(ClosedRanges(), true) << " } }\n"
      << "add set " << t << " private6 { type ipv6_addr; flags interval; auto-merge; elements = { "
      << Elements(private_ranges, true) << " } }\n";
  c
    << "add chain " << t << " refuse\n"
    << "add rule " << t << " refuse meta l4proto tcp reject with tcp reset\n"
    << "add rule " << t << " refuse reject with icmpx type admin-prohibited\n"
    // Forwarded: a sandbox's traffic goes through its chain; nothing enters a sandbox
    // that it did not open.
    << "add chain " << t << " forward { type filter hook forward priority filter; policy accept; }\n"
    // Into a sandbox first (an `accept` in a sandbox's chain ends the walk): only what
    // it opened comes in, never a new connection, from another sandbox or anywhere.
    << "add rule " << t << " forward oifname vmap @in\n"
    << "add rule " << t << " forward oifname @links ct state established,related accept\n"
    << "add rule " << t << " forward oifname @links goto refuse\n"
    << "add rule " << t << " forward iifname vmap @out\n"
    << "add rule " << t << " forward iifname @links drop\n"
    // A link of this sbxd's that has no rules (should one ever exist) passes nothing.
    << "add rule " << t << " forward iifname " << Quoted(o_.link_prefix + "*") << " drop\n";
  // Any sbxd's links ("sx*") pass: each sbxd's own table judges them.
  if (o_.forward_only_sandboxes)
    c << "add rule " << t << " forward meta nfproto ipv4 iifname != \"sx*\" oifname != \"sx*\" drop\n";
  if (o_.forward_only_sandboxes6)
    c << "add rule " << t << " forward meta nfproto ipv6 iifname != \"sx*\" oifname != \"sx*\" drop\n";
  // IPv6 neighbour discovery between a link's two ends (hop limit 255: never routed).
  const std::string nd = "icmpv6 type { nd-neighbor-solicit, nd-neighbor-advert } ip6 hoplimit 255 accept\n";
  // A packet from a link with a source address not its own goes before connection
  // tracking sees it: as the reply direction of another sandbox's connection it would
  // otherwise be un-NATed to that sandbox and let in as "established" (IPv6 has no
  // rp_filter, and IPv4's is loosened by a host's all.rp_filter = 2).
  c << "add chain " << t << " early { type filter hook prerouting priority raw; policy accept; }\n"
    << "add rule " << t << " early iifname @links iifname . ip saddr != @sources drop\n";
  if (o_.subnet6)
    c << "add rule " << t << " early iifname @links ip6 saddr fe80::/10 " << nd
      << "add rule " << t << " early iifname @links iifname . ip6 saddr != @sources6 drop\n";
  else
    c << "add rule " << t << " early iifname @links meta nfproto ipv6 drop\n";
  // To the host: the resolver's ports only, and those only from sandboxes.
  c << "add chain " << t << " input { type filter hook input priority filter; policy accept; }\n"
    // Its own source address only (whatever the host's rp_filter), at most kDnsConns
    // queries tracked at once per link over UDP, kDnsTcpConns connections over TCP.
    << "add rule " << t << " input iifname @links iifname . ip saddr != @sources drop\n";
  if (o_.subnet6)
    c << "add rule " << t << " input iifname @links " << nd
      << "add rule " << t << " input iifname @links iifname . ip6 saddr != @sources6 drop\n";
  c
    // (Over IPv4 only: the resolver listens there, and the same ports over IPv6 are
    // whoever's on the host.)
    << "add rule " << t << " input iifname @links meta nfproto ipv4 udp dport " << port
    << " ct state new add @dns { iifname ct count over " << kDnsConns << " } goto refuse\n"
    << "add rule " << t << " input iifname @links meta nfproto ipv4 udp dport " << port << " accept\n"
    << "add rule " << t << " input iifname @links meta nfproto ipv4 tcp dport " << tcp_port
    << " ct state new add @dnstcp { iifname ct count over " << kDnsTcpConns << " } goto refuse\n"
    << "add rule " << t << " input iifname @links meta nfproto ipv4 tcp dport " << tcp_port << " accept\n"
    << "add rule " << t << " input iifname @links goto refuse\n"
    << "add rule " << t << " input iifname " << Quoted(o_.link_prefix + "*") << " goto refuse\n"
    // The resolver's UDP port is sbxd's alone (bound without SO_REUSEADDR), and so is
    // its TCP port: from anywhere else they are closed. The UDP port's number over TCP
    // is not sbxd's: a host program listening there (another sbxd's API, say) must be
    // reachable.
    << "add rule " << t << " input udp dport " << port << " drop\n"
    << "add rule " << t << " input tcp dport " << tcp_port << " drop\n"
    // Nothing from the host itself enters a sandbox but answers (the resolver's).
    << "add chain " << t << " output { type filter hook output priority filter; policy accept; }\n"
    << "add rule " << t << " output oifname @links ct state established,related accept\n";
  // Neighbour discovery; other multicast (the host's own listener reports) goes nowhere.
  if (o_.subnet6)
    c << "add rule " << t << " output oifname @links " << nd
      << "add rule " << t << " output oifname @links ip6 daddr ff00::/8 drop\n";
  c
    << "add rule " << t << " output oifname @links goto refuse\n"
    << "add rule " << t << " output oifname " << Quoted(o_.link_prefix + "*") << " goto refuse\n"
    // Every DNS query of a sandbox goes to the resolver, whatever server it names, over
    // UDP or TCP.
    << "add chain " << t << " prerouting { type nat hook prerouting priority dstnat; policy accept; }\n"
    // A link's connections (out, or to the resolver) carry its mark, so that they can be
    // forgotten when it goes (a nat chain sees the first packet of each).
    << "add rule " << t << " prerouting iifname @links ct mark set iifname map @marks\n"
    << "add rule " << t << " prerouting iifname @links udp dport 53 redirect to :" << port << "\n"
    << "add rule " << t << " prerouting iifname @links tcp dport 53 redirect to :" << tcp_port << "\n"
    << "add chain " << t << " postrouting { type nat hook postrouting priority srcnat; policy accept; }\n"
    << "add rule " << t << " postrouting ip saddr " << subnet << " oifname != @links masquerade\n";
  if (o_.subnet6)
    c << "add rule " << t << " postrouting ip6 saddr " << o_.subnet6->ToString() << " oifname != @links masquerade\n";
  for (const auto& l : links) c << LinkCommands(l);
  MutexLock lock(mu_);
  // What the resolver taught an earlier table stays for its time left: a sandbox that
  // keeps a name's addresses (its own cache, an open pool) reaches them across a restart.
  c << KeptAnswers(links);
  Status st = Run(c.str());
  if (!st.ok() && Commentable(owner)) {
    // An nftables without table comments (before 0.9.7): the same without it. The table
    // is then never taken for an orphan.
    std::string plain = c.str();
    plain.replace(plain.find(" { comment "), plain.find("; }\n") + 3 - plain.find(" { comment "), "");
    if (Run(plain).ok()) return OkStatus();
  }
  return st;
}

bool Firewall::ProbeCtTimeouts() {
  const std::string probe = "inet " + o_.table + "_probe";
  const bool ok = Run("add table " + probe + "\nadd ct timeout " + probe + " p { protocol tcp; l3proto inet; policy = { time_wait: " +
                      std::to_string(kClosedSeconds) + " }; }\n")
                      .ok();
  (void)Run("delete table " + probe + "\n");
  if (!ok) SBX_LOG(kWarn) << "this kernel has no conntrack timeout policies: sandboxes' closed connections stay in "
                             "its conntrack table for its own timeouts (only --net-conn-rate bounds them)";
  return ok;
}

Status Firewall::InstallIfAbsent() {
  {
    MutexLock lock(mu_);
    if (Run("list table inet " + o_.table + "\n").ok()) {
      // An earlier sbxd's table: its links keep their rules, and new links use its
      // timeout policy where it made one.
      ct_timeouts_ = Run("list ct timeout inet " + o_.table + " " + kClosedPolicy + "\n").ok();
      return OkStatus();
    }
  }
  return Install({});
}

Status Firewall::Apply(const LinkRules& l) {
  MutexLock lock(mu_);
  return Run(LinkCommands(l));
}

Status Firewall::Remove(int slot, const std::string& host_if, const Address& sandbox,
                        const std::optional<Address>& sandbox6, bool limited) {
  MutexLock lock(mu_);
  return Run(RemoveCommands(slot, host_if, sandbox, sandbox6, limited));
}

Status Firewall::Learn(int slot, const std::vector<std::pair<Address, uint32_t>>& addrs, bool deny, uint32_t min_ttl) {
  std::string cmds;
  for (const bool v6 : {false, true}) {
    if (v6 && !o_.subnet6) continue;  // no IPv6 packet of a sandbox's passes anyway
    const std::string set = "inet " + o_.table + " " + (deny ? "refused" : "learned") + (v6 ? "6_" : "") +
                            std::to_string(slot);
    std::map<std::string, uint32_t> ttls;  // one element per address, the longest TTL
    for (const auto& [a, ttl] : addrs)
      if (a.v6 == v6) ttls[a.ToString()] = std::max({ttls[a.ToString()], ttl, min_ttl});
    if (ttls.empty()) continue;
    std::string plain, timed;
    for (const auto& [a, ttl] : ttls) {
      plain += (plain.empty() ? "" : ", ") + a;
      timed += (timed.empty() ? "" : ", ") + a + " timeout " + std::to_string(ttl) + "s";
    }
    // An element already there keeps its old timeout on `add`: delete and add it again.
    cmds += "add element " + set + " { " + plain + " }\ndelete element " + set + " { " + plain + " }\nadd element " +
            set + " { " + timed + " }\n";
  }
  if (cmds.empty()) return OkStatus();
  MutexLock lock(mu_);
  return Run(cmds);
}

Result<std::vector<std::string>> Firewall::DropOrphans() {
  MutexLock lock(mu_);
  SBX_ASSIGN_OR_RETURN(std::string tables, Output("list tables inet\n"));
  std::vector<std::string> links;
  if (auto l = fs::ListDir("/sys/class/net"); l.ok()) links = *l;
  std::vector<std::string> dropped;
  std::istringstream in(tables);
  std::string line;
  while (std::getline(in, line)) {
    const std::string head = "table inet sbx_";
    if (line.rfind(head, 0) != 0) continue;
    const std::string name = line.substr(head.size() - 4);
    if (name == o_.table || name.size() != 9) continue;
    auto listing = Output("list table inet " + name + "\n");
    if (!listing.ok()) continue;  // gone meanwhile
    const Owner owner = ParseOwner(CommentOf(*listing));
    if (owner.folder.empty() || owner.folder[0] != '/' || !Gone(owner.folder)) continue;
    // Its sbxd still runs (in a mount namespace of its own, say): not an orphan. (A pid
    // reused since only delays the drop.)
    if (owner.pid > 0 && !Gone("/proc/" + std::to_string(owner.pid))) continue;
    const std::string prefix = "sx" + name.substr(4) + "-";
    if (std::any_of(links.begin(), links.end(), [&](const std::string& l) { return l.rfind(prefix, 0) == 0; }))
      continue;
    if (Run("delete table inet " + name + "\n").ok()) dropped.push_back(name);
  }
  return dropped;
}

Status Firewall::Drop() {
  MutexLock lock(mu_);
  return Run("add table inet " + o_.table + "\ndelete table inet " + o_.table + "\n");
}

}  // namespace sbx::net
