#include "api/port_proxy.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/read.hpp>
#include <cctype>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "agent/client.h"
#include "api/errors.h"

namespace sbx::api {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using asio::use_awaitable;
using boost::system::error_code;
using Upstream = asio::local::stream_protocol::socket;

namespace {

std::string Lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Hop-by-hop fields (RFC 9110 7.6.1) and credentials: the proxy's own, never passed on.
bool HopByHop(const std::string& lower) {
  return lower == "connection" || lower == "keep-alive" || lower == "te" ||
         lower == "transfer-encoding" || lower == "content-length" ||
         lower == "proxy-authorization" || lower == "proxy-connection" ||
         lower == "proxy-authenticate" || lower == "trailer" || lower == "upgrade";
}

// The credentials sbxd itself reads (the API key in either field, a sandbox's token, E2B's
// access token and the sandbox it names): never passed on to a sandbox's server, which
// could otherwise replay them against sbxd. (The grant cookie and a Referer that holds a
// grant are filtered where they are read.)
bool SbxCredential(const std::string& lower) {
  return lower == "authorization" || lower == "x-api-key" || lower == "x-access-token" || lower == "e2b-sandbox-id";
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string Chunk(const char* data, size_t n) {
  char size[24];
  std::snprintf(size, sizeof size, "%zx\r\n", n);
  std::string out = size;
  out.append(data, n);
  out += "\r\n";
  return out;
}

// Writes one piece of a body, as a chunk when the message is chunked.
template <typename S>
asio::awaitable<error_code> WritePiece(S& s, const char* data, size_t n, bool chunked) {
  error_code ec;
  if (chunked) {
    std::string c = Chunk(data, n);
    co_await asio::async_write(s, asio::buffer(c), asio::redirect_error(use_awaitable, ec));
  } else {
    co_await asio::async_write(s, asio::buffer(data, n), asio::redirect_error(use_awaitable, ec));
  }
  co_return ec;
}

enum class SendResult { kSent, kClientGone, kTooLarge, kUpstreamFailed };

// Sends the request's `head` up, then its body as it arrives from the client (chunked
// again if it came chunked), each wait under its idle deadline.
template <typename Stream>
asio::awaitable<SendResult> SendRequest(Stream& stream, beast::flat_buffer& buf,
                                        http::request_parser<http::empty_body>& hp, Upstream& up,
                                        const std::string& head, bool expect_continue,
                                        bool chunked_in, const ConnLimits& limits,
                                        std::vector<char>& scratch) {
  auto ex = co_await asio::this_coro::executor;
  Watchdog<Stream> client_dog(ex, &stream);
  Watchdog<Upstream> up_dog(ex, &up);
  error_code ec;
  up_dog.Arm(limits.proxy_idle_timeout_ms);
  co_await asio::async_write(up, asio::buffer(head), asio::redirect_error(use_awaitable, ec));
  if (ec) co_return SendResult::kUpstreamFailed;
  if (hp.is_done()) co_return SendResult::kSent;
  if (expect_continue) {
    static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
    co_await asio::async_write(stream, asio::buffer(kContinue),
                               asio::redirect_error(use_awaitable, ec));
    if (ec) co_return SendResult::kClientGone;
  }
  http::request_parser<http::buffer_body> bp{std::move(hp)};
  bp.body_limit(limits.max_upload_bytes);
  while (!bp.is_done()) {
    bp.get().body().data = scratch.data();
    bp.get().body().size = scratch.size();
    client_dog.Arm(limits.body_idle_timeout_ms);
    co_await http::async_read_some(stream, buf, bp, asio::redirect_error(use_awaitable, ec));
    client_dog.Disarm();
    if (ec == http::error::need_buffer) ec = {};
    if (ec == http::error::body_limit) co_return SendResult::kTooLarge;
    if (ec) co_return SendResult::kClientGone;  // went away or stalled
    size_t n = scratch.size() - bp.get().body().size;
    if (n == 0) continue;
    up_dog.Arm(limits.proxy_idle_timeout_ms);
    ec = co_await WritePiece(up, scratch.data(), n, chunked_in);
    if (ec) co_return SendResult::kUpstreamFailed;
  }
  if (chunked_in) {
    static const std::string kLast = "0\r\n\r\n";
    up_dog.Arm(limits.proxy_idle_timeout_ms);
    co_await asio::async_write(up, asio::buffer(kLast), asio::redirect_error(use_awaitable, ec));
    if (ec) co_return SendResult::kUpstreamFailed;
  }
  co_return SendResult::kSent;
}

// After a 101: bytes both ways until either side ends or both are quiet for `idle_ms`.
struct Pipe {
  int running = 2;
  int64_t last_ms = NowMs();
};

template <typename From, typename To>
asio::awaitable<void> PumpRaw(From* from, To* to, std::shared_ptr<Pipe> pipe) {
  std::vector<char> scratch(64 * 1024);
  error_code ec;
  while (!ec) {
    size_t n = co_await from->async_read_some(asio::buffer(scratch),
                                              asio::redirect_error(use_awaitable, ec));
    if (n > 0) {
      pipe->last_ms = NowMs();
      error_code wec;
      co_await asio::async_write(*to, asio::buffer(scratch.data(), n),
                                 asio::redirect_error(use_awaitable, wec));
      if (wec) break;
    }
  }
  // Either side ending ends the stream: both sockets stop.
  error_code ignored;
  from->cancel(ignored);
  to->shutdown(asio::socket_base::shutdown_both, ignored);
  to->cancel(ignored);
  from->shutdown(asio::socket_base::shutdown_both, ignored);
  --pipe->running;
}

}  // namespace

std::string StripCookieDomain(std::string_view v) {
  std::string out;
  size_t start = 0;
  bool first = true;
  while (start <= v.size()) {
    size_t semi = v.find(';', start);
    if (semi == std::string_view::npos) semi = v.size();
    std::string_view part = v.substr(start, semi - start);
    size_t b = part.find_first_not_of(" \t");
    std::string_view trimmed = b == std::string_view::npos ? std::string_view() : part.substr(b);
    std::string name = Lower(trimmed.substr(0, trimmed.find('=')));
    while (!name.empty() && (name.back() == ' ' || name.back() == '\t')) name.pop_back();
    if (first || name != "domain") {
      if (!first) out += ";";
      out += std::string(part);
    }
    first = false;
    start = semi + 1;
  }
  return out;
}

// A Cookie header's value without sbxd's sbx_token cookie.
std::string WithoutGrantCookie(const std::string& v) {
  std::string out;
  for (std::string_view c : CookiePairs(v))
    if (c.substr(0, 10) != "sbx_token=") out += (out.empty() ? "" : "; ") + std::string(c);
  return out;
}

template <typename Stream>
asio::awaitable<void> ProxyExchange(Stream& stream, beast::flat_buffer& buf,
                                    http::request_parser<http::empty_body>& hp, Api* api,
                                    const ProxyTarget& t, const Request& req,
                                    const ConnLimits& limits, bool by_path,
                                    const std::function<void()>& authorized) {
  if (auto refused = api->ProxyRefusal(t, req)) {
    co_await AnswerAndClose(stream, *refused);
    co_return;
  }
  authorized();
  const auto& m = hp.get();
  const bool chunked_in = hp.chunked();
  const auto declared = hp.content_length();
  if (declared && *declared > limits.max_upload_bytes) {
    Response answer = ErrorResponse(Code::kTooLarge, "the request body is too large");
    co_await AnswerAndClose(stream, answer);
    co_return;
  }
  auto lease = co_await api->ProxyLease(t.id);
  if (!lease.ok()) {
    {
      Response answer = ErrorResponse(lease.error());
      co_await AnswerAndClose(stream, answer);
    }
    co_return;
  }
  std::shared_ptr<core::AgentLease> held = *lease;
  auto ex = co_await asio::this_coro::executor;
  agent::Conn conn(ex);
  std::string open = nlohmann::json{{"port", t.port}}.dump();
  agent::DialerPtr addr = held->addr();
  auto st = co_await conn.Open(addr);
  if (st.ok()) st = co_await conn.Send(agent::FrameType::kPortOpen, open);
  if (st.ok()) {
    auto r = co_await conn.RecvResult();
    if (!r.ok()) st = r.error();
  }
  if (!st.ok()) {
    {
      Response answer = ErrorResponse(st.error());
      co_await AnswerAndClose(stream, answer);
    }
    co_return;
  }
  Upstream& up = conn.socket();
  Watchdog<Stream> client_dog(ex, &stream);
  Watchdog<Upstream> up_dog(ex, &up);

  // The request, framed by sbxd: the body goes up as it arrives (never held whole).
  // `m` is read before the body: the parser moves on to read it.
  const http::verb method = m.method();
  const bool upgrade = hp.upgrade() && m.find(http::field::upgrade) != m.end();
  std::string head = std::string(m.method_string()) + " " + t.target + " HTTP/1.1\r\n";
  bool expect_continue = false;
  for (const auto& f : m) {
    std::string lower = Lower(std::string(f.name_string()));
    if (lower == "expect") {
      expect_continue = beast::iequals(f.value(), "100-continue");
      continue;
    }
    if (SbxCredential(lower) || HopByHop(lower)) continue;
    // A Referer that holds a grant (a page opened by a signed URL) stays out too.
    if (lower == "referer" && std::string(f.value()).find("sbx_token=") != std::string::npos) continue;
    if (lower == "cookie") {  // sbxd's own grant cookie stays out of the sandbox
      std::string kept = WithoutGrantCookie(std::string(f.value()));
      if (!kept.empty()) head += std::string(f.name_string()) + ": " + kept + "\r\n";
      continue;
    }
    head += std::string(f.name_string()) + ": " + std::string(f.value()) + "\r\n";
  }
  if (upgrade)
    head += "Connection: Upgrade\r\nUpgrade: " + std::string(m[http::field::upgrade]) + "\r\n";
  else
    head += "Connection: close\r\n";
  if (chunked_in)
    head += "Transfer-Encoding: chunked\r\n";
  else if (declared)
    head += "Content-Length: " + std::to_string(*declared) + "\r\n";
  else if (method == http::verb::post || method == http::verb::put || method == http::verb::patch)
    head += "Content-Length: 0\r\n";
  head += "\r\n";
  std::vector<char> scratch(64 * 1024);
  SendResult sent =
      co_await SendRequest(stream, buf, hp, up, head, expect_continue, chunked_in, limits, scratch);
  if (sent == SendResult::kClientGone) co_return;  // nothing to answer
  if (sent != SendResult::kSent) {
    Response answer =
        sent == SendResult::kTooLarge
            ? ErrorResponse(Code::kTooLarge, "the request body is too large")
            : ErrorResponse(Code::kUnavailable, "the sandbox's server did not take the request");
    co_await AnswerAndClose(stream, answer);
    co_return;
  }
  error_code ec;

  // The answer: its header (interim 1xx answers other than 101 are dropped), then its
  // body, framed by sbxd.
  beast::flat_buffer upbuf;
  std::optional<http::response_parser<http::buffer_body>> rp;
  while (true) {
    rp.emplace();
    rp->header_limit(static_cast<uint32_t>(limits.header_limit));
    rp->body_limit(std::numeric_limits<std::uint64_t>::max());
    if (method == http::verb::head) rp->skip(true);
    up_dog.Arm(limits.proxy_idle_timeout_ms);
    co_await http::async_read_header(up, upbuf, *rp, asio::redirect_error(use_awaitable, ec));
    if (ec) {
      {
        Response answer = ErrorResponse(
            Code::kUnavailable,
            up_dog.fired() ? "the sandbox's server did not answer in time"
                           : "the sandbox's server sent no valid HTTP answer: " + ec.message());
        co_await AnswerAndClose(stream, answer);
        co_return;
      }
    }
    int code = rp->get().result_int();
    if (code >= 100 && code < 200 && code != 101) continue;
    break;
  }
  const auto& res = rp->get();
  const int code = res.result_int();
  if (code == 101 && !upgrade) {
    Response answer =
        ErrorResponse(Code::kUnavailable, "the sandbox's server switched protocols unasked");
    co_await AnswerAndClose(stream, answer);
    co_return;
  }
  std::string out = "HTTP/1.1 " + std::to_string(code) + " " + std::string(res.reason()) + "\r\n";
  for (const auto& f : res) {
    std::string lower = Lower(std::string(f.name_string()));
    if (HopByHop(lower)) continue;
    if (lower == "set-cookie") {
      out +=
          std::string(f.name_string()) + ": " + StripCookieDomain(std::string(f.value())) + "\r\n";
      continue;
    }
    out += std::string(f.name_string()) + ": " + std::string(f.value()) + "\r\n";
  }
  out += api->GrantCookie(t);
  // Served from the API's own origin: a browser must not treat the page as that origin.
  if (by_path) out += "Content-Security-Policy: sandbox allow-scripts allow-forms allow-popups\r\n";
  if (code == 101) {
    out += "Connection: Upgrade\r\nUpgrade: " + std::string(res[http::field::upgrade]) + "\r\n\r\n";
    co_await asio::async_write(stream, asio::buffer(out), asio::redirect_error(use_awaitable, ec));
    if (ec) co_return;
    up_dog.Disarm();
    // Bytes that came after each side's header go first.
    std::string from_client(static_cast<const char*>(buf.data().data()), buf.size());
    std::string from_up(static_cast<const char*>(upbuf.data().data()), upbuf.size());
    if (!from_client.empty())
      co_await asio::async_write(up, asio::buffer(from_client),
                                 asio::redirect_error(use_awaitable, ec));
    if (!ec && !from_up.empty())
      co_await asio::async_write(stream, asio::buffer(from_up),
                                 asio::redirect_error(use_awaitable, ec));
    if (ec) co_return;
    auto pipe = std::make_shared<Pipe>();
    asio::co_spawn(ex, PumpRaw(&stream, &up, pipe), asio::detached);
    asio::co_spawn(ex, PumpRaw(&up, &stream, pipe), asio::detached);
    // The sockets live in this frame: wait for both pumps; stop both when idle too long.
    asio::steady_timer tick(ex);
    while (pipe->running > 0) {
      if (limits.proxy_idle_timeout_ms > 0 &&
          NowMs() - pipe->last_ms > limits.proxy_idle_timeout_ms) {
        error_code ignored;
        stream.cancel(ignored);
        up.cancel(ignored);
      }
      tick.expires_after(std::chrono::milliseconds(100));
      co_await tick.async_wait(asio::redirect_error(use_awaitable, ec));
    }
    co_return;
  }
  const bool bodyless = method == http::verb::head || code == 204 || code == 304;
  const auto length = rp->content_length();
  const bool chunked_out = !bodyless && !length;
  if (length && !bodyless) out += "Content-Length: " + std::to_string(*length) + "\r\n";
  if (bodyless && res.find(http::field::content_length) != res.end())
    out += "Content-Length: " + std::string(res[http::field::content_length]) + "\r\n";
  if (chunked_out) out += "Transfer-Encoding: chunked\r\n";
  out += "Connection: close\r\n\r\n";
  client_dog.Arm(limits.proxy_idle_timeout_ms);
  co_await asio::async_write(stream, asio::buffer(out), asio::redirect_error(use_awaitable, ec));
  if (ec) co_return;
  while (!bodyless && !rp->is_done()) {
    rp->get().body().data = scratch.data();
    rp->get().body().size = scratch.size();
    up_dog.Arm(limits.proxy_idle_timeout_ms);
    co_await http::async_read_some(up, upbuf, *rp, asio::redirect_error(use_awaitable, ec));
    up_dog.Disarm();
    if (ec == http::error::need_buffer) ec = {};
    // Cut short by the sandbox: the client sees an incomplete body (no last chunk).
    if (ec) co_return;
    size_t n = scratch.size() - rp->get().body().size;
    if (n == 0) continue;
    client_dog.Arm(limits.proxy_idle_timeout_ms);
    ec = co_await WritePiece(stream, scratch.data(), n, chunked_out);
    if (ec) co_return;
  }
  if (chunked_out) {
    static const std::string kLast = "0\r\n\r\n";
    co_await asio::async_write(stream, asio::buffer(kLast),
                               asio::redirect_error(use_awaitable, ec));
  }
}

#define SBX_PROXY_INSTANTIATE(S)                                                                  \
  template asio::awaitable<void> ProxyExchange<S>(                                                \
      S&, beast::flat_buffer&, http::request_parser<http::empty_body>&, Api*, const ProxyTarget&, \
      const Request&, const ConnLimits&, bool, const std::function<void()>&);
SBX_PROXY_INSTANTIATE(TcpStream)
SBX_PROXY_INSTANTIATE(UnixStream)
#undef SBX_PROXY_INSTANTIATE

}  // namespace sbx::api
