#include "api/server.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>
#include <chrono>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <type_traits>

#include "api/errors.h"
#include "api/port_proxy.h"
#include "api/terminal_ws.h"
#include "api/wire.h"
#include "base/ids.h"
#include "base/log.h"
#include "base/unique_fd.h"

namespace sbx::api {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using asio::use_awaitable;
using boost::system::error_code;

namespace {

// Reads a request's body into `parser` with an idle deadline between pieces.
template <typename Stream, typename Parser>
asio::awaitable<error_code> ReadBody(Stream& stream, beast::flat_buffer& buf, Parser& parser,
                                     int64_t idle_ms) {
  auto ex = co_await asio::this_coro::executor;
  Watchdog<Stream> dog(ex, &stream);
  error_code ec;
  while (!parser.is_done()) {
    dog.Arm(idle_ms);
    co_await http::async_read_some(stream, buf, parser, asio::redirect_error(use_awaitable, ec));
    if (ec) break;
  }
  co_return ec;
}

// A body read as its handler pulls it (Body::kStream), 64 KiB at most a piece, with an
// idle deadline between pieces. On the session's strand, for one request.
template <typename Stream>
class StreamBody final : public BodySource {
 public:
  StreamBody(Stream& stream, beast::flat_buffer& buf, http::request_parser<http::empty_body>&& hp, uint64_t limit,
             int64_t idle_ms)
      : stream_(stream), buf_(buf), parser_(std::move(hp)), idle_ms_(idle_ms) {
    parser_.body_limit(limit);
    if (auto n = parser_.content_length()) declared_ = *n;
  }
  std::optional<uint64_t> declared() const override { return declared_; }
  bool done() const override { return !failed_ && parser_.is_done(); }
  asio::awaitable<Result<std::string>> Next() override {
    std::string piece;
    if (failed_) co_return MakeError(Code::kInvalidArgument, "the request body could not be read");
    if (parser_.is_done()) co_return piece;
    auto ex = co_await asio::this_coro::executor;
    Watchdog<Stream> dog(ex, &stream_);
    piece.resize(kPiece);
    while (true) {
      auto& b = parser_.get().body();
      b.data = piece.data();
      b.size = piece.size();
      dog.Arm(idle_ms_);
      error_code ec;
      co_await http::async_read_some(stream_, buf_, parser_, asio::redirect_error(use_awaitable, ec));
      const size_t got = piece.size() - parser_.get().body().size;
      if (ec == http::error::need_buffer) ec = {};
      if (ec) {
        failed_ = true;
        if (ec == http::error::body_limit) co_return MakeError(Code::kTooLarge, "the request body is too large");
        if (dog.fired()) co_return MakeError(Code::kInvalidArgument, "the request body stalled");
        co_return MakeError(Code::kInvalidArgument, "the request body was cut off: " + ec.message());
      }
      if (got > 0 || parser_.is_done()) {
        piece.resize(got);
        co_return piece;
      }
    }
  }

 private:
  static constexpr size_t kPiece = 64 << 10;
  Stream& stream_;
  beast::flat_buffer& buf_;
  http::request_parser<http::buffer_body> parser_;
  int64_t idle_ms_;
  std::optional<uint64_t> declared_;
  bool failed_ = false;
};

// Fires a CancelSignal when the client closes its end of `stream` while it is watched
// (from construction to destruction, within one request). Used on the session's strand.
template <typename Stream>
class WatchGone {
 public:
  WatchGone(Stream& stream, bool enabled, asio::any_io_executor strand)
      : stream_(stream), signal_(std::make_shared<CancelSignal>()), live_(std::make_shared<bool>(enabled)) {
    if (!enabled) return;
    stream_.async_wait(Stream::wait_read,
                       asio::bind_executor(strand, [live = live_, sig = signal_, fd = stream_.native_handle()](
                                                       const error_code& ec) {
                         if (ec || !*live) return;
                         char c;
                         // Readable: either the next request (pipelined, kept for later) or the end.
                         ssize_t n = ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
                         if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) sig->Fire();
                       }));
  }
  ~WatchGone() {
    if (!*live_) return;
    *live_ = false;
    error_code ignored;
    stream_.cancel(ignored);  // only the wait is pending between requests
  }
  WatchGone(const WatchGone&) = delete;
  WatchGone& operator=(const WatchGone&) = delete;
  std::shared_ptr<CancelSignal> signal() const { return signal_; }

