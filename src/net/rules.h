// A sandbox's network rules (`network: {mode, allow, deny}` of the API) and the address
// and name matching they need. Pure: no I/O, shared by the firewall and the resolver.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/result.h"

namespace sbx::net {

// An IPv4 or IPv6 address, network byte order in `bytes` (the first 4 for IPv4).
struct Address {
  bool v6 = false;
  std::array<uint8_t, 16> bytes{};
  static std::optional<Address> Parse(const std::string& text);
  static Address V4(uint32_t host_order);
  uint32_t v4() const;  // host byte order (IPv4 only)
  std::string ToString() const;
  bool operator==(const Address& o) const { return v6 == o.v6 && bytes == o.bytes; }
};

struct Cidr {
  Address base;  // its host bits cleared
  int prefix = 0;
  // "10.0.0.0/8", "2001:db8::/32", or a bare address (a /32 or /128).
  static std::optional<Cidr> Parse(const std::string& text);
  bool Contains(const Address& a) const;
  std::string ToString() const;
};

// A domain pattern: "example.com" (that name only) or "*.example.com" (any name below it,
// not example.com itself). Lower case, no trailing dot.
struct NamePattern {
  std::string suffix;  // "example.com"
  bool wildcard = false;
  static std::optional<NamePattern> Parse(const std::string& text);
  bool Matches(const std::string& name) const;  // `name` lower case, no trailing dot
  std::string ToString() const { return wildcard ? "*." + suffix : suffix; }
};

struct Rules {
  std::string mode = "outbound";  // "none" or "outbound"
  std::vector<Cidr> allow_cidrs, deny_cidrs;
  std::vector<NamePattern> allow_names, deny_names;
  bool has_allow() const { return !allow_cidrs.empty() || !allow_names.empty(); }

  // What the API takes: {"mode": ..., "allow": [...], "deny": [...]}; a missing mode is
  // `default_mode`. kInvalidArgument names the entry at fault.
  static Result<Rules> FromJson(const nlohmann::json& j, const std::string& default_mode);
  nlohmann::json ToJson() const;  // the API's shape, entries as given back normalized

  enum class Verdict { kAllow, kDeny };
  // Whether a name may be resolved: deny wins over allow; with an allow list, only what
  // it names (a name or a pattern) is allowed.
  Verdict ForName(const std::string& name) const;
  // Whether a direct connection to `a` is allowed by the CIDRs and the walls every sandbox
  // has (private, loopback, link-local, ...), ignoring names: kAllow means always; kDeny
  // means never; nullopt means only if a permitted name resolved to it (allow-list mode).
  std::optional<Verdict> ForAddress(const Address& a) const;
};

// The ranges no sandbox ever reaches, whatever its rules: loopback, link-local (cloud
// metadata; Azure's 168.63.129.16 too), multicast, unspecified and reserved.
const std::vector<Cidr>& ClosedRanges();
// The ranges a sandbox reaches only when an `allow` CIDR names them: private and shared
// address space (10/8, 172.16/12, 192.168/16, 100.64/10, fc00::/7, ...), and the host's
// own networks once AddHostNetworks has named them. The firewall and the resolver's
// rebinding check both judge by these.
const std::vector<Cidr>& PrivateRanges();
// The host's on-link networks (a VPC's other machines on global IPv6 addresses, say)
// count as private. Called once at start, before any sandbox's rules are judged.
void AddHostNetworks(const std::vector<Cidr>& networks);

// A name as it appears in DNS: lower case, no trailing dot; nullopt if it is not a name.
std::optional<std::string> NormalizeName(const std::string& text);

}  // namespace sbx::net
