#include "net/resolver.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <vector>

#include "base/ids.h"
#include "base/log.h"
#include "net/dns.h"

namespace sbx::net {

namespace {

constexpr int kUpstreamTimeoutMs = 3000;
constexpr size_t kMaxInFlight = 1024;
constexpr int kMaxInFlightPerSandbox = 64;  // one sandbox cannot starve the others' lookups
constexpr uint32_t kMaxTtl = 3600;          // what an answer may keep reachable, at most

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct Pending {
  std::string query;        // as the sandbox sent it
  struct sockaddr_in from;  // the sandbox
  uint16_t id = 0;          // the sandbox's id
  uint16_t upstream_id = 0;  // the id sent upstream
  Resolver::Client client;
  bool deny_only = false;  // refused already: the answer only teaches the firewall
  int64_t deadline_ms = 0;
};

uint16_t RandomId() {
  std::string h = RandomHex(2);
  return static_cast<uint16_t>(std::stoul(h, nullptr, 16));
}

}  // namespace

Resolver::Resolver(Address upstream, uint16_t upstream_port, Lookup lookup, Learn learn)
    : upstream_(upstream), upstream_port_(upstream_port), lookup_(std::move(lookup)), learn_(std::move(learn)) {}

Resolver::~Resolver() { Stop(); }

Result<uint16_t> Resolver::Start(uint16_t port) {
  sock_ = UniqueFd(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!sock_.valid()) return ErrnoError("resolver socket");
  struct sockaddr_in sa = {};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  sa.sin_addr.s_addr = htonl(INADDR_ANY);
  if (::bind(sock_.get(), reinterpret_cast<struct sockaddr*>(&sa), sizeof sa) != 0)
    return ErrnoError("bind the resolver's port " + std::to_string(port));
  socklen_t len = sizeof sa;
  ::getsockname(sock_.get(), reinterpret_cast<struct sockaddr*>(&sa), &len);
  int p[2];
  if (::pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0) return ErrnoError("pipe");
  wake_r_ = UniqueFd(p[0]);
  wake_w_ = UniqueFd(p[1]);
  thread_ = std::thread([this] { Loop(); });
  return ntohs(sa.sin_port);
}

void Resolver::Stop() {
  if (!thread_.joinable()) return;
  char c = 0;
  (void)::write(wake_w_.get(), &c, 1);
  thread_.join();
}

void Resolver::Loop() {
  std::map<int, Pending> pending;  // by the upstream socket
  std::map<int, UniqueFd> sockets;
  struct sockaddr_in up = {};
  up.sin_family = AF_INET;
  up.sin_port = htons(upstream_port_);
  std::copy_n(upstream_.bytes.begin(), 4, reinterpret_cast<uint8_t*>(&up.sin_addr.s_addr));
  auto finish = [&](int fd) {
    pending.erase(fd);
    sockets.erase(fd);
  };
  auto reply = [&](const std::string& msg, const struct sockaddr_in& to) {
    (void)::sendto(sock_.get(), msg.data(), msg.size(), 0, reinterpret_cast<const struct sockaddr*>(&to), sizeof to);
  };
  std::vector<char> big(65536);  // answers with EDNS can exceed 4 KiB
  char* buf = big.data();
  std::map<int, int> in_flight;  // by slot
  auto done = [&](int fd) {
    if (auto it = pending.find(fd); it != pending.end() && --in_flight[it->second.client.slot] <= 0)
      in_flight.erase(it->second.client.slot);
    finish(fd);
  };
  for (;;) {
    std::vector<struct pollfd> fds = {{wake_r_.get(), POLLIN, 0}, {sock_.get(), POLLIN, 0}};
    for (const auto& [fd, p] : pending) fds.push_back({fd, POLLIN, 0});
    int64_t now = NowMs(), wait = 1000;
    for (const auto& [fd, p] : pending) wait = std::min(wait, std::max<int64_t>(0, p.deadline_ms - now));
    int n = ::poll(fds.data(), fds.size(), static_cast<int>(wait));
    if (n < 0 && errno != EINTR) {
      SBX_LOG(kError) << "resolver: poll: " << std::strerror(errno);
      return;
    }
    if (fds[0].revents) return;
    now = NowMs();
    for (size_t i = 2; i < fds.size(); ++i) {
      const int fd = fds[i].fd;
      auto it = pending.find(fd);
      if (it == pending.end()) continue;
      if (!(fds[i].revents & POLLIN)) {
        if (it->second.deadline_ms <= now) {
          if (it->second.deny_only) reply(dns::Refusal(it->second.query), it->second.from);
          done(fd);  // else the sandbox asks again
        }
        continue;
      }
      ssize_t got = ::recv(fd, buf, big.size(), 0);
      if (got <= 0) {
        if (got < 0 && (errno == EAGAIN || errno == EINTR)) continue;
        done(fd);
        continue;
      }
      std::string msg(buf, static_cast<size_t>(got));
      Pending& p = it->second;
      auto q = dns::ParseQuery(p.query);
      auto a = dns::ParseAnswer(msg);
      if (!a || !q || a->id != p.upstream_id || a->question != q->name) continue;  // not the answer to this query: keep waiting
      // The rules now: they (or the sandbox at that address) may have changed while the
      // query was out. An answer under other rules is refused; the sandbox asks again.
      auto now_client = lookup_(Address::V4(ntohl(p.from.sin_addr.s_addr)));
      if (!now_client || now_client->slot != p.client.slot ||
          now_client->rules.ToJson() != p.client.rules.ToJson()) {
        reply(dns::Refusal(p.query), p.from);
        done(fd);
        continue;
      }
      const Rules& rules = p.client.rules;
      for (auto& [addr, ttl] : a->addresses) ttl = std::min(ttl, kMaxTtl);
      if (p.deny_only) {
        learn_(p.client.slot, a->addresses, true);
        ++stats_.refused;
        reply(dns::Refusal(p.query), p.from);
        done(fd);
        continue;
      }
      bool rebinding = false;
      std::vector<std::pair<Address, uint32_t>> learn;
      for (const auto& [addr, ttl] : a->addresses) {
        auto v = rules.ForAddress(addr);
        if (v && *v == Rules::Verdict::kDeny) rebinding = true;
        else learn.emplace_back(addr, ttl);
      }
      if (rebinding) {
        ++stats_.rebinding;
        ++stats_.refused;
        reply(dns::Refusal(p.query), p.from);
        done(fd);
        continue;
      }
      if (rules.has_allow() && !learn.empty()) learn_(p.client.slot, learn, false);
      dns::SetId(&msg, p.id);
      reply(msg, p.from);
      done(fd);
    }
    if (!(fds[1].revents & POLLIN)) continue;
    for (int burst = 0; burst < 64; ++burst) {
      struct sockaddr_in from = {};
      socklen_t flen = sizeof from;
      ssize_t got = ::recvfrom(sock_.get(), buf, 4096, 0, reinterpret_cast<struct sockaddr*>(&from), &flen);
      if (got <= 0) break;
      std::string query(buf, static_cast<size_t>(got));
      auto q = dns::ParseQuery(query);
      if (!q) continue;
      ++stats_.queries;
      uint32_t src = ntohl(from.sin_addr.s_addr);
      auto client = lookup_(Address::V4(src));
      if (!client) {
        ++stats_.refused;
        reply(dns::Refusal(query), from);
        continue;
      }
      bool named_deny = false;
      for (const auto& d : client->rules.deny_names) named_deny = named_deny || d.Matches(q->name);
      const bool allowed = client->rules.ForName(q->name) == Rules::Verdict::kAllow;
      // (With an allow list the name is refused unasked: asking upstream would let the
      // sandbox send what it likes to a denied domain's name servers.)
      if (!allowed && (!named_deny || client->rules.mode != "outbound" || client->rules.has_allow())) {
        ++stats_.refused;
        reply(dns::Refusal(query), from);
        continue;
      }
      // A name a `deny` entry names: refused once the upstream's answer has taught the
      // firewall its addresses (so a connection right after the refusal meets the block).
      if (pending.size() >= kMaxInFlight || in_flight[client->slot] >= kMaxInFlightPerSandbox) continue;
      UniqueFd s(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
      if (!s.valid() || ::connect(s.get(), reinterpret_cast<struct sockaddr*>(&up), sizeof up) != 0) continue;
      std::string out = query;
      const uint16_t upstream_id = RandomId();
      dns::SetId(&out, upstream_id);
      if (::send(s.get(), out.data(), out.size(), 0) < 0) continue;
      ++stats_.forwarded;
      const int fd = s.get();
      pending[fd] = Pending{query, from, q->id, upstream_id, *client, !allowed, NowMs() + kUpstreamTimeoutMs};
      ++in_flight[client->slot];
      sockets[fd] = std::move(s);
    }
  }
}

}  // namespace sbx::net
