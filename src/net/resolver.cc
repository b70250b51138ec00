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
#include <system_error>
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
// A TCP connection: the time its client has to send each query (and to read each answer),
// the time it may last in all, and the queries it may send.
constexpr int kTcpIdleMs = 5000;
constexpr int kTcpLifeMs = 30000;
constexpr int kTcpQueries = 32;

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

Result<std::pair<uint16_t, uint16_t>> Resolver::Start(uint16_t udp_port, uint16_t tcp_port) {
  auto bind_any = [](int fd, uint16_t port, const char* what) -> Result<uint16_t> {
    struct sockaddr_in sa = {};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(port);
    sa.sin_addr.s_addr = htonl(INADDR_ANY);
    if (::bind(fd, reinterpret_cast<struct sockaddr*>(&sa), sizeof sa) != 0)
      return ErrnoError(std::string("bind the resolver's ") + what + " port " + std::to_string(port));
    socklen_t len = sizeof sa;
    ::getsockname(fd, reinterpret_cast<struct sockaddr*>(&sa), &len);
    return ntohs(sa.sin_port);
  };
  sock_ = UniqueFd(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!sock_.valid()) return ErrnoError("resolver socket");
  SBX_ASSIGN_OR_RETURN(uint16_t udp, bind_any(sock_.get(), udp_port, "UDP"));
  // TCP on a port of its own: the UDP port's number over TCP may be a host program's.
  listener_ = UniqueFd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!listener_.valid()) return ErrnoError("resolver socket (TCP)");
  const int one = 1;
  (void)::setsockopt(listener_.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);  // a restart's TIME_WAITs
  SBX_ASSIGN_OR_RETURN(uint16_t tcp, bind_any(listener_.get(), tcp_port, "TCP"));
  if (::listen(listener_.get(), 128) != 0) return ErrnoError("listen on the resolver's TCP port");
  int p[2];
  if (::pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0) return ErrnoError("pipe");
  wake_r_ = UniqueFd(p[0]);
  wake_w_ = UniqueFd(p[1]);
  thread_ = std::thread([this] { Loop(); });
  accept_thread_ = std::thread([this] { AcceptLoop(); });
  return std::make_pair(udp, tcp);
}

void Resolver::Stop() {
  if (!thread_.joinable()) return;
  char c = 0;
  (void)::write(wake_w_.get(), &c, 1);
  thread_.join();
  if (accept_thread_.joinable()) accept_thread_.join();
  MutexLock lock(tcp_->mu);
  while (tcp_->active > 0) tcp_->idle.wait(lock);
}

std::optional<std::string> Resolver::Decide(const std::string& query, const dns::Question& q, const Client& client,
                                            bool* deny_only) {
  bool named_deny = false;
  for (const auto& d : client.rules.deny_names) named_deny = named_deny || d.Matches(q.name);
  const bool allowed = client.rules.ForName(q.name) == Rules::Verdict::kAllow;
  // (With an allow list the name is refused unasked: asking upstream would let the
  // sandbox send what it likes to a denied domain's name servers.)
  if (!allowed && (!named_deny || client.rules.mode != "outbound" || client.rules.has_allow())) {
    ++stats_.refused;
    return dns::Refusal(query);
  }
  // Every query asked upstream costs its sandbox a token: one sandbox cannot drive the
  // upstream resolver (and the host's name service) as fast as it sends.
  if (!TakeToken(client.slot)) {
    ++stats_.rate_limited;
    ++stats_.refused;
    return dns::Refusal(query);
  }
  // A name a `deny` entry names: refused once the upstream's answer has taught the
  // firewall its addresses (so a connection right after the refusal meets the block).
  *deny_only = !allowed;
  return std::nullopt;
}

bool Resolver::TakeToken(int slot) {
  if (rate_ <= 0) return true;
  const int64_t now = NowMs();
  const double burst = 2.0 * rate_;
  MutexLock lock(rate_mu_);
  auto [it, fresh] = buckets_.try_emplace(slot, Bucket{burst, now});
  Bucket& b = it->second;
  if (!fresh) b.tokens = std::min(burst, b.tokens + static_cast<double>(now - b.at_ms) * rate_ / 1000.0);
  b.at_ms = now;
  if (b.tokens < 1.0) return false;
  b.tokens -= 1.0;
  return true;
}

