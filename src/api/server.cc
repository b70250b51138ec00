#include "api/server.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/write.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>
#include <atomic>
#include <chrono>
#include <fstream>
#include <optional>

#include <nlohmann/json.hpp>

#include "agent/client.h"
#include "api/errors.h"
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

int64_t SteadyUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

template <typename Stream>
asio::awaitable<bool> WriteResponse(Stream& stream, const Response& r, bool keep_alive) {
  http::response<http::string_body> res{static_cast<http::status>(r.status), 11};
  res.set(http::field::server, "sbxd/" SBX_VERSION);
  res.set(http::field::content_type, r.content_type);
  res.keep_alive(keep_alive);
  res.body() = r.body;
  res.prepare_payload();
  error_code ec;
  co_await http::async_write(stream, res, asio::redirect_error(use_awaitable, ec));
  co_return !ec;
}

// Copies bytes from `from` to `to` (after `initial`) until `from` ends; then half-closes
// `to`. The session waits until both pumps of a proxied connection have ended.
struct PipeState {
  std::atomic<int> running{2};
};

template <typename From, typename To>
asio::awaitable<void> Pump(From* from, To* to, std::string initial, bool upstream_side,
                           std::shared_ptr<PipeState> state) {
  error_code ec;
  if (!initial.empty()) co_await asio::async_write(*to, asio::buffer(initial), asio::redirect_error(use_awaitable, ec));
  std::vector<char> buf(64 * 1024);
  while (!ec) {
    size_t n = co_await from->async_read_some(asio::buffer(buf), asio::redirect_error(use_awaitable, ec));
    if (n > 0) {
      error_code wec;
      co_await asio::async_write(*to, asio::buffer(buf.data(), n), asio::redirect_error(use_awaitable, wec));
      if (wec) {
        ec = wec;
        error_code ignored;
        from->close(ignored);  // nobody reads what it sends any more
        break;
      }
    }
  }
  error_code ignored;
  if (upstream_side) {
    // The sandbox's server finished (or failed): the exchange is over. Everything it sent
    // is written; shutting the client's socket both ways ends the other pump's read too.
    to->shutdown(asio::socket_base::shutdown_both, ignored);
    to->cancel(ignored);
  } else {
    // The client finished sending: tell the sandbox's server (it may still answer).
    to->shutdown(asio::socket_base::shutdown_send, ignored);
  }
  --state->running;
}

