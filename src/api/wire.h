// Beast-level pieces shared by the server's sessions, the port proxy and the terminal:
// the connection limits, a watchdog that enforces deadlines, reading a request's header
// with strict framing (RFC 9112), writing a plain answer, and a lingering close. Only
// src/api/*.cc include this (it pulls in Beast). Every function runs on the connection's
// strand.
#pragma once

#include <utility>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "api/conn_budget.h"
#include "api/http_request.h"
#include "api/http_types.h"

namespace sbx::api {

using TcpStream = boost::asio::ip::tcp::socket;
using UnixStream = boost::asio::local::stream_protocol::socket;


// Cancels a stream's pending operations when its deadline passes. Lives in one
// connection's coroutine, on that connection's strand (its timer fires there too).
template <typename Stream>
class Watchdog {
 public:
  Watchdog(boost::asio::any_io_executor ex, Stream* s)
      : timer_(std::make_shared<boost::asio::steady_timer>(ex)), state_(std::make_shared<State>()), s_(s) {}
  ~Watchdog() {
    state_->alive = false;
    boost::system::error_code ignored;
    timer_->cancel(ignored);  // the non-throwing form: a destructor
  }
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // (Re)starts the deadline `ms` from now; ms <= 0 disarms it.
  void Arm(int64_t ms) {
    timer_->cancel();
    if (ms <= 0) return;
    timer_->expires_after(std::chrono::milliseconds(ms));
    auto state = state_;
    Stream* s = s_;
    uint64_t gen = ++state->gen;
    timer_->async_wait([state, s, gen](const boost::system::error_code& ec) {
      if (ec || !state->alive || gen != state->gen) return;
      state->fired = true;
      boost::system::error_code ignored;
      s->cancel(ignored);
    });
  }
  void Disarm() {
    ++state_->gen;
    timer_->cancel();
  }
  bool fired() const { return state_->fired; }

 private:
  struct State {
    bool alive = true;
    bool fired = false;
    uint64_t gen = 0;
  };
  std::shared_ptr<boost::asio::steady_timer> timer_;
  std::shared_ptr<State> state_;
  Stream* s_;
};

// Why a request's header could not be read.
enum class HeaderFailure {
  kNone,
  kClosed,    // the client closed (or reset) before sending a request: no answer
  kTimedOut,  // a deadline passed: closed without an answer
  kTooLarge,  // 431-like: answered 400 (the header section is over the limit)
  kMalformed  // answered 400 with `message`, then closed
};
struct HeaderRead {
  HeaderFailure failure = HeaderFailure::kNone;
  std::string message;
};

// Reads one request's header into `hp` with strict framing: obsolete line folding, a
// Transfer-Encoding other than a lone final "chunked", and Transfer-Encoding with
// Content-Length are malformed. The first byte must come within `first_byte_ms` (the
// keep-alive wait), the whole header within limits.header_timeout_ms of it.
template <typename Stream>
boost::asio::awaitable<HeaderRead> ReadRequestHeader(Stream& stream, boost::beast::flat_buffer& buf,
                                                      boost::beast::http::request_parser<boost::beast::http::empty_body>& hp,
                                                      const ConnLimits& limits, int64_t first_byte_ms);

// Writes a plain (not streamed) answer; false if the client is gone.
template <typename Stream>
boost::asio::awaitable<bool> WriteResponse(Stream& stream, const Response& r, bool keep_alive);

// Answers `r` and closes so that the client actually receives it even while it is still
// sending a body: the send side is shut, then whatever the client sends is read and
// dropped for a short while (at most `drain_ms`), never kept.
template <typename Stream>
boost::asio::awaitable<void> AnswerAndClose(Stream& stream, const Response& r, int64_t drain_ms = 2000);

// The Transfer-Encoding check of http_request.h on a parsed header; empty when fine.
std::string CheckFraming(const boost::beast::http::request_parser<boost::beast::http::empty_body>& hp);

}  // namespace sbx::api
