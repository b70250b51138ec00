#include "api/terminal_ws.h"

#include <atomic>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>
#include <chrono>
#include <nlohmann/json.hpp>

#include "api/errors.h"

namespace sbx::api {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using asio::use_awaitable;
using boost::system::error_code;

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
    Response bad = ErrorResponse(Code::kInvalidArgument, "bad pid or since");
    co_await WriteResponse(stream, bad, false);
    co_return;
  }
  core::ProcessTable* table = api->processes();
  auto info = table->Get(id, pid);
  if (!info.ok() || !info->tty) {
    Response bad = info.ok() ? ErrorResponse(Code::kFailedPrecondition, "process " + std::to_string(pid) +
                                                 " has no terminal (start it with tty: true)")
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
      if (type == "resize" && j.contains("cols") && j.contains("rows") &&
          j["cols"].is_number_integer() && j["rows"].is_number_integer())
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
  auto writer = [](ws::stream<Stream&>* w, core::ProcessTable* table, std::string id, int64_t pid,
                   uint64_t next,
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
        nlohmann::json exit = {
            {"type", "exit"},
            {"exit_code",
             rd->info.exit_code ? nlohmann::json(*rd->info.exit_code) : nlohmann::json(nullptr)},
            {"signal",
             rd->info.signal ? nlohmann::json(rd->info.signal) : nlohmann::json(nullptr)}};
        std::string text = exit.dump();
        w->text(true);
        co_await w->async_write(asio::buffer(text), asio::redirect_error(use_awaitable, wec));
        if (!wec)
          co_await w->async_close(ws::close_code::normal, asio::redirect_error(use_awaitable, wec));
        break;
      }
      tick.expires_after(std::chrono::milliseconds(10));
      co_await tick.async_wait(asio::redirect_error(use_awaitable, wec));
    }
  };
  auto writing = std::make_shared<std::atomic<bool>>(true);
  asio::co_spawn(strand, writer(&w, table, id, pid, since, reading),
                 [writing](std::exception_ptr) { *writing = false; });
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

template asio::awaitable<void> Terminal<TcpStream>(TcpStream&,
                                                   http::request_parser<http::empty_body>&, Api*,
                                                   const Request*);
template asio::awaitable<void> Terminal<UnixStream>(UnixStream&,
                                                    http::request_parser<http::empty_body>&, Api*,
                                                    const Request*);

}  // namespace sbx::api
