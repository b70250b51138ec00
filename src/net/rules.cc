#include "net/rules.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cctype>

namespace sbx::net {

using nlohmann::json;

std::optional<Address> Address::Parse(const std::string& text) {
  Address a;
  if (text.find(':') == std::string::npos) {
    if (::inet_pton(AF_INET, text.c_str(), a.bytes.data()) != 1) return std::nullopt;
    return a;
  }
  a.v6 = true;
  if (::inet_pton(AF_INET6, text.c_str(), a.bytes.data()) != 1) return std::nullopt;
  return a;
}

Address Address::V4(uint32_t host_order) {
  Address a;
  uint32_t n = htonl(host_order);
  std::copy_n(reinterpret_cast<const uint8_t*>(&n), 4, a.bytes.begin());
  return a;
}

uint32_t Address::v4() const {
  uint32_t n;
  std::copy_n(bytes.begin(), 4, reinterpret_cast<uint8_t*>(&n));
  return ntohl(n);
}

std::string Address::ToString() const {
  char buf[INET6_ADDRSTRLEN] = {};
  ::inet_ntop(v6 ? AF_INET6 : AF_INET, bytes.data(), buf, sizeof buf);
  return buf;
}

std::optional<Cidr> Cidr::Parse(const std::string& text) {
  size_t slash = text.find('/');
  auto a = Address::Parse(text.substr(0, slash));
  if (!a) return std::nullopt;
  const int max = a->v6 ? 128 : 32;
  int prefix = max;
  if (slash != std::string::npos) {
    std::string p = text.substr(slash + 1);
    if (p.empty() || p.size() > 3 || !std::all_of(p.begin(), p.end(), ::isdigit)) return std::nullopt;
    prefix = std::stoi(p);
    if (prefix > max) return std::nullopt;
  }
  Cidr c{*a, prefix};
  for (int bit = prefix; bit < max; ++bit) c.base.bytes[bit / 8] &= static_cast<uint8_t>(~(0x80 >> (bit % 8)));
  return c;
}

bool Cidr::Contains(const Address& a) const {
  if (a.v6 != base.v6) return false;
  for (int bit = 0; bit < prefix; ++bit) {
    uint8_t m = static_cast<uint8_t>(0x80 >> (bit % 8));
    if ((a.bytes[bit / 8] & m) != (base.bytes[bit / 8] & m)) return false;
  }
  return true;
}

std::string Cidr::ToString() const { return base.ToString() + "/" + std::to_string(prefix); }

std::optional<std::string> NormalizeName(const std::string& text) {
  std::string s = text;
  if (!s.empty() && s.back() == '.') s.pop_back();
  if (s.empty() || s.size() > 253) return std::nullopt;
  size_t label = 0;
  for (char& c : s) {
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (c == '.') {
      if (label == 0) return std::nullopt;
      label = 0;
      continue;
    }
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_')) return std::nullopt;
    if (++label > 63) return std::nullopt;
  }
  if (label == 0) return std::nullopt;
  return s;
}

std::optional<NamePattern> NamePattern::Parse(const std::string& text) {
  NamePattern p;
  std::string rest = text;
  if (rest.rfind("*.", 0) == 0) {
    p.wildcard = true;
    rest = rest.substr(2);
  }
  auto n = NormalizeName(rest);
  if (!n) return std::nullopt;
  p.suffix = *n;
  return p;
}

bool NamePattern::Matches(const std::string& name) const {
  if (!wildcard) return name == suffix;
  return name.size() > suffix.size() + 1 && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0 &&
         name[name.size() - suffix.size() - 1] == '.';
}

namespace {

std::vector<Cidr> ParseAll(std::initializer_list<const char*> texts) {
  std::vector<Cidr> out;
  for (const char* t : texts) out.push_back(*Cidr::Parse(t));
  return out;
}

}  // namespace

const std::vector<Cidr>& ClosedRanges() {
  // IPv6 also: the unspecified and loopback addresses within the deprecated
  // IPv4-compatible ::/96, mapped IPv4, link-local and the deprecated site-local fec0::/10.
  static const std::vector<Cidr> ranges =
      ParseAll({"0.0.0.0/8", "127.0.0.0/8", "169.254.0.0/16", "168.63.129.16/32", "224.0.0.0/4", "240.0.0.0/4",
                "::/96", "::ffff:0:0/96", "fe80::/10", "fec0::/10", "fd00:ec2::254/128", "ff00::/8"});
  return ranges;
}

namespace {

// Private and shared ranges; IPv6 also those that carry an IPv4 address inside them
// (NAT64, 6to4's 2002::/16 and Teredo's 2001::/32), which a relay could turn into a
// private one.
std::vector<Cidr>& PrivateStore() {
  static std::vector<Cidr> ranges = ParseAll({"10.0.0.0/8", "100.64.0.0/10", "172.16.0.0/12", "192.0.0.0/24",
                                              "192.168.0.0/16", "198.18.0.0/15", "64:ff9b::/96", "64:ff9b:1::/48",
                                              "2002::/16", "2001::/32", "fc00::/7"});
  return ranges;
}

}  // namespace

const std::vector<Cidr>& PrivateRanges() { return PrivateStore(); }

void AddHostNetworks(const std::vector<Cidr>& networks) {
  auto& ranges = PrivateStore();
  for (const auto& n : networks)
    if (std::find_if(ranges.begin(), ranges.end(), [&](const Cidr& c) { return c.ToString() == n.ToString(); }) ==
        ranges.end())
      ranges.push_back(n);
}

namespace {

Error Invalid(const std::string& msg) { return MakeError(Code::kInvalidArgument, msg); }

Status ParseList(const json& j, const char* field, std::vector<Cidr>* cidrs, std::vector<NamePattern>* names) {
  if (!j.contains(field) || j[field].is_null()) return OkStatus();
  const json& list = j[field];
  if (!list.is_array()) return Invalid(std::string("network.") + field + " must be a list of CIDRs and domain names");
  if (list.size() > 256) return Invalid(std::string("network.") + field + " holds at most 256 entries");
  for (const auto& e : list) {
    if (!e.is_string())
      return Invalid(std::string("network.") + field + " entries are strings (CIDRs or domain names)");
    const std::string s = e.get<std::string>();
    bool looks_like_address = s.find(':') != std::string::npos || s.find('/') != std::string::npos ||
                              (!s.empty() && std::isdigit(static_cast<unsigned char>(s.back())));
    if (looks_like_address) {
      auto c = Cidr::Parse(s);
      if (!c) return Invalid("network." + std::string(field) + ": \"" + s + "\" is not a CIDR (10.0.0.0/8, 2001:db8::/32)");
      cidrs->push_back(*c);
      continue;
    }
    auto n = NamePattern::Parse(s);
    if (!n)
      return Invalid("network." + std::string(field) + ": \"" + s +
                     "\" is neither a CIDR nor a domain name (example.com, *.example.com)");
    names->push_back(*n);
  }
  return OkStatus();
}

}  // namespace

Result<Rules> Rules::FromJson(const json& j, const std::string& default_mode) {
  Rules r;
  r.mode = default_mode;
  if (j.is_null()) return r;
  if (!j.is_object()) return Invalid("network must be an object");
  for (const auto& [k, v] : j.items())
    if (k != "mode" && k != "allow" && k != "deny") return Invalid("unknown field network." + k);
  if (j.contains("mode") && !j["mode"].is_null()) {
    if (!j["mode"].is_string()) return Invalid("network.mode must be \"none\" or \"outbound\"");
    r.mode = j["mode"].get<std::string>();
  }
  if (r.mode != "none" && r.mode != "outbound") return Invalid("network.mode must be \"none\" or \"outbound\"");
  SBX_RETURN_IF_ERROR(ParseList(j, "allow", &r.allow_cidrs, &r.allow_names));
  SBX_RETURN_IF_ERROR(ParseList(j, "deny", &r.deny_cidrs, &r.deny_names));
  return r;
}

json Rules::ToJson() const {
  json allow = json::array(), deny = json::array();
  for (const auto& c : allow_cidrs) allow.push_back(c.ToString());
  for (const auto& n : allow_names) allow.push_back(n.ToString());
  for (const auto& c : deny_cidrs) deny.push_back(c.ToString());
  for (const auto& n : deny_names) deny.push_back(n.ToString());
  return {{"mode", mode}, {"allow", allow}, {"deny", deny}};
}

Rules::Verdict Rules::ForName(const std::string& name) const {
  if (mode != "outbound") return Verdict::kDeny;
  for (const auto& p : deny_names)
    if (p.Matches(name)) return Verdict::kDeny;
  if (!has_allow()) return Verdict::kAllow;
  for (const auto& p : allow_names)
    if (p.Matches(name)) return Verdict::kAllow;
  return Verdict::kDeny;
}

std::optional<Rules::Verdict> Rules::ForAddress(const Address& a) const {
  if (mode != "outbound") return Verdict::kDeny;
  for (const auto& c : ClosedRanges())
    if (c.Contains(a)) return Verdict::kDeny;
  for (const auto& c : deny_cidrs)
    if (c.Contains(a)) return Verdict::kDeny;
  for (const auto& c : allow_cidrs)
    if (c.Contains(a)) return Verdict::kAllow;
  for (const auto& c : PrivateRanges())
    if (c.Contains(a)) return Verdict::kDeny;
  if (has_allow()) return std::nullopt;
  return Verdict::kAllow;
}

}  // namespace sbx::net