// One proxied exchange: the request goes to the port inside the sandbox (without the
// caller's credentials), then bytes flow both ways until the sandbox's side ends. A
// request without an Upgrade asks the sandbox's server to close after answering, so each
// proxied connection carries one request.
template <typename Stream>
asio::awaitable<void> Proxy(Stream& stream, beast::flat_buffer& buf, http::request_parser<http::empty_body>& hp,
                            Api* api, const ProxyTarget* t, Request* req, const ServerOptions* opts) {
  if (auto refused = api->ProxyRefusal(*t, *req)) {
    co_await WriteResponse(stream, *refused, false);
    co_return;
  }
  error_code ec;
  http::request_parser<http::string_body> sp{std::move(hp)};
  sp.body_limit(opts->max_body_bytes);
  co_await http::async_read(stream, buf, sp, asio::redirect_error(use_awaitable, ec));
  if (ec) {
    Response bad = ec == http::error::body_limit ? ErrorResponse(413, "too_large", "the request body is too large")
                                                 : ErrorResponse(400, "invalid_request", "malformed HTTP request: " + ec.message());
    co_await WriteResponse(stream, bad, false);
    co_return;
  }
  std::string id = t->id;
  auto lease = co_await api->ProxyLease(id);
  if (!lease.ok()) {
    Response r = ErrorResponse(lease.error());
    co_await WriteResponse(stream, r, false);
    co_return;
  }
  std::shared_ptr<core::AgentLease> held = *lease;
  auto ex = co_await asio::this_coro::executor;
  agent::Conn conn(ex);
  agent::AgentAddr addr = held->addr();
  auto st = co_await conn.Open(addr);
  if (st.ok()) {
    std::string open = nlohmann::json{{"port", t->port}}.dump();
    st = co_await conn.Send(agent::FrameType::kPortOpen, open);
  }
  if (st.ok()) {
    auto r = co_await conn.RecvResult();
    if (!r.ok()) st = r.error();
  }
  if (!st.ok()) {
    Response r = ErrorResponse(st.error());
    co_await WriteResponse(stream, r, false);
    co_return;
  }
  const auto& m = sp.get();
  bool upgrade = false;
  std::string head = std::string(m.method_string()) + " " + t->target + " HTTP/1.1\r\n";
  for (const auto& f : m) {
    std::string name(f.name_string());
    std::string lower = name;
    for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (lower == "upgrade") upgrade = true;
    // Credentials stay here; hop-by-hop headers are the proxy's own.
    if (lower == "authorization" || lower == "connection" || lower == "keep-alive" || lower == "te" ||
        lower == "transfer-encoding" || lower == "content-length" || lower == "proxy-authorization" ||
        lower == "proxy-connection" || lower == "trailer")
      continue;
    head += name + ": " + std::string(f.value()) + "\r\n";
  }
  head += upgrade ? "Connection: Upgrade\r\n" : "Connection: close\r\n";
  if (!m.body().empty() || m.method() == http::verb::post || m.method() == http::verb::put || m.method() == http::verb::patch)
    head += "Content-Length: " + std::to_string(m.body().size()) + "\r\n";
  head += "\r\n";
  head += m.body();
  // Whatever the client sent after this request (WebSocket frames after an upgrade).
  std::string leftover(static_cast<const char*>(buf.data().data()), buf.size());
  buf.consume(buf.size());
  auto state = std::make_shared<PipeState>();
  auto& up = conn.socket();
  auto strand = asio::make_strand(ex);
  asio::co_spawn(strand, Pump(&stream, &up, head + leftover, false, state), asio::detached);
  asio::co_spawn(strand, Pump(&up, &stream, std::string(), true, state), asio::detached);
  // The sockets live in this frame: it stays until both pumps are done with them.
  asio::steady_timer tick(ex);
  while (state->running.load() > 0) {
    tick.expires_after(std::chrono::milliseconds(20));
    co_await tick.async_wait(asio::redirect_error(use_awaitable, ec));
  }
}

// The sandbox a connection on the in-sandbox socket comes from: the cgroup of its peer
// process, read while a pidfd pins that process (so a reused pid cannot pass for it).
std::optional<std::string> PeerSandbox(int fd, const std::string& instance) {
#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77
#endif
  struct ucred cr = {};
  socklen_t len = sizeof cr;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) != 0 || cr.pid <= 0) return std::nullopt;
  int pidfd = -1;
  len = sizeof pidfd;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERPIDFD, &pidfd, &len) != 0 || pidfd < 0) return std::nullopt;
  UniqueFd pin(pidfd);
  std::ifstream in("/proc/" + std::to_string(cr.pid) + "/cgroup");
  std::string line, id;
  const std::string mark = "/sbx-" + instance + "/";
  while (std::getline(in, line)) {
    size_t at = line.find(mark);
    if (at == std::string::npos) continue;
    std::string rest = line.substr(at + mark.size());
    std::string this_id = rest.substr(0, rest.find('/'));
    if (!id.empty() && this_id != id) return std::nullopt;  // hierarchies disagree
    id = this_id;
  }
  if (id.empty() || !ValidName(id)) return std::nullopt;
  // Still the same process (not exited, so its pid was not reused) after the read.
  if (::syscall(SYS_pidfd_send_signal, pin.get(), 0, nullptr, 0) != 0) return std::nullopt;
  return id;
}

