// sbxd's DNS resolver for sandboxes: every query a sandbox sends (to any address, port 53;
// the firewall redirects it here) is answered according to that sandbox's rules, and the
// addresses answered are taught to the firewall. A thread of its own with a poll loop:
// each forwarded query has its own socket to the upstream resolver (a fresh port and id).
//
// - A name the rules deny: REFUSED. If a `deny` entry names it, the resolver still asks
//   upstream and blocks the addresses answered for the answer's TTL.
// - A permitted name: the upstream's answer, unless one of its addresses is one the
//   sandbox may not reach (a private or loopback address for a public name: rebinding),
//   which makes it REFUSED. With an allow list, the answered addresses become reachable
//   for the answer's TTL (at least a minute).
// Over UDP (a truncated answer is passed on as is) and over TCP (RFC 7766: a connection
// may carry several queries; each is asked upstream over TCP, so that an answer too big
// for UDP arrives whole). TCP connections are served on threads of their own, at most
// kMaxTcpConnections at once and kMaxTcpPerSandbox of one sandbox, each for 30 s at most.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "base/result.h"
#include "base/sync.h"
#include "base/unique_fd.h"
#include "net/dns.h"
#include "net/rules.h"

namespace sbx::net {

class Resolver {
 public:
  struct Client {
    int slot;
    Rules rules;
  };
  // Which sandbox sent from this address, and its rules (nullopt: not a sandbox's).
  using Lookup = std::function<std::optional<Client>(const Address&)>;
  // The firewall's Learn.
  using Learn = std::function<void(int slot, const std::vector<std::pair<Address, uint32_t>>&, bool deny)>;

  Resolver(Address upstream, uint16_t upstream_port, Lookup lookup, Learn learn);
  ~Resolver();
  Resolver(const Resolver&) = delete;
  Resolver& operator=(const Resolver&) = delete;

  // At most `per_second` queries a second (with bursts of twice that) from one sandbox
  // are asked upstream, over UDP and TCP together; past it a query is REFUSED at once and
  // counted (Stats::rate_limited). 0: no limit. Called before Start.
  void set_rate(int per_second) { rate_ = per_second; }
  // Binds UDP `udp_port` and TCP `tcp_port` on every IPv4 address (0: any free port) and
  // starts; returns the two ports.
  Result<std::pair<uint16_t, uint16_t>> Start(uint16_t udp_port, uint16_t tcp_port);
  // Stops; TCP connections being served end at once.
  void Stop();

  static constexpr int kMaxTcpConnections = 64;
  static constexpr int kMaxTcpPerSandbox = 8;

  struct Stats {
    std::atomic<uint64_t> queries{0}, refused{0}, forwarded{0}, rebinding{0}, rate_limited{0};
  };
  const Stats& stats() const { return stats_; }

 private:
  void Loop();

  // What a query from `client` gets: a refusal at once (the message), or nothing: it is
  // asked upstream, and `*deny_only` says the answer only teaches the firewall a denied
  // name's addresses (the sandbox is refused then).
  std::optional<std::string> Decide(const std::string& query, const dns::Question& q, const Client& client,
                                    bool* deny_only);
  // What the sandbox at `from` gets for the upstream's answer `msg` to its `query` (id
  // `id`), asked under `client`'s rules: the answer, or a refusal (its rules changed while
  // the query was out, a denied name, rebinding). Teaches the firewall what it must know.
  std::string Judge(const std::string& query, uint16_t id, std::string msg, dns::Answer answer,
                    const Client& client, bool deny_only, const Address& from);

  // Whether the sandbox in `slot` may ask upstream now (a token of its bucket taken).
  bool TakeToken(int slot);

  // TCP: the accepting thread, and one connection (on a thread of its own).
  void AcceptLoop();
  void ServeTcp(UniqueFd conn, Address peer);
  // Asks upstream over TCP; nullopt on a failure or past `deadline_ms`.
  std::optional<std::string> AskUpstreamTcp(const std::string& query, int64_t deadline_ms);

  Address upstream_;
  uint16_t upstream_port_;
  Lookup lookup_;
  Learn learn_;
  UniqueFd sock_, listener_;
  // Readable once Stop began: every thread of the resolver polls it.
  UniqueFd wake_r_, wake_w_;
  std::thread thread_, accept_thread_;
  Stats stats_;
  int rate_ = 0;
  struct Bucket {
    double tokens = 0;
    int64_t at_ms = 0;
  };
  Mutex rate_mu_;
  std::map<int, Bucket> buckets_ SBX_GUARDED_BY(rate_mu_);  // by sandbox slot
  // The TCP connections being served; shared with their threads, which outlive Stop's
  // wait by the few instructions after their count goes down.
  struct TcpCount {
    Mutex mu;
    CondVar idle;
    int active SBX_GUARDED_BY(mu) = 0;
    std::map<int, int> per_slot SBX_GUARDED_BY(mu);  // connections by sandbox slot
  };
  std::shared_ptr<TcpCount> tcp_ = std::make_shared<TcpCount>();
};

}  // namespace sbx::net
