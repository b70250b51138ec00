// The exec route: a command in a sandbox, answered whole (JSON) or streamed (NDJSON).
#include <boost/asio/this_coro.hpp>
#include <nlohmann/json.hpp>

#include "api/decode.h"
#include "api/errors.h"
#include "api/handler_util.h"
#include "api/handlers.h"
#include "api/render.h"
#include "base/base64.h"
#include <array>
#include <memory>

namespace sbx::api {

namespace asio = boost::asio;
using nlohmann::json;

asio::awaitable<Response> Api::ExecInSandbox(Request& req) {
  auto j = ParseObject(req.body, {"cmd", "cwd", "env", "stdin", "timeout_seconds", "encoding", "user"});
  if (!j.ok()) co_return ErrorResponse(j.error());
  auto b64 = GetBase64Encoding(*j);
  if (!b64.ok()) co_return ErrorResponse(b64.error());
  const bool base64 = *b64;
  core::ExecRequest e;
  e.arrival_us = req.arrival_us;
  if (auto st = DecodeCommand(*j, &e); !st.ok()) co_return ErrorResponse(st.error());
  auto timeout = GetInt(*j, "timeout_seconds");
  if (!timeout.ok()) co_return ErrorResponse(timeout.error());
  e.timeout_seconds = timeout->value_or(60);
  if (j->contains("stdin") && !(*j)["stdin"].is_null()) {
    if (!(*j)["stdin"].is_string()) co_return Bad("stdin must be a string");
    e.stdin_data = (*j)["stdin"].get<std::string>();
    if (base64) {
      auto raw = Base64Decode(*e.stdin_data);
      if (!raw.ok()) co_return Bad("stdin (encoding base64) is " + raw.error().message);
      e.stdin_data = std::move(*raw);
    }
  }
  e.cancel = req.client_gone;  // a client that goes away stops its command
  std::string id = req.params["id"];
  auto ex = co_await asio::this_coro::executor;
  bool ndjson = req.Header("accept").find("application/x-ndjson") != std::string::npos;
  if (!ndjson) {
    Collector out;
    agent::OutputFn collect = out.Fn();
    auto res = co_await manager_->Exec(ex, id, std::move(e), collect);
    if (!res.ok()) co_return ErrorResponse(res.error());
    json head = ExitJson(*res);
    co_return out.Answer(200, std::move(head), manager_->output_cap(), base64);
  }
  Response r;
  r.content_type = "application/x-ndjson";
  auto* mgr = manager_;
  r.stream = [mgr, ex, id, base64, e = std::move(e)](ChunkSink sink) mutable
      -> asio::awaitable<std::optional<Response>> {
    auto carry = std::make_shared<std::array<std::string, 2>>();
    auto gone = std::make_shared<bool>(false);
    auto started = std::make_shared<bool>(false);
    agent::OutputFn forward = [sink, carry, gone, started, base64](agent::FrameType t,
                                                                   std::string_view d) -> asio::awaitable<void> {
      if (*gone) co_return;
      json line;
      if (t == agent::FrameType::kKeepalive) {
        line = {{"type", "keepalive"}};
      } else {
        int k = t == agent::FrameType::kStdout ? 0 : 1;
        // Text never splits a UTF-8 character across lines; base64 carries the bytes as read.
        std::string text = base64 ? Base64Encode(d) : TakeUtf8((*carry)[k], d);
        if (text.empty()) co_return;
        line = {{"type", k == 0 ? "stdout" : "stderr"}, {"data", text}};
      }
      *started = true;
      std::string out = line.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
      if (!co_await sink(out)) *gone = true;
    };
    auto res = co_await mgr->Exec(ex, id, std::move(e), forward);
    if (!res.ok()) {
      if (!*started) co_return ErrorResponse(res.error());
      json line = {{"type", "error"}, {"error", {{"code", ErrorCode(res.error().code)}, {"message", res.error().message}}}};
      std::string out = line.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
      co_await sink(out);
      co_return std::nullopt;
    }
    for (int k = 0; k < 2; ++k)
      if (!(*carry)[k].empty()) {
        json line = {{"type", k == 0 ? "stdout" : "stderr"}, {"data", (*carry)[k]}};
        std::string out = line.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
        co_await sink(out);
      }
    json last = ExitJson(*res);
    last["type"] = "exit";
    std::string out = last.dump() + "\n";
    co_await sink(out);
    co_return std::nullopt;
  };
  co_return r;
}

}  // namespace sbx::api