// A tty process's terminal over a WebSocket: binary messages from the client are its
// input; text messages are JSON controls ({"type":"resize","cols","rows"} and
// {"type":"eof"}). Its output (from the ring, from `since`) goes out as binary messages,
// then one text message {"type":"exit","exit_code","signal"} and a normal close.
template <typename Stream>
asio::awaitable<void> Terminal(Stream& stream, http::request_parser<http::empty_body>& hp, Api* api,
                               const Request* req) {
  namespace ws = beast::websocket;
  const std::string id = req->params.at("id");
  int64_t pid = 0;
  uint64_t since = 0;
  bool parsed = true;
  try {
    pid = std::stoll(req->params.at("pid"));
    if (req->query.count("since")) since = std::stoull(req->query.at("since"));
  } catch (...) {
    parsed = false;
  }
  if (!parsed) {
    Response bad = ErrorResponse(400, "invalid_request", "bad pid or since");
    co_await WriteResponse(stream, bad, false);
    co_return;
  }
  core::ProcessTable* table = api->processes();
  auto info = table->Get(id, pid);
  if (!info.ok() || !info->tty) {
    Response bad = info.ok() ? ErrorResponse(409, "conflict", "process " + std::to_string(pid) + " has no terminal (start it with tty: true)")
                             : ErrorResponse(info.error());
    co_await WriteResponse(stream, bad, false);
    co_return;
  }
  ws::stream<Stream&> w(stream);
  // Pings after 30 s of quiet; a client silent for 60 s more is gone.
  w.set_option(ws::stream_base::timeout{std::chrono::seconds(30), std::chrono::seconds(60), true});
  error_code ec;
  auto upgrade = hp.release();
  co_await w.async_accept(upgrade, asio::redirect_error(use_awaitable, ec));
  if (ec) co_return;
  auto reading = std::make_shared<std::atomic<bool>>(true);
  auto ex = co_await asio::this_coro::executor;
  auto strand = asio::make_strand(ex);
  auto reader = [](ws::stream<Stream&>* w, core::ProcessTable* table, std::string id, int64_t pid,
                   std::shared_ptr<std::atomic<bool>> reading) -> asio::awaitable<void> {
    while (true) {
      beast::flat_buffer b;
      error_code rec;
      co_await w->async_read(b, asio::redirect_error(use_awaitable, rec));
      if (rec) break;
      std::string data = beast::buffers_to_string(b.data());
      if (w->got_binary()) {
        (void)table->Stdin(id, pid, data, false);
        continue;
      }
      auto j = nlohmann::json::parse(data, nullptr, false);
      if (!j.is_object()) continue;
      std::string type = j.value("type", "");
      if (type == "resize" && j.contains("cols") && j.contains("rows") && j["cols"].is_number_integer() &&
          j["rows"].is_number_integer())
        (void)table->Resize(id, pid, j["cols"].get<int>(), j["rows"].get<int>());
      else if (type == "eof")
        (void)table->Stdin(id, pid, "", true);
      else if (type == "stdin" && j.contains("data") && j["data"].is_string())
        (void)table->Stdin(id, pid, j["data"].get<std::string>(), false);
    }
    *reading = false;
  };
  asio::co_spawn(strand, reader(&w, table, id, pid, reading), asio::detached);
  // The writer runs on the same strand as the reader.
  auto writer = [](ws::stream<Stream&>* w, core::ProcessTable* table, std::string id, int64_t pid, uint64_t next,
                   std::shared_ptr<std::atomic<bool>> reading) -> asio::awaitable<void> {
    asio::steady_timer tick(co_await asio::this_coro::executor);
    error_code wec;
    while (*reading) {
      auto rd = table->Read(id, pid, next, 64 * 1024);
      if (!rd.ok()) break;
      std::string out;
      for (const auto& c : rd->chunks) {
        out += c.data;
        next = c.seq + 1;
      }
      if (!out.empty()) {
        w->binary(true);
        co_await w->async_write(asio::buffer(out), asio::redirect_error(use_awaitable, wec));
        if (wec) break;
        continue;
      }
      if (!rd->info.running) {
        nlohmann::json exit = {{"type", "exit"},
                               {"exit_code", rd->info.exit_code ? nlohmann::json(*rd->info.exit_code) : nlohmann::json(nullptr)},
                               {"signal", rd->info.signal ? nlohmann::json(rd->info.signal) : nlohmann::json(nullptr)}};
        std::string text = exit.dump();
        w->text(true);
        co_await w->async_write(asio::buffer(text), asio::redirect_error(use_awaitable, wec));
        if (!wec) co_await w->async_close(ws::close_code::normal, asio::redirect_error(use_awaitable, wec));
        break;
      }
      tick.expires_after(std::chrono::milliseconds(10));
      co_await tick.async_wait(asio::redirect_error(use_awaitable, wec));
    }
  };
  auto writing = std::make_shared<std::atomic<bool>>(true);
  asio::co_spawn(strand, writer(&w, table, id, pid, since, reading), [writing](std::exception_ptr) { *writing = false; });
  // The stream lives in this frame: wait until both sides are done with it.
  asio::steady_timer tick(ex);
  auto cancel = std::make_shared<std::atomic<int>>(0);  // 0: not asked, 1: posted, 2: done
  while (*writing || *reading || *cancel == 1) {
    if (!*writing && *reading && *cancel == 0) {
      // The writer is done (the process ended, or the client is gone): end the reader too.
      *cancel = 1;
      asio::post(strand, [&w, cancel] {
        error_code ignored;
        beast::get_lowest_layer(w).cancel(ignored);
        *cancel = 2;
      });
    }
    tick.expires_after(std::chrono::milliseconds(20));
    co_await tick.async_wait(asio::redirect_error(use_awaitable, ec));
  }
}

