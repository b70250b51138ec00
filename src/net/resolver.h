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
// UDP only: a query over TCP is refused by the host (a truncated answer is passed on as is).
#pragma once

#include <atomic>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "base/result.h"
#include "base/unique_fd.h"
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

  // Binds UDP `port` on every address (0: any free port) and starts; returns the port.
  Result<uint16_t> Start(uint16_t port);
  void Stop();

  struct Stats {
    std::atomic<uint64_t> queries{0}, refused{0}, forwarded{0}, rebinding{0};
  };
  const Stats& stats() const { return stats_; }

 private:
  void Loop();

  Address upstream_;
  uint16_t upstream_port_;
  Lookup lookup_;
  Learn learn_;
  UniqueFd sock_;
  UniqueFd wake_r_, wake_w_;
  std::thread thread_;
  Stats stats_;
};

}  // namespace sbx::net
