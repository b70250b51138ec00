// The HTTP listener's limits, and its budget of connections: all of them, each sandbox's,
// and those that have not yet authenticated (whose oldest make room for new callers). No
// Beast here. Any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

namespace sbx::api {

// The HTTP listener's limits. Each is a sbxd flag; docs/API.md lists the defaults.
struct ConnLimits {
  uint64_t max_body_bytes = 64 << 20;       // JSON bodies of admin calls
  uint64_t max_upload_bytes = 16ULL << 30;  // streamed uploads (files, images) of admin calls
  // Bodies of every caller that is not the admin: unauthenticated callers, sandbox tokens
  // and the in-sandbox socket (they may call no route that takes a body)...
  uint64_t small_body_bytes = 64 << 10;
  // ...but E2B's access token, whose data plane takes JSON and Connect bodies (a command,
  // its stdin); its uploads go into the sandbox as they come, held to its disk.
  uint64_t token_body_bytes = 1 << 20;
  uint64_t header_limit = 64 << 10;
  int64_t header_timeout_ms = 10000;     // from the first byte of a request to its last header
  int64_t keepalive_timeout_ms = 120000;  // a kept-alive connection with no new request
  int64_t body_idle_timeout_ms = 30000;   // no byte of a body for this long
  int64_t proxy_idle_timeout_ms = 300000;  // a proxied exchange or upgraded stream with no traffic
  int max_connections = 4096;           // all listeners together
  // TCP connections that have made no authenticated request yet, all together and from
  // one source address: past either, the oldest such connection (of that source, or of
  // all) is closed to make room, so that new callers always get in. Until its first
  // authenticated request a connection waits at most header_timeout_ms for each request.
  int max_unknown_connections = 1024;
  int max_unknown_per_source = 256;
  // Per sandbox: its in-sandbox socket and port proxy together, and, apart, the
  // connections its tokens authorised (SBX_TOKEN, E2B's access token).
  int max_sandbox_connections = 64;
};

// Open connections, all together and per key (a sandbox: its in-sandbox socket and port
// proxy; "token:ID": those its tokens authorised), and the unknown ones. Shared with the
// slots: a session's frame may outlive the server (it is destroyed with the io_context).
class ConnBudget : public std::enable_shared_from_this<ConnBudget> {
 public:
  explicit ConnBudget(const ConnLimits& limits) : limits_(limits) {}
  // Held while a connection is open; empty key: the global count only.
  class Slot {
   public:
    Slot(std::shared_ptr<ConnBudget> c, std::string key) : c_(std::move(c)), key_(std::move(key)) {}
    Slot(Slot&& o) noexcept : c_(std::move(o.c_)), key_(std::move(o.key_)) {}
    Slot(const Slot&) = delete;
    Slot& operator=(const Slot&) = delete;
    Slot& operator=(Slot&&) = delete;
    ~Slot() {
      if (c_) c_->Release(key_);
    }

   private:
    std::shared_ptr<ConnBudget> c_;
    std::string key_;
  };
  // A slot for one more connection, or nullopt when the cap is reached.
  std::optional<Slot> Take(const std::string& key);

  // A connection that has not yet made an authenticated request, from `source`. While
  // held, `evict` may be called (on any thread, once) to close it when newer unknown
  // connections need its place; it must stay callable until the ticket is dropped.
  class Unknown {
   public:
    Unknown() = default;
    Unknown(Unknown&& o) noexcept : c_(std::move(o.c_)), seq_(o.seq_) {}
    Unknown(const Unknown&) = delete;
    Unknown& operator=(const Unknown&) = delete;
    Unknown& operator=(Unknown&& o) noexcept {
      if (this != &o) {
        Known();
        c_ = std::move(o.c_);
        seq_ = o.seq_;
      }
      return *this;
    }
    ~Unknown() { Known(); }
    // It authenticated (or is gone): it leaves the unknown ones. Idempotent.
    void Known();
    bool known() const { return !c_; }
    // Moves the ticket out (for a coroutine that keeps it in a local rather than in its
    // parameter copy, whose destruction order against the stream's is not the locals').
    Unknown Take() {
      Unknown u;
      u.c_ = std::move(c_);
      u.seq_ = seq_;
      return u;
    }

   private:
    friend class ConnBudget;
    Unknown(std::shared_ptr<ConnBudget> c, uint64_t seq) : c_(std::move(c)), seq_(seq) {}
    std::shared_ptr<ConnBudget> c_;
    uint64_t seq_ = 0;
  };
  Unknown Admit(const std::string& source, std::function<void()> evict);
  int unknown() const;

 private:
  struct Entry {
    uint64_t seq;
    std::string source;
    std::function<void()> evict;
  };
  void Release(const std::string& key);
  void Forget(uint64_t seq);
  // Closes the oldest unknown connection (of `source`, when not empty). Under mu_.
  void EvictOldestLocked(const std::string& source);
  const ConnLimits limits_;
  mutable std::mutex mu_;
  int total_ = 0;
  std::map<std::string, int> per_key_;
  std::list<Entry> unknown_;  // oldest first
  std::map<std::string, int> unknown_per_source_;
  uint64_t next_seq_ = 1;
};

}  // namespace sbx::api