template <typename Stream>
asio::awaitable<void> Session(Stream stream, Api* api, const ServerOptions* opts_ptr, std::string via_sandbox = "") {
  const ServerOptions& opts = *opts_ptr;
  beast::flat_buffer buf;
  // Room for 64 KiB reads: beast reads no more than the free capacity (at least 512 bytes),
  // and a body streamed to a file would otherwise come in 512-byte pieces.
  buf.reserve(64 * 1024);
  error_code ec;
  while (true) {
    http::request_parser<http::empty_body> hp;
    hp.header_limit(64 * 1024);
    hp.body_limit(opts.max_upload_bytes);
    co_await http::async_read_header(stream, buf, hp, asio::redirect_error(use_awaitable, ec));
    if (ec) {
      if (ec == http::error::body_limit) {
        Response bad = ErrorResponse(413, "too_large", "the request body is too large");
        co_await WriteResponse(stream, bad, false);
      } else if (ec != http::error::end_of_stream && ec != asio::error::eof &&
                 ec != asio::error::connection_reset && ec != asio::error::operation_aborted) {
        Response bad = ErrorResponse(400, "invalid_request", "malformed HTTP request: " + ec.message());
        co_await WriteResponse(stream, bad, false);
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
        Response bad = denied ? *denied : ErrorResponse(proxied->error());
        co_await WriteResponse(stream, bad, false);
      } else {
        ProxyTarget t = **proxied;
        co_await Proxy(stream, buf, hp, api, &t, &req, &opts);
      }
      break;  // a proxied connection carries one exchange
    }
    const RouteInfo* route = api->Match(req);
    if (route && std::string_view(route->pattern) == "/v1/sandboxes/{id}/processes/{pid}/tty" &&
        beast::websocket::is_upgrade(h)) {
      if (auto refused = api->Refusal(*route, req)) {
        co_await WriteResponse(stream, *refused, false);
      } else {
        co_await Terminal(stream, hp, api, &req);
      }
      break;
    }
    std::string tmp_file;
    if (route && route->large_body) {
      if (auto refused = api->Refusal(*route, req)) {
        // Refused before a byte of the body is stored; the connection closes after.
        co_await WriteResponse(stream, *refused, false);
        break;
      }
    }
    // A client that asks first (curl does for large bodies) is told to go on.
    if (route && beast::iequals(req.Header("expect"), "100-continue")) {
      static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      co_await asio::async_write(stream, asio::buffer(kContinue), asio::redirect_error(use_awaitable, ec));
      if (ec) break;
    }
    if (route && route->large_body) {
      tmp_file = api->tmp_dir() + "/upload-" + RandomHex(8);
      http::request_parser<http::file_body> fp{std::move(hp)};
      fp.body_limit(opts.max_upload_bytes);
      fp.get().body().open(tmp_file.c_str(), beast::file_mode::write, ec);
      if (ec) {
        Response bad = ErrorResponse(500, "internal", "cannot store the upload: " + ec.message());
        co_await WriteResponse(stream, bad, false);
        break;
      }
      co_await http::async_read(stream, buf, fp, asio::redirect_error(use_awaitable, ec));
      fp.get().body().close();
      req.body_file = tmp_file;
    } else {
      http::request_parser<http::string_body> sp{std::move(hp)};
      sp.body_limit(opts.max_body_bytes);
      co_await http::async_read(stream, buf, sp, asio::redirect_error(use_awaitable, ec));
      if (!ec) req.body = std::move(sp.get().body());
    }
    if (ec) {
      if (!tmp_file.empty()) ::unlink(tmp_file.c_str());
      if (ec == http::error::body_limit) {
        Response bad = ErrorResponse(413, "too_large", "the request body is too large");
        co_await WriteResponse(stream, bad, false);
      } else if (ec != http::error::end_of_stream && ec != asio::error::eof &&
                 ec != asio::error::connection_reset) {
        Response bad = ErrorResponse(400, "invalid_request", "malformed HTTP request: " + ec.message());
        co_await WriteResponse(stream, bad, false);
      }
      break;
    }
    Response resp = co_await api->Handle(req);
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
    http::response<http::empty_body> head{http::status::ok, 11};
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
  std::unique_ptr<asio::ip::tcp::acceptor> tcp;
  std::unique_ptr<asio::local::stream_protocol::acceptor> unix_acc;
  std::unique_ptr<asio::local::stream_protocol::acceptor> sandbox_acc;

  asio::awaitable<void> AcceptTcp() {
    while (true) {
      error_code ec;
      asio::ip::tcp::socket s = co_await tcp->async_accept(asio::redirect_error(use_awaitable, ec));
      if (ec) {
        if (ec == asio::error::operation_aborted) co_return;
        continue;
      }
      ::fcntl(s.native_handle(), F_SETFD, FD_CLOEXEC);
      s.set_option(asio::ip::tcp::no_delay(true), ec);
      asio::co_spawn(*io, Session(std::move(s), api, &opts), asio::detached);
    }
  }
  // A unix socket's connections. On the in-sandbox socket (`sandboxes`) each is the
  // sandbox its peer process is in, or is closed unanswered.
  asio::awaitable<void> AcceptUnix(asio::local::stream_protocol::acceptor* acc, bool sandboxes) {
    while (true) {
      error_code ec;
      auto s = co_await acc->async_accept(asio::redirect_error(use_awaitable, ec));
      if (ec) {
        if (ec == asio::error::operation_aborted) co_return;
        continue;
      }
      ::fcntl(s.native_handle(), F_SETFD, FD_CLOEXEC);
      std::string via;
      if (sandboxes) {
        auto id = PeerSandbox(s.native_handle(), opts.instance);
        if (!id) continue;  // not from a sandbox of this daemon
        via = *id;
      }
      asio::co_spawn(*io, Session(std::move(s), api, &opts, via), asio::detached);
    }
  }

  // Listens on a unix socket at `path` (replacing a stale one) with file mode `mode`.
  Result<std::unique_ptr<asio::local::stream_protocol::acceptor>> ListenUnix(const std::string& path, mode_t mode) {
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
                                             std::to_string(impl_->opts.listen_port) + ": " + ec.message());
  ::fcntl(impl_->tcp->native_handle(), F_SETFD, FD_CLOEXEC);
  asio::co_spawn(*impl_->io, impl_->AcceptTcp(), asio::detached);
  if (!impl_->opts.socket_path.empty()) {
    SBX_ASSIGN_OR_RETURN(impl_->unix_acc, impl_->ListenUnix(impl_->opts.socket_path, 0600));
    asio::co_spawn(*impl_->io, impl_->AcceptUnix(impl_->unix_acc.get(), false), asio::detached);
  }
  if (!impl_->opts.sandbox_socket_path.empty()) {
    // Sandboxes connect as their own (mapped) users; who is calling is the peer's cgroup.
    SBX_ASSIGN_OR_RETURN(impl_->sandbox_acc, impl_->ListenUnix(impl_->opts.sandbox_socket_path, 0666));
    asio::co_spawn(*impl_->io, impl_->AcceptUnix(impl_->sandbox_acc.get(), true), asio::detached);
  }
  return OkStatus();
}

int Server::bound_port() const {
  error_code ec;
  auto ep = impl_->tcp->local_endpoint(ec);
  return ec ? -1 : ep.port();
}

}  // namespace sbx::api