std::string Resolver::Judge(const std::string& query, uint16_t id, std::string msg, dns::Answer a,
                            const Client& client, bool deny_only, const Address& from) {
  // The rules now: they (or the sandbox at that address) may have changed while the
  // query was out. An answer under other rules is refused; the sandbox asks again.
  auto now_client = lookup_(from);
  if (!now_client || now_client->slot != client.slot || now_client->rules.ToJson() != client.rules.ToJson())
    return dns::Refusal(query);
  const Rules& rules = client.rules;
  for (auto& [addr, ttl] : a.addresses) ttl = std::min(ttl, kMaxTtl);
  if (deny_only) {
    learn_(client.slot, a.addresses, true);
    ++stats_.refused;
    return dns::Refusal(query);
  }
  std::vector<std::pair<Address, uint32_t>> learn;
  for (const auto& [addr, ttl] : a.addresses) {
    auto v = rules.ForAddress(addr);
    if (v && *v == Rules::Verdict::kDeny) {  // rebinding
      ++stats_.rebinding;
      ++stats_.refused;
      return dns::Refusal(query);
    }
    learn.emplace_back(addr, ttl);
  }
  if (rules.has_allow() && !learn.empty()) learn_(client.slot, learn, false);
  dns::SetId(&msg, id);
  return msg;
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
      reply(Judge(p.query, p.id, std::move(msg), std::move(*a), p.client, p.deny_only,
                  Address::V4(ntohl(p.from.sin_addr.s_addr))),
            p.from);
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
      bool deny_only = false;
      if (auto refusal = Decide(query, *q, *client, &deny_only)) {
        reply(*refusal, from);
        continue;
      }
      if (pending.size() >= kMaxInFlight || in_flight[client->slot] >= kMaxInFlightPerSandbox) continue;
      UniqueFd s(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
      if (!s.valid() || ::connect(s.get(), reinterpret_cast<struct sockaddr*>(&up), sizeof up) != 0) continue;
      std::string out = query;
      const uint16_t upstream_id = RandomId();
      dns::SetId(&out, upstream_id);
      if (::send(s.get(), out.data(), out.size(), 0) < 0) continue;
      ++stats_.forwarded;
      const int fd = s.get();
      pending[fd] = Pending{query, from, q->id, upstream_id, *client, deny_only, NowMs() + kUpstreamTimeoutMs};
      ++in_flight[client->slot];
      sockets[fd] = std::move(s);
    }
  }
}

namespace {

// Waits until `fd` is ready for `events`, `wake` is readable (the resolver stops), or
// `deadline_ms` passes: true for the first only.
bool WaitFor(int fd, short events, int wake, int64_t deadline_ms) {
  for (;;) {
    const int64_t left = deadline_ms - NowMs();
    if (left <= 0) return false;
    struct pollfd fds[2] = {{fd, events, 0}, {wake, POLLIN, 0}};
    const int n = ::poll(fds, 2, static_cast<int>(std::min<int64_t>(left, 1000)));
    if (n < 0 && errno != EINTR) return false;
    if (n > 0 && fds[1].revents) return false;
    if (n > 0 && fds[0].revents) return true;
  }
}

// Reads or writes exactly `len` bytes of a non-blocking socket by `deadline_ms`.
bool ReadFull(int fd, char* buf, size_t len, int wake, int64_t deadline_ms) {
  size_t at = 0;
  while (at < len) {
    const ssize_t n = ::recv(fd, buf + at, len - at, 0);
    if (n > 0) {
      at += static_cast<size_t>(n);
    } else if (n == 0 || (errno != EAGAIN && errno != EINTR) || !WaitFor(fd, POLLIN, wake, deadline_ms)) {
      return false;
    }
  }
  return true;
}

bool WriteFull(int fd, const char* buf, size_t len, int wake, int64_t deadline_ms) {
  size_t at = 0;
  while (at < len) {
    const ssize_t n = ::send(fd, buf + at, len - at, MSG_NOSIGNAL);
    if (n > 0) {
      at += static_cast<size_t>(n);
    } else if ((n < 0 && errno != EAGAIN && errno != EINTR) || !WaitFor(fd, POLLOUT, wake, deadline_ms)) {
      return false;
    }
  }
  return true;
}

// A DNS message over TCP: two bytes of length, then the message (RFC 1035 4.2.2).
std::optional<std::string> ReadMessage(int fd, int wake, int64_t deadline_ms) {
  unsigned char len[2];
  if (!ReadFull(fd, reinterpret_cast<char*>(len), 2, wake, deadline_ms)) return std::nullopt;
  std::string msg((size_t{len[0]} << 8) | len[1], '\0');
  if (msg.empty() || !ReadFull(fd, msg.data(), msg.size(), wake, deadline_ms)) return std::nullopt;
  return msg;
}

bool WriteMessage(int fd, const std::string& msg, int wake, int64_t deadline_ms) {
  if (msg.size() > 0xffff) return false;
  std::string framed = {static_cast<char>(msg.size() >> 8), static_cast<char>(msg.size() & 0xff)};
  framed += msg;
  return WriteFull(fd, framed.data(), framed.size(), wake, deadline_ms);
}

}  // namespace

