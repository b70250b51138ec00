#include "api/wire.h"

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <cctype>
#include <limits>
#include <vector>

namespace sbx::api {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using asio::use_awaitable;
using boost::system::error_code;

std::string CheckFraming(const http::request_parser<http::empty_body>& hp) {
  const auto& h = hp.get();
  std::vector<std::string> codings;
  for (auto [it, end] = h.equal_range(http::field::transfer_encoding); it != end; ++it)
    codings.emplace_back(it->value());
  return CheckTransferEncoding(codings, h.find(http::field::content_length) != h.end());
}

template <typename Stream>
asio::awaitable<HeaderRead> ReadRequestHeader(Stream& stream, beast::flat_buffer& buf,
                                              http::request_parser<http::empty_body>& hp,
                                              const ConnLimits& limits, int64_t first_byte_ms) {
  auto ex = co_await asio::this_coro::executor;
  Watchdog<Stream> dog(ex, &stream);
  auto view = [&buf] {
    return std::string_view(static_cast<const char*>(buf.data().data()), buf.size());
  };
  bool started = false;
  dog.Arm(first_byte_ms);
  size_t end = 0;
  while (true) {
    // Empty lines before a request line are ignored (RFC 9112 2.2).
    std::string_view v = view();
    size_t skip = 0;
    while (skip < v.size() && (v[skip] == '\r' || v[skip] == '\n')) ++skip;
    if (!started && !v.empty()) {
      started = true;
      dog.Arm(limits.header_timeout_ms);
    }
    if (skip > 0) buf.consume(skip);
    v = view();
    size_t e = v.find("\r\n\r\n");
    if (e != std::string_view::npos) {
      end = e + 4;
      break;
    }
    if (v.size() >= limits.header_limit)
      co_return HeaderRead{HeaderFailure::kTooLarge, "the request's header is too large"};
    error_code ec;
    size_t n = co_await stream.async_read_some(buf.prepare(16 * 1024),
                                               asio::redirect_error(use_awaitable, ec));
    buf.commit(n);
    if (ec) {
      if (dog.fired()) co_return HeaderRead{HeaderFailure::kTimedOut, ""};
      co_return HeaderRead{HeaderFailure::kClosed, ""};
    }
  }
  dog.Disarm();
  std::string_view head = view().substr(0, end);
  if (HasObsFold(head))
    co_return HeaderRead{HeaderFailure::kMalformed,
                         "obsolete line folding in the request's header"};
  hp.header_limit(static_cast<uint32_t>(limits.header_limit));
  // The body's limit depends on the route and the caller: the session checks it next.
  hp.body_limit(std::numeric_limits<std::uint64_t>::max());
  error_code ec;
  size_t used = hp.put(asio::buffer(head.data(), head.size()), ec);
  if (!ec && !hp.is_header_done()) ec = http::error::need_more;
  if (ec)
    co_return HeaderRead{HeaderFailure::kMalformed, "malformed HTTP request: " + ec.message()};
  buf.consume(used);
  if (std::string bad = CheckFraming(hp); !bad.empty())
    co_return HeaderRead{HeaderFailure::kMalformed, bad};
  co_return HeaderRead{};
}

template <typename Stream>
asio::awaitable<bool> WriteResponse(Stream& stream, const Response& r, bool keep_alive) {
  http::response<http::string_body> res{static_cast<http::status>(r.status), 11};
  res.set(http::field::server, "sbxd/" SBX_VERSION);
  res.set(http::field::content_type, r.content_type);
  res.keep_alive(keep_alive);
  for (const auto& [name, value] : r.headers) res.set(name, value);
  res.body() = r.body;
  res.prepare_payload();
  error_code ec;
  co_await http::async_write(stream, res, asio::redirect_error(use_awaitable, ec));
  co_return !ec;
}

template <typename Stream>
asio::awaitable<void> AnswerAndClose(Stream& stream, const Response& r, int64_t drain_ms) {
  if (!co_await WriteResponse(stream, r, false)) co_return;
  error_code ec;
  stream.shutdown(asio::socket_base::shutdown_send, ec);
  // Closing while the client still sends would reset the connection, and a client that
  // writes its whole body before reading (most do) would never see the answer.
  auto ex = co_await asio::this_coro::executor;
  Watchdog<Stream> dog(ex, &stream);
  dog.Arm(drain_ms);
  std::vector<char> scratch(16 * 1024);
  while (!ec)
    co_await stream.async_read_some(asio::buffer(scratch), asio::redirect_error(use_awaitable, ec));
}

#define SBX_WIRE_INSTANTIATE(S)                                                            \
  template asio::awaitable<HeaderRead> ReadRequestHeader<S>(                               \
      S&, beast::flat_buffer&, http::request_parser<http::empty_body>&, const ConnLimits&, \
      int64_t);                                                                            \
  template asio::awaitable<bool> WriteResponse<S>(S&, const Response&, bool);              \
  template asio::awaitable<void> AnswerAndClose<S>(S&, const Response&, int64_t);
SBX_WIRE_INSTANTIATE(TcpStream)
SBX_WIRE_INSTANTIATE(UnixStream)
#undef SBX_WIRE_INSTANTIATE

}  // namespace sbx::api