 private:
  Stream& stream_;
  std::shared_ptr<CancelSignal> signal_;
  std::shared_ptr<bool> live_;
};

// One connection: requests one after another (keep-alive) until the client closes, a
// deadline passes, or an answer ends the connection.
template <typename Stream>
asio::awaitable<void> Session(Stream stream, Api* api, const ServerOptions* opts_ptr,
                              ConnBudget* counter, ConnBudget::Slot slot,
                              std::optional<ConnBudget::Slot> sandbox_slot,
                              std::string via_sandbox, ConnBudget::Unknown unknown_ticket) {
  // A local (destroyed before the stream, which evicting it shuts down).
  ConnBudget::Unknown unknown = unknown_ticket.Take();
  const ServerOptions& opts = *opts_ptr;
  const ConnLimits& limits = opts.limits;
  beast::flat_buffer buf;
  // Room for 64 KiB reads: beast reads no more than the free capacity (at least 512 bytes),
  // and a body streamed to a file would otherwise come in 512-byte pieces.
  buf.reserve(64 * 1024);
  error_code ec;
  bool first = true;
  // Held from a sandbox token's first request on this connection: the connections its
  // tokens authorise count against that sandbox's cap, whoever the client is.
  std::optional<ConnBudget::Slot> token_slot;
  std::string token_slot_for;
  while (true) {
    http::request_parser<http::empty_body> hp;
    hp.header_limit(static_cast<uint32_t>(limits.header_limit));
    // Until a request of the connection authenticated, it waits for the next one no
    // longer than for a first one.
    auto hr = co_await ReadRequestHeader(
        stream, buf, hp, limits,
        first || !unknown.known() ? limits.header_timeout_ms : limits.keepalive_timeout_ms);
    first = false;
    if (hr.failure == HeaderFailure::kClosed || hr.failure == HeaderFailure::kTimedOut) break;
    if (hr.failure != HeaderFailure::kNone) {
      {
        Response answer = ErrorResponse(Code::kInvalidArgument, hr.message);
        co_await AnswerAndClose(stream, answer);
      }
      break;
    }
    Request req;
    req.arrival_us = SteadyUs();
    req.via_sandbox = via_sandbox;
    const auto& h = hp.get();
    req.method = std::string(h.method_string());
    ParseTarget(std::string_view(h.target().data(), h.target().size()), req);
    for (const auto& f : h) {
      std::string name(f.name_string());
      for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      req.headers[name] = std::string(f.value());
    }
    bool keep = h.keep_alive();
    std::string_view raw_target(h.target().data(), h.target().size());
    if (auto proxied = api->ProxyRoute(req, raw_target)) {
      if (!proxied->ok()) {
        auto denied = api->Unauthenticated(req);
        {
          Response answer = denied ? *denied : ErrorResponse(proxied->error());
          co_await AnswerAndClose(stream, answer);
        }
      } else {
        ProxyTarget t = **proxied;
        auto held = counter->Take(t.id);
        if (!held) {
          {
            Response answer = ErrorResponse(
                Code::kUnavailable, "too many open connections to sandbox " + t.id + "; try again");
            co_await AnswerAndClose(stream, answer);
          }
        } else {
          co_await ProxyExchange(stream, buf, hp, api, t, req, limits, !t.by_host, [&unknown] { unknown.Known(); });
        }
      }
      break;  // a proxied exchange ends the client's connection
    }
    // Everything the route and the caller allow is known before a byte of the body is
    // read: nobody unauthorised makes the daemon hold or store a body.
    const RouteInfo* route = api->Match(req);
    std::optional<Response> early;
    if (!route) {
      std::string shown = req.path.size() > 200 ? req.path.substr(0, 200) + "..." : req.path;
      early = ErrorResponse(Code::kNotFound, "no route for " + req.method + " " + shown);
    } else if (auto refused = api->Refusal(*route, req)) {
      early = std::move(refused);
    }
    if (!early && std::string_view(route->pattern) == "/v1/sandboxes/{id}/processes/{pid}/tty" &&
        beast::websocket::is_upgrade(h)) {
      co_await Terminal(stream, hp, api, &req);
      break;
    }
    if (!early && (req.admin || !req.token_sandbox.empty())) unknown.Known();
    if (!early && !req.token_sandbox.empty() && token_slot_for != req.token_sandbox) {
      token_slot.reset();
      if (auto taken = counter->Take("token:" + req.token_sandbox)) token_slot.emplace(std::move(*taken));
      token_slot_for = token_slot ? req.token_sandbox : "";
      if (!token_slot)
        early = ErrorResponse(Code::kUnavailable, "too many open connections with sandbox " + req.token_sandbox +
                                                      "'s token; try again");
    }
    // The admin's bodies may be full size; an E2B access token's JSON and Connect bodies
    // have a limit of their own, and its uploads are held to its sandbox's disk as they
    // stream (Body::kStream); everyone else's bodies are small.
    uint64_t limit = limits.small_body_bytes;
    if (route && req.admin) limit = route->large_body() ? limits.max_upload_bytes : limits.max_body_bytes;
    else if (route && !req.token_sandbox.empty()) limit = limits.token_body_bytes;
    if (route && route->body == Body::kStream) limit = limits.max_upload_bytes;
    if (!early && hp.content_length() && *hp.content_length() > limit)
      early = ErrorResponse(
          Code::kTooLarge, "the request body is too large (at most " + std::to_string(limit) + " bytes here)");
    if (early) {
      if (hp.is_done() && keep) {  // no body to skip: the connection goes on
        if (!co_await WriteResponse(stream, *early, true)) break;
        continue;
      }
      co_await AnswerAndClose(stream, *early);
      break;
    }
    // A client that asks first (curl does for large bodies) is told to go on.
    if (!hp.is_done() && beast::iequals(req.Header("expect"), "100-continue")) {
      static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      co_await asio::async_write(stream, asio::buffer(kContinue),
                                 asio::redirect_error(use_awaitable, ec));
      if (ec) break;
    }
    if (route->body == Body::kStream) {
      // The handler reads the body as it arrives; one it left unread (a refusal) ends
      // the connection, as any refused body does.
      StreamBody<Stream> source(stream, buf, std::move(hp), limit, limits.body_idle_timeout_ms);
      req.body_source = &source;
      Response resp = co_await api->Handle(*route, req);
      if (!source.done() || !keep) {
        co_await AnswerAndClose(stream, resp);
        break;
      }
      if (!co_await WriteResponse(stream, resp, keep)) break;
      continue;
    }
    std::string tmp_file;
    if (route->large_body()) {
      tmp_file = api->tmp_dir() + "/upload-" + RandomHex(8);
      http::request_parser<http::file_body> fp{std::move(hp)};
      fp.body_limit(limit);
      fp.get().body().open(tmp_file.c_str(), beast::file_mode::write, ec);
      if (ec) {
        {
          Response answer =
              ErrorResponse(Code::kInternal, "cannot store the upload: " + ec.message());
          co_await AnswerAndClose(stream, answer);
        }
        break;
      }
      ec = co_await ReadBody(stream, buf, fp, limits.body_idle_timeout_ms);
      fp.get().body().close();
      req.body_file = tmp_file;
    } else {
      http::request_parser<http::string_body> sp{std::move(hp)};
      sp.body_limit(limit);
      ec = co_await ReadBody(stream, buf, sp, limits.body_idle_timeout_ms);
      if (!ec) req.body = std::move(sp.get().body());
    }
    if (ec) {
      if (!tmp_file.empty()) ::unlink(tmp_file.c_str());
      if (ec == http::error::body_limit) {
        {
          Response answer = ErrorResponse(Code::kTooLarge, "the request body is too large");
          co_await AnswerAndClose(stream, answer);
        }
      } else if (ec != http::error::end_of_stream && ec != asio::error::eof &&
                 ec != asio::error::connection_reset && ec != asio::error::operation_aborted &&
                 ec != http::error::partial_message) {
        {
          Response answer =
              ErrorResponse(Code::kInvalidArgument, "malformed HTTP request: " + ec.message());
          co_await AnswerAndClose(stream, answer);
        }
      }
      break;
    }
    // While an exec (or a file watch, sbx's or E2B's) is handled and answered, a client that closes its
    // end is noticed at once (not at the next write): the command (the watch) is stopped.
    // Only these look (nothing else stops with its client, and looking costs a poller
    // registration), and not when the client already sent more (pipelined requests in
    // `buf`): it is then still there.
    const bool stops_with_client = route && (std::string_view(route->pattern) == "/v1/sandboxes/{id}/exec" ||
                                             std::string_view(route->pattern) == "/v1/disks/{id}/exec" ||
                                             std::string_view(route->pattern) == "/v1/sandboxes/{id}/files/watch" ||
                                             std::string_view(route->pattern) == "/filesystem.Filesystem/WatchDir");
    auto strand = co_await asio::this_coro::executor;
    WatchGone<Stream> watch(stream, stops_with_client && buf.size() == 0, strand);
    req.client_gone = watch.signal();
    Response resp = co_await api->Handle(*route, req);
    if (!tmp_file.empty()) ::unlink(tmp_file.c_str());
    if (!resp.stream) {
      if (!co_await WriteResponse(stream, resp, keep)) break;
      if (!keep) break;
      continue;
    }
    // A streamed answer: the header goes out with the first chunk, so an error found
    // before any output is still a plain error response.
    bool header_sent = false;
    bool client_ok = true;
    http::response<http::empty_body> head{static_cast<http::status>(resp.status), 11};
    head.set(http::field::server, "sbxd/" SBX_VERSION);
    head.set(http::field::content_type, resp.content_type);
    head.chunked(true);
    head.keep_alive(keep);
    http::response_serializer<http::empty_body> sr{head};
    ChunkSink sink = [&](std::string_view data) -> asio::awaitable<bool> {
      if (!client_ok) co_return false;
      error_code wec;
      if (!header_sent) {
        header_sent = true;
        co_await http::async_write_header(stream, sr, asio::redirect_error(use_awaitable, wec));
        if (wec) {
          client_ok = false;
          co_return false;
        }
      }
      auto chunk = http::make_chunk(asio::buffer(data.data(), data.size()));
      co_await asio::async_write(stream, chunk, asio::redirect_error(use_awaitable, wec));
      if (wec) client_ok = false;
      co_return client_ok;
    };
    auto failed = co_await resp.stream(sink);
    if (failed && !header_sent) {
      if (!co_await WriteResponse(stream, *failed, keep)) break;
      if (!keep) break;
      continue;
    }
    // Failed after part of the body went out: the connection is cut without the last
    // chunk, so the client sees an incomplete body instead of a short one.
    if (failed) break;
    if (!header_sent) {
      std::string_view none;
      co_await sink(none);  // only sends the header
    }
    if (!client_ok) break;
    auto last = http::make_chunk_last();
    co_await asio::async_write(stream, last, asio::redirect_error(use_awaitable, ec));
    if (ec || !keep) break;
  }
  error_code ignored;
  stream.shutdown(asio::socket_base::shutdown_both, ignored);
}

}  // namespace

