// The code interpreter's routes: a cell (answered whole as JSON, in E2B's execution
// shape, or streamed as NDJSON) and the contexts (create, list, restart, delete).
#include <boost/asio/this_coro.hpp>
#include <memory>
#include <nlohmann/json.hpp>
#include <utility>

#include "api/decode.h"
#include "api/errors.h"
#include "api/handler_util.h"
#include "api/handlers.h"
#include "api/render.h"

namespace sbx::api {

namespace asio = boost::asio;
using nlohmann::json;

namespace {

json ContextJson(const core::CodeContext& c) {
  return {{"id", c.id}, {"language", c.language}, {"cwd", c.cwd}, {"user", c.user}, {"pid", c.pid},
          {"started_at", FormatRfc3339(c.started_ms)}};
}

std::string Line(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n"; }

// The stream's last line (outside the coroutine: g++ 12 mishandles initializer lists there).
std::string EndLine(const Result<core::CellEnd>& end) {
  if (!end.ok()) {
    json failed = {{"type", "error"}, {"error", {{"code", ErrorCode(end.error().code)}, {"message", end.error().message}}}};
    return Line(failed);
  }
  json last = {{"type", "end"},
               {"execution_count", end->execution_count},
               {"context", end->context},
               {"timed_out", end->timed_out},
               {"restarted", end->restarted}};
  return Line(last);
}

// A string field of a message, or "" (a cell may have forged the message).
std::string Text(const json& m, const char* k) {
  auto it = m.find(k);
  return it != m.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// The whole answer of a cell: what it printed, its results and its error, as E2B's
// Execution has them; past `cap` bytes of output and results the rest is left out
// (`truncated`), so that a cell that prints without end cannot fill sbxd's memory.
struct Execution {
  explicit Execution(uint64_t cap) : cap(cap) {}
  uint64_t cap, bytes = 0;
  bool truncated = false;
  json results = json::array(), stdout_parts = json::array(), stderr_parts = json::array(), error = nullptr;
  bool Room(uint64_t n) {
    if (bytes + n > cap) truncated = true;
    else bytes += n;
    return !truncated;
  }
  void Add(const json& m) {
    const std::string t = Text(m, "type");
    if (t == "stdout" || t == "stderr") {
      std::string text = Text(m, "text");
      if (Room(text.size())) (t == "stdout" ? stdout_parts : stderr_parts).push_back(std::move(text));
    } else if (t == "error") {
      error = {{"name", Text(m, "name")}, {"value", Text(m, "value")}, {"traceback", Text(m, "traceback")}};
    } else if (t == "result" && Room(m.dump().size())) {
      json r = m;
      r.erase("type");
      results.push_back(std::move(r));
    }
  }
  json Answer(const core::CellEnd& end) const {
    return {{"results", results},
            {"logs", {{"stdout", stdout_parts}, {"stderr", stderr_parts}}},
            {"error", error},
            {"execution_count", end.execution_count},
            {"context", end.context},
            {"timed_out", end.timed_out},
            {"restarted", end.restarted},
            {"truncated", truncated}};
  }
};

}  // namespace

asio::awaitable<Response> Api::RunCode(Request& req) {
  auto j = ParseObject(req.body, {"code", "language", "context", "env", "timeout_seconds"});
  if (!j.ok()) co_return ErrorResponse(j.error());
  if (!j->contains("code") || !(*j)["code"].is_string()) co_return Bad("code is required (a string)");
  core::CodeCell cell;
  cell.code = (*j)["code"].get<std::string>();
  auto language = GetString(*j, "language");
  auto context = GetString(*j, "context");
  auto env = GetStringMap(*j, "env");
  auto timeout = GetInt(*j, "timeout_seconds");
  if (!language.ok()) co_return ErrorResponse(language.error());
  if (!context.ok()) co_return ErrorResponse(context.error());
  if (!env.ok()) co_return ErrorResponse(env.error());
  if (!timeout.ok()) co_return ErrorResponse(timeout.error());
  cell.language = *language;
  cell.context = *context;
  cell.env = *env;
  cell.timeout_seconds = timeout->value_or(300);
  const std::string id = req.params["id"];
  auto ex = co_await asio::this_coro::executor;
  if (req.Header("accept").find("application/x-ndjson") == std::string::npos) {
    auto exec = std::make_shared<Execution>(manager_->output_cap());
    // Named, not a temporary of the co_await's expression (g++ 12 destroys those twice).
    core::CellEventFn collect = [exec](const json& m) -> asio::awaitable<void> {
      exec->Add(m);
      co_return;
    };
    auto end = co_await code_->Run(ex, id, std::move(cell), collect);
    if (!end.ok()) co_return ErrorResponse(end.error());
    co_return Json(200, exec->Answer(*end));
  }
  Response r;
  r.content_type = "application/x-ndjson";
  core::CodeContexts* code = code_.get();
  r.stream = [code, ex, id, cell = std::move(cell)](ChunkSink sink) mutable -> asio::awaitable<std::optional<Response>> {
    auto started = std::make_shared<bool>(false);
    auto gone = std::make_shared<bool>(false);
    core::CellEventFn forward = [sink, started, gone](const json& m) -> asio::awaitable<void> {
      *started = true;
      std::string line = Line(m);
      if (!*gone && !co_await sink(line)) *gone = true;  // the cell runs on to its end
    };
    auto end = co_await code->Run(ex, id, std::move(cell), forward);
    if (!end.ok() && !*started) co_return ErrorResponse(end.error());
    std::string last = EndLine(end);
    co_await sink(last);
    co_return std::nullopt;
  };
  co_return r;
}

asio::awaitable<Response> Api::CodeContexts(Request& req) {
  const std::string id = req.params["id"];
  auto ex = co_await asio::this_coro::executor;
  if (req.pattern == "/v1/sandboxes/{id}/code/contexts" && req.method == "POST") {
    auto j = ParseObject(req.body, {"language", "cwd", "user"});
    if (!j.ok()) co_return ErrorResponse(j.error());
    auto language = GetString(*j, "language");
    auto cwd = GetString(*j, "cwd");
    auto user = GetString(*j, "user");
    if (!language.ok()) co_return ErrorResponse(language.error());
    if (!cwd.ok()) co_return ErrorResponse(cwd.error());
    if (!user.ok()) co_return ErrorResponse(user.error());
    auto c = co_await code_->Create(ex, id, *language, *cwd, *user);
    if (!c.ok()) co_return ErrorResponse(c.error());
    json out = ContextJson(*c);
    out["type"] = "code_context.created";
    co_return Json(201, out);
  }
  if (req.method == "GET") {
    auto list = code_->List(id);
    if (!list.ok()) co_return ErrorResponse(list.error());
    json arr = json::array();
    for (const auto& c : *list) arr.push_back(ContextJson(c));
    co_return Json(200, {{"contexts", arr}});
  }
  const std::string ctx = req.params["ctx"];
  if (req.method == "DELETE") {
    if (auto st = code_->Delete(id, ctx); !st.ok()) co_return ErrorResponse(st.error());
    co_return Json(200, {{"type", "code_context.deleted"}, {"id", ctx}});
  }
  auto j = ParseObject(req.body, {});
  if (!j.ok()) co_return ErrorResponse(j.error());
  auto c = co_await code_->Restart(ex, id, ctx);
  if (!c.ok()) co_return ErrorResponse(c.error());
  json out = ContextJson(*c);
  out["type"] = "code_context.restarted";
  co_return Json(200, out);
}

}  // namespace sbx::api
