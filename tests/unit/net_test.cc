// The network rules (net/rules.h) and the resolver's DNS parsing (net/dns.h): pure code.
#include <gtest/gtest.h>

#include "net/dns.h"
#include "net/network.h"
#include "net/rules.h"

namespace sbx::net {
namespace {

using nlohmann::json;

Rules Parse(const json& j) {
  auto r = Rules::FromJson(j, "outbound");
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
  return r.ok() ? *r : Rules{};
}

Address A(const char* s) { return *Address::Parse(s); }

TEST(NetRules, CidrsAndNames) {
  auto c = Cidr::Parse("10.1.2.3/8");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->ToString(), "10.0.0.0/8");
  EXPECT_TRUE(c->Contains(A("10.255.0.1")));
  EXPECT_FALSE(c->Contains(A("11.0.0.1")));
  EXPECT_FALSE(c->Contains(A("::1")));
  EXPECT_EQ(Cidr::Parse("2001:db8::1/32")->ToString(), "2001:db8::/32");
  EXPECT_EQ(Cidr::Parse("192.0.2.7")->prefix, 32);
  for (const char* bad : {"10.0.0.0/33", "300.1.2.3", "10.0.0.0/", "::/129", "1.2.3.4/x"}) EXPECT_FALSE(Cidr::Parse(bad)) << bad;

  auto w = NamePattern::Parse("*.GitHub.com.");
  ASSERT_TRUE(w);
  EXPECT_TRUE(w->Matches("api.github.com"));
  EXPECT_TRUE(w->Matches("a.b.github.com"));
  EXPECT_FALSE(w->Matches("github.com"));
  EXPECT_FALSE(w->Matches("evilgithub.com"));
  EXPECT_TRUE(NamePattern::Parse("pypi.org")->Matches("pypi.org"));
  EXPECT_FALSE(NamePattern::Parse("pypi.org")->Matches("files.pypi.org"));
  const std::string long_label(64, 'a');
  for (const std::string& bad : {std::string(), std::string("a..b"), std::string("*."), std::string("a b"),
                                 std::string("*x.com"), std::string("a.*.com"), long_label})
    EXPECT_FALSE(NamePattern::Parse(bad)) << bad;
}

TEST(NetRules, FromJsonRefusesWhatItCannotHonour) {
  for (const json& bad : {json{{"mode", "all"}}, json{{"allow", "x.com"}}, json{{"allow", {1}}},
                          json{{"deny", {"not a name"}}}, json{{"ports", {80}}}, json("outbound")}) {
    auto r = Rules::FromJson(bad, "outbound");
    ASSERT_FALSE(r.ok()) << bad.dump();
    EXPECT_EQ(r.error().code, Code::kInvalidArgument);
  }
  EXPECT_EQ(Parse(json()).mode, "outbound");
  EXPECT_EQ(Rules::FromJson(json::object(), "none")->mode, "none");
  auto r = Parse({{"allow", {"10.0.0.0/8", "*.x.org"}}, {"deny", {"bad.x.org"}}});
  EXPECT_EQ(r.ToJson(), (json{{"mode", "outbound"}, {"allow", {"10.0.0.0/8", "*.x.org"}}, {"deny", {"bad.x.org"}}}));
}

TEST(NetRules, VerdictsDenyWinsAndWallsStay) {
  using V = Rules::Verdict;
  auto open = Parse(json::object());
  EXPECT_EQ(open.ForName("anything.com"), V::kAllow);
  EXPECT_EQ(open.ForAddress(A("198.51.100.1")), V::kAllow);
  EXPECT_EQ(open.ForAddress(A("10.1.1.1")), V::kDeny);  // private
  EXPECT_EQ(open.ForAddress(A("169.254.169.254")), V::kDeny);
  EXPECT_EQ(open.ForAddress(A("127.0.0.1")), V::kDeny);

  auto listed = Parse({{"allow", {"*.x.org", "10.9.0.0/16", "169.254.0.0/16"}}, {"deny", {"bad.x.org", "10.9.9.0/24"}}});
  EXPECT_EQ(listed.ForName("a.x.org"), V::kAllow);
  EXPECT_EQ(listed.ForName("bad.x.org"), V::kDeny);  // deny wins
  EXPECT_EQ(listed.ForName("y.org"), V::kDeny);
  EXPECT_EQ(listed.ForAddress(A("10.9.1.1")), V::kAllow);  // a private range it names
  EXPECT_EQ(listed.ForAddress(A("10.9.9.1")), V::kDeny);   // deny wins
  EXPECT_EQ(listed.ForAddress(A("169.254.169.254")), V::kDeny);  // metadata: never
  EXPECT_FALSE(listed.ForAddress(A("198.51.100.1")).has_value());  // only if a permitted name resolved to it

  auto none = Parse({{"mode", "none"}});
  EXPECT_EQ(none.ForName("x.org"), V::kDeny);
  EXPECT_EQ(none.ForAddress(A("198.51.100.1")), V::kDeny);
}

TEST(NetRules, Ipv6RangesThatCarryOrStandForOthersAreWalled) {
  using V = Rules::Verdict;
  auto open = Parse(json::object());
  for (const char* a : {"::a00:1", "::7f00:1", "::", "::1", "fec0::1", "::ffff:10.0.0.1"})
    EXPECT_EQ(open.ForAddress(A(a)), V::kDeny) << a;  // closed: no allow opens them
  auto allowed = Parse(json{{"allow", {"::/0"}}});
  EXPECT_EQ(allowed.ForAddress(A("fec0::1")), V::kDeny);
  for (const char* a : {"2002:a00:1::1", "2001:0:4136:e378::1"}) {
    EXPECT_EQ(open.ForAddress(A(a)), V::kDeny) << a;  // 6to4 and Teredo: private unless allowed
    EXPECT_EQ(allowed.ForAddress(A(a)), V::kAllow) << a;
  }
  EXPECT_EQ(open.ForAddress(A("2001:db8:100::10")), V::kAllow);  // documentation space is not Teredo's
}

TEST(NetRules, TheHostsOwnNetworksArePrivateForEveryJudge) {
  using V = Rules::Verdict;
  auto open = Parse(json::object());
  EXPECT_EQ(open.ForAddress(A("192.0.2.77")), V::kAllow);
  AddHostNetworks({*Cidr::Parse("192.0.2.0/24")});
  AddHostNetworks({*Cidr::Parse("192.0.2.0/24")});  // once only
  EXPECT_EQ(open.ForAddress(A("192.0.2.77")), V::kDeny);  // the resolver's rebinding check sees it
  size_t n = 0;
  for (const auto& c : PrivateRanges()) n += c.ToString() == "192.0.2.0/24";
  EXPECT_EQ(n, 1u);  // and the firewall's private set holds it once
}

TEST(NetRules, UpstreamFlag) {
  auto u = ParseUpstream("198.51.100.53:5353");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->first.ToString(), "198.51.100.53");
  EXPECT_EQ(u->second, 5353);
  EXPECT_EQ(ParseUpstream("192.0.2.1")->second, 53);
  for (const char* bad : {"resolver", "192.0.2.1:0", "192.0.2.1:99999", "2001:db8::1"}) {
    auto r = ParseUpstream(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().code, Code::kInvalidArgument) << bad;
  }
}