void Resolver::AcceptLoop() {
  for (;;) {
    struct pollfd fds[2] = {{wake_r_.get(), POLLIN, 0}, {listener_.get(), POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0 && errno != EINTR) {
      SBX_LOG(kError) << "resolver: poll (TCP): " << std::strerror(errno);
      return;
    }
    if (fds[0].revents) return;
    if (!(fds[1].revents & POLLIN)) continue;
    struct sockaddr_in from = {};
    socklen_t flen = sizeof from;
    UniqueFd conn(::accept4(listener_.get(), reinterpret_cast<struct sockaddr*>(&from), &flen,
                            SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (!conn.valid()) {
      // Out of descriptors (the connection stays queued, the listener readable): wait a
      // little rather than spin.
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        struct pollfd wake = {wake_r_.get(), POLLIN, 0};
        if (::poll(&wake, 1, 100) > 0) return;
      }
      continue;
    }
    const Address peer = Address::V4(ntohl(from.sin_addr.s_addr));
    auto client = lookup_(peer);
    if (!client) continue;  // not a sandbox's (the firewall lets none other in)
    const int slot = client->slot;
    {
      MutexLock lock(tcp_->mu);
      // Closed: the client retries, or asks over UDP.
      auto mine = tcp_->per_slot.find(slot);
      if (tcp_->active >= kMaxTcpConnections || (mine != tcp_->per_slot.end() && mine->second >= kMaxTcpPerSandbox))
        continue;
      ++tcp_->active;
      ++tcp_->per_slot[slot];
    }
    auto count = tcp_;
    auto release = [count, slot] {
      MutexLock lock(count->mu);
      if (--count->per_slot[slot] <= 0) count->per_slot.erase(slot);
      if (--count->active == 0) count->idle.notify_all();
    };
    try {
      std::thread([this, release, c = std::move(conn), peer]() mutable {
        ServeTcp(std::move(c), peer);  // `this` lives until the count below goes down
        release();
      }).detach();
    } catch (const std::system_error& e) {
      SBX_LOG(kWarn) << "resolver: no thread for a TCP connection: " << e.what();
      release();
    }
  }
}

void Resolver::ServeTcp(UniqueFd conn, Address peer) {
  const int fd = conn.get(), wake = wake_r_.get();
  // Each query within kTcpIdleMs of the last answer, and the whole connection within
  // kTcpLifeMs: a slow client holds a thread for seconds, not minutes.
  const int64_t end = NowMs() + kTcpLifeMs;
  auto deadline = [&](int64_t ms) { return std::min(NowMs() + ms, end); };
  for (int n = 0; n < kTcpQueries; ++n) {
    auto query = ReadMessage(fd, wake, deadline(kTcpIdleMs));
    if (!query) return;
    auto q = dns::ParseQuery(*query);
    if (!q) return;
    ++stats_.queries;
    auto client = lookup_(peer);
    std::string reply;
    bool deny_only = false;
    if (!client) {
      ++stats_.refused;
      reply = dns::Refusal(*query);
    } else if (auto refusal = Decide(*query, *q, *client, &deny_only)) {
      reply = *refusal;
    } else {
      std::string out = *query;
      const uint16_t upstream_id = RandomId();
      dns::SetId(&out, upstream_id);
      ++stats_.forwarded;
      auto msg = AskUpstreamTcp(out, deadline(kUpstreamTimeoutMs));
      auto a = msg ? dns::ParseAnswer(*msg) : std::nullopt;
      if (!a || a->id != upstream_id || a->question != q->name) {
        reply = dns::Refusal(*query, deny_only ? dns::kRcodeRefused : dns::kRcodeServFail);
      } else {
        reply = Judge(*query, q->id, std::move(*msg), std::move(*a), *client, deny_only, peer);
      }
    }
    if (!WriteMessage(fd, reply, wake, deadline(kTcpIdleMs))) return;
  }
}

std::optional<std::string> Resolver::AskUpstreamTcp(const std::string& query, int64_t deadline_ms) {
  UniqueFd s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!s.valid()) return std::nullopt;
  struct sockaddr_in up = {};
  up.sin_family = AF_INET;
  up.sin_port = htons(upstream_port_);
  std::copy_n(upstream_.bytes.begin(), 4, reinterpret_cast<uint8_t*>(&up.sin_addr.s_addr));
  if (::connect(s.get(), reinterpret_cast<struct sockaddr*>(&up), sizeof up) != 0) {
    if (errno != EINPROGRESS || !WaitFor(s.get(), POLLOUT, wake_r_.get(), deadline_ms)) return std::nullopt;
    int err = 0;
    socklen_t len = sizeof err;
    if (::getsockopt(s.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) return std::nullopt;
  }
  if (!WriteMessage(s.get(), query, wake_r_.get(), deadline_ms)) return std::nullopt;
  return ReadMessage(s.get(), wake_r_.get(), deadline_ms);
}

}  // namespace sbx::net