struct Server::Impl {
  ServerOptions opts;
  Api* api;
  asio::io_context* io;
  std::shared_ptr<ConnBudget> counter;
  std::unique_ptr<asio::ip::tcp::acceptor> tcp;
  std::unique_ptr<asio::local::stream_protocol::acceptor> unix_acc;
  std::unique_ptr<asio::local::stream_protocol::acceptor> sandbox_acc;

  // After a failed accept: at the fd limit (EMFILE/ENFILE) the pending connection stays
  // queued and every retry would fail at once, so the loop waits instead of spinning.
  static asio::awaitable<void> BackOff(const error_code& ec) {
    bool fds = ec == asio::error::no_descriptors ||
               ec == boost::system::errc::too_many_files_open_in_system;
    if (fds) SBX_LOG(kWarn) << "accept: " << ec.message() << "; waiting before the next accept";
    asio::steady_timer t(co_await asio::this_coro::executor);
    t.expires_after(std::chrono::milliseconds(fds ? 100 : 5));
    error_code ignored;
    co_await t.async_wait(asio::redirect_error(use_awaitable, ignored));
  }

  template <typename Acceptor>
  asio::awaitable<void> AcceptLoop(Acceptor* acc, bool sandboxes) {
    while (true) {
      error_code ec;
      auto s = co_await acc->async_accept(asio::redirect_error(use_awaitable, ec));
      if (ec) {
        if (ec == asio::error::operation_aborted) co_return;
        co_await BackOff(ec);
        continue;
      }
      ::fcntl(s.native_handle(), F_SETFD, FD_CLOEXEC);
      if constexpr (std::is_same_v<decltype(s), asio::ip::tcp::socket>)
        s.set_option(asio::ip::tcp::no_delay(true), ec);
      auto slot = counter->Take("");
      if (!slot) continue;  // at the cap: closed at once (the socket goes out of scope)
      std::string via;
      std::optional<ConnBudget::Slot> sandbox_slot;
      if (sandboxes) {
        // Each connection on the in-sandbox socket is the sandbox its peer process is in,
        // or is closed unanswered.
        auto id = api->SandboxOfPeer(s.native_handle());
        if (!id) continue;
        auto taken = counter->Take(*id);
        if (!taken) continue;
        sandbox_slot.emplace(std::move(*taken));
        via = *id;
      }
      // A TCP caller is unknown until it authenticates; its oldest peers make room for
      // it. (The admin's socket is root's, and the in-sandbox one is capped per sandbox.)
      ConnBudget::Unknown unknown;
      if constexpr (std::is_same_v<decltype(s), asio::ip::tcp::socket>) {
        error_code peer_ec;
        auto peer = s.remote_endpoint(peer_ec);
        unknown = counter->Admit(peer_ec ? "" : peer.address().to_string(),
                                 [fd = s.native_handle()] { ::shutdown(fd, SHUT_RDWR); });
      }
      asio::co_spawn(asio::make_strand(*io),
                     Session(std::move(s), api, &opts, counter.get(), std::move(*slot),
                             std::move(sandbox_slot), via, std::move(unknown)),
                     asio::detached);
    }
  }