TEST(NetRules, DefaultIpv6SubnetFollowsTheIpv4One) {
  // A unique local /64 carrying the IPv4 subnet's base: two sbxds with different IPv4
  // subnets never share one, and it lies in fc00::/7, which no sandbox reaches unasked.
  EXPECT_EQ(DefaultSubnet6(*Cidr::Parse("10.250.0.0/16")).ToString(), "fd5b:afa::/64");
  EXPECT_EQ(DefaultSubnet6(*Cidr::Parse("10.252.7.0/24")).ToString(), "fd5b:afc:700::/64");
  const Cidr six = DefaultSubnet6(*Cidr::Parse("192.168.3.0/24"));
  bool is_private = false;
  for (const auto& c : PrivateRanges()) is_private = is_private || c.Contains(six.base);
  EXPECT_TRUE(is_private);
}

std::string Query(const std::string& name, uint16_t id = 0x1234) {
  std::string q = {static_cast<char>(id >> 8), static_cast<char>(id & 0xff), 1, 0, 0, 1, 0, 0, 0, 0, 0, 0};
  size_t start = 0;
  while (start <= name.size()) {
    size_t dot = name.find('.', start);
    if (dot == std::string::npos) dot = name.size();
    q += static_cast<char>(dot - start);
    q += name.substr(start, dot - start);
    start = dot + 1;
  }
  q += std::string("\0\0\1\0\1", 5);
  return q;
}

TEST(NetDns, ParsesQueriesAndAnswers) {
  auto q = dns::ParseQuery(Query("Api.Example.COM"));
  ASSERT_TRUE(q);
  EXPECT_EQ(q->name, "api.example.com");
  EXPECT_EQ(q->type, dns::kTypeA);
  EXPECT_EQ(q->id, 0x1234);

  // An answer: the question, a CNAME by pointer, then an A record for it.
  std::string a = Query("api.example.com");
  a[2] = static_cast<char>(0x81);
  a[3] = static_cast<char>(0x80);
  a[7] = 2;
  a += std::string("\xc0\x0c\0\x05\0\x01\0\0\0\x3c\0\x02\xc0\x10", 14);         // CNAME -> example.com
  a += std::string("\xc0\x10\0\x01\0\x01\0\0\x01\x2c\0\x04\xc6\x33\x64\x0a", 16);  // A 198.51.100.10, TTL 300
  auto ans = dns::ParseAnswer(a);
  ASSERT_TRUE(ans);
  EXPECT_EQ(ans->question, "api.example.com");
  ASSERT_EQ(ans->addresses.size(), 1u);
  EXPECT_EQ(ans->addresses[0].first.ToString(), "198.51.100.10");
  EXPECT_EQ(ans->addresses[0].second, 300u);

  // A refusal keeps the id and the question.
  std::string r = dns::Refusal(Query("x.org", 0xbeef));
  EXPECT_EQ(static_cast<uint8_t>(r[0]), 0xbe);
  EXPECT_EQ(r[3] & 0x0f, dns::kRcodeRefused);
  EXPECT_TRUE(r[2] & 0x80);
  EXPECT_EQ(dns::ParseAnswer(r)->question, "x.org");
}

TEST(NetDns, RefusesMalformedMessages) {
  EXPECT_FALSE(dns::ParseQuery(""));
  EXPECT_FALSE(dns::ParseQuery(std::string(11, '\0')));
  std::string loop = Query("a.b");
  loop.replace(12, 1, "\xc0\x0c");  // a pointer to itself
  EXPECT_FALSE(dns::ParseQuery(loop));
  std::string forward = Query("a.b");
  forward.replace(12, 1, "\xc0\x20");  // a pointer forwards
  EXPECT_FALSE(dns::ParseQuery(forward));
  std::string cut = Query("abc.example");
  EXPECT_FALSE(dns::ParseQuery(cut.substr(0, 16)));
  std::string answer = Query("a.b");  // a query is not an answer
  EXPECT_FALSE(dns::ParseAnswer(answer));
  answer[2] = static_cast<char>(0x81);
  answer[7] = 1;  // one record announced, none there
  EXPECT_FALSE(dns::ParseAnswer(answer));
}

}  // namespace
}  // namespace sbx::net