  // Listens on a unix socket at `path` (replacing a stale one) with file mode `mode`.
  Result<std::unique_ptr<asio::local::stream_protocol::acceptor>> ListenUnix(
      const std::string& path, mode_t mode) {
    error_code ec;
    ::unlink(path.c_str());
    auto acc = std::make_unique<asio::local::stream_protocol::acceptor>(*io);
    asio::local::stream_protocol::endpoint ep(path);
    acc->open(ep.protocol(), ec);
    if (!ec) acc->bind(ep, ec);
    if (!ec) acc->listen(asio::socket_base::max_listen_connections, ec);
    if (ec) return MakeError(Code::kUnavailable, "listen on " + path + ": " + ec.message());
    ::fcntl(acc->native_handle(), F_SETFD, FD_CLOEXEC);
    ::chmod(path.c_str(), mode);
    return acc;
  }
};

Server::Server(ServerOptions opts, Api* api, asio::io_context* io) : impl_(new Impl) {
  impl_->opts = std::move(opts);
  impl_->counter = std::make_shared<ConnBudget>(impl_->opts.limits);
  impl_->api = api;
  impl_->io = io;
}

Server::~Server() = default;

Status Server::Start() {
  error_code ec;
  auto addr = asio::ip::make_address(impl_->opts.listen_host, ec);
  if (ec) return MakeError(Code::kInvalidArgument, "bad listen address " + impl_->opts.listen_host);
  impl_->tcp = std::make_unique<asio::ip::tcp::acceptor>(*impl_->io);
  asio::ip::tcp::endpoint ep(addr, static_cast<unsigned short>(impl_->opts.listen_port));
  impl_->tcp->open(ep.protocol(), ec);
  if (!ec) impl_->tcp->set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) impl_->tcp->bind(ep, ec);
  if (!ec) impl_->tcp->listen(asio::socket_base::max_listen_connections, ec);
  if (ec)
    return MakeError(Code::kUnavailable, "listen on " + impl_->opts.listen_host + ":" +
                                             std::to_string(impl_->opts.listen_port) + ": " +
                                             ec.message());
  ::fcntl(impl_->tcp->native_handle(), F_SETFD, FD_CLOEXEC);
  asio::co_spawn(*impl_->io, impl_->AcceptLoop(impl_->tcp.get(), false), asio::detached);
  if (!impl_->opts.socket_path.empty()) {
    SBX_ASSIGN_OR_RETURN(impl_->unix_acc, impl_->ListenUnix(impl_->opts.socket_path, 0600));
    asio::co_spawn(*impl_->io, impl_->AcceptLoop(impl_->unix_acc.get(), false), asio::detached);
  }
  if (!impl_->opts.sandbox_socket_path.empty()) {
    // Sandboxes connect as their own (mapped) users; who is calling is the peer's cgroup.
    SBX_ASSIGN_OR_RETURN(impl_->sandbox_acc,
                         impl_->ListenUnix(impl_->opts.sandbox_socket_path, 0666));
    asio::co_spawn(*impl_->io, impl_->AcceptLoop(impl_->sandbox_acc.get(), true), asio::detached);
  }
  return OkStatus();
}

int Server::bound_port() const {
  error_code ec;
  auto ep = impl_->tcp->local_endpoint(ec);
  return ec ? -1 : ep.port();
}

}  // namespace sbx::api
