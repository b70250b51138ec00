// The sandbox routes: create, list, show, update, delete, the lifecycle (stop, start,
// pause, resume, timeout) and captures (snapshot, fork).
#include <boost/asio/this_coro.hpp>
#include <nlohmann/json.hpp>

#include "api/decode.h"
#include "api/errors.h"
#include "api/handler_util.h"
#include "api/handlers.h"
#include "api/render.h"
#include <set>

namespace sbx::api {

namespace asio = boost::asio;
using nlohmann::json;

asio::awaitable<Response> Api::CreateSandbox(Request& req) {
  auto decoded = DecodeCreate(req.body);
  if (!decoded.ok()) co_return ErrorResponse(decoded.error());
  auto v = co_await manager_->CreateCall(std::move(*decoded));
  if (!v.ok()) co_return ErrorResponse(v.error());
  co_return Json(201, SandboxJson(*v));
}

asio::awaitable<Response> Api::ListSandboxes(Request& req) {
  core::ListFilter f;
  for (const auto& [k, v] : req.query) {
    if (k == "name") f.name = v;
    else if (k == "state") f.state = v;
    else if (k.rfind("metadata.", 0) == 0 && k.size() > 9) f.metadata[k.substr(9)] = v;
    else co_return Bad("unknown filter \"" + k + "\"");
  }
  auto list = manager_->List(f);
  if (!list.ok()) co_return ErrorResponse(list.error());
  json arr = json::array();
  for (const auto& v : *list) arr.push_back(SandboxJson(v));
  co_return Json(200, {{"sandboxes", arr}});
}

asio::awaitable<Response> Api::GetSandbox(Request& req) {
  const std::string& id = req.params["id"];
  auto v = manager_->Get(id);
  if (!v.ok()) co_return ErrorResponse(v.error());
  co_return Json(200, SandboxJson(*v));
}

asio::awaitable<Response> Api::SandboxStats(Request& req) {
  auto st = manager_->Stats(req.params["id"]);
  if (!st.ok()) co_return ErrorResponse(st.error());
  // Disk use and network counters are not measured yet: null, not a made-up zero.
  co_return Json(200, {{"id", st->id},
                       {"state", st->state},
                       {"read_at", FormatRfc3339(st->read_ms)},
                       {"read_at_ms", st->read_ms},
                       {"cpu_ns", st->cpu_ns},
                       {"cpus", st->cpus},
                       {"memory_bytes", st->memory_bytes},
                       {"memory_limit_bytes", st->memory_limit_bytes},
                       {"processes", st->processes},
                       {"pids_limit", st->pids_limit},
                       {"disk_bytes", nullptr},
                       {"disk_limit_bytes", st->disk_limit_bytes},
                       {"network", nullptr}});
}

asio::awaitable<Response> Api::UpdateSandbox(Request& req) {
  const std::string& id = req.params["id"];
  auto j = ParseObject(req.body, {"ttl_seconds", "ttl_action", "idle_timeout_seconds", "auto_resume", "public"});
  if (!j.ok()) co_return ErrorResponse(j.error());
  core::UpdateRequest u;
  auto ttl = GetInt(*j, "ttl_seconds");
  auto idle = GetInt(*j, "idle_timeout_seconds");
  if (!ttl.ok()) co_return ErrorResponse(ttl.error());
  if (!idle.ok()) co_return ErrorResponse(idle.error());
  u.ttl_seconds = *ttl;
  u.idle_timeout_seconds = *idle;
  if (j->contains("ttl_action") && !(*j)["ttl_action"].is_null()) {
    auto a = GetString(*j, "ttl_action");
    if (!a.ok()) co_return ErrorResponse(a.error());
    u.ttl_action = *a;
  }
  if (j->contains("auto_resume") && !(*j)["auto_resume"].is_null()) {
    auto a = GetBool(*j, "auto_resume", true);
    if (!a.ok()) co_return ErrorResponse(a.error());
    u.auto_resume = *a;
  }
  if (j->contains("public") && !(*j)["public"].is_null()) {
    auto a = GetBool(*j, "public", false);
    if (!a.ok()) co_return ErrorResponse(a.error());
    u.public_ports = *a;
  }
  auto v = manager_->Update(id, u);
  if (!v.ok()) co_return ErrorResponse(v.error());
  co_return Json(200, SandboxJson(*v));
}

asio::awaitable<Response> Api::SetNetwork(Request& req) {
  // The whole `network` object: it replaces the sandbox's rules.
  auto parsed = ParseJson(req.body);
  if (!parsed.ok()) co_return ErrorResponse(parsed.error());
  json j = std::move(*parsed);
  if (!j.is_object()) co_return Bad("the body must be a network object {mode, allow, deny}");
  const std::string id = req.params["id"];
  std::function<Result<core::SandboxView>()> fn = [this, &id, &j] { return manager_->SetNetwork(id, j); };
  auto v = co_await RunBlocking(pool_, &fn);
  if (!v.ok()) co_return ErrorResponse(v.error());
  co_return Json(200, SandboxJson(*v));
}

asio::awaitable<Response> Api::DeleteSandbox(Request& req) {
  const std::string& id = req.params["id"];
  auto st = manager_->Delete(id);
  if (!st.ok()) co_return ErrorResponse(st.error());
  co_return Json(200, {{"type", "sandbox.deleted"}, {"id", id}});
}

asio::awaitable<Response> Api::SetTimeout(Request& req) {
  auto j = ParseObject(req.body, {"timeout_seconds"});
  if (!j.ok()) co_return ErrorResponse(j.error());
  auto t = GetInt(*j, "timeout_seconds");
  if (!t.ok()) co_return ErrorResponse(t.error());
  if (!*t) co_return Bad("timeout_seconds is required");
  core::UpdateRequest u;
  u.ttl_seconds = *t;
  auto v = manager_->Update(req.params["id"], u);
  if (!v.ok()) co_return ErrorResponse(v.error());
  co_return Json(200, SandboxJson(*v));
}

asio::awaitable<Response> Api::StopSandbox(Request& req) {
  auto j = ParseObject(req.body, {});
  if (!j.ok()) co_return ErrorResponse(j.error());
  std::string id = req.params["id"];
  std::function<Result<core::SandboxView>()> fn = [this, &id] { return manager_->Stop(id); };
  auto v = co_await RunBlocking(pool_, &fn);
  if (!v.ok()) co_return ErrorResponse(v.error());
  co_return Json(200, SandboxJson(*v));
}

asio::awaitable<Response> Api::StartSandbox(Request& req) {
  auto j = ParseObject(req.body, {});
  if (!j.ok()) co_return ErrorResponse(j.error());
  std::string id = req.params["id"];
  std::function<Result<core::SandboxView>()> fn = [this, &id] { return manager_->Start(id); };
  auto v = co_await RunBlocking(pool_, &fn);
  if (!v.ok()) co_return ErrorResponse(v.error());
  co_return Json(200, SandboxJson(*v));
}

asio::awaitable<Response> Api::PauseSandbox(Request& req) {
  auto j = ParseObject(req.body, {"mode"});
  if (!j.ok()) co_return ErrorResponse(j.error());
  auto mode = GetString(*j, "mode", "freeze");
  if (!mode.ok()) co_return ErrorResponse(mode.error());
  std::string id = req.params["id"];
  std::function<Result<core::SandboxView>()> fn = [this, &id, &mode] { return manager_->Pause(id, *mode); };
  auto v = co_await RunBlocking(pool_, &fn);
  if (!v.ok()) co_return ErrorResponse(v.error());
  co_return Json(200, SandboxJson(*v));
}

asio::awaitable<Response> Api::ResumeSandbox(Request& req) {
  auto j = ParseObject(req.body, {});
  if (!j.ok()) co_return ErrorResponse(j.error());
  std::string id = req.params["id"];
  std::function<Result<core::SandboxView>()> fn = [this, &id] { return manager_->Resume(id); };
  auto v = co_await RunBlocking(pool_, &fn);
  if (!v.ok()) co_return ErrorResponse(v.error());
  co_return Json(200, SandboxJson(*v));
}

asio::awaitable<Response> Api::SnapshotSandbox(Request& req) {
  auto j = ParseObject(req.body, {"name", "memory"});
  if (!j.ok()) co_return ErrorResponse(j.error());
  auto name = GetName(*j, "name");
  if (!name.ok()) co_return ErrorResponse(name.error());
  if (name->empty()) co_return Bad("name is required");
  auto memory = GetBool(*j, "memory", false);
  if (!memory.ok()) co_return ErrorResponse(memory.error());
  std::string id = req.params["id"];
  std::function<Result<storage::SnapshotRecord>()> fn = [this, &id, &name, &memory] {
    return manager_->Snapshot(id, *name, *memory);
  };
  int64_t t0 = NowUs();
  auto rec = co_await RunBlocking(pool_, &fn);
  if (!rec.ok()) co_return ErrorResponse(rec.error());
  manager_->latencies().snapshot.ObserveMs((NowUs() - t0) / 1000.0);
  json out = SnapshotJson(*rec);
  out["type"] = "snapshot.named.created";
  co_return Json(201, out);
}

asio::awaitable<Response> Api::ForkSandbox(Request& req) {
  auto j = ParseObject(req.body, {"count", "memory"});
  if (!j.ok()) co_return ErrorResponse(j.error());
  auto count = GetInt(*j, "count");
  if (!count.ok()) co_return ErrorResponse(count.error());
  auto memory = GetBool(*j, "memory", false);
  if (!memory.ok()) co_return ErrorResponse(memory.error());
  int64_t n = count->value_or(1);
  if (n < 1 || n > 64) co_return Bad("count must be between 1 and 64");
  std::string id = req.params["id"];
  std::function<Result<std::vector<core::SandboxView>>()> fn = [this, &id, n, &memory] {
    return manager_->Fork(id, static_cast<int>(n), *memory);
  };
  int64_t t0 = NowUs();
  auto list = co_await RunBlocking(pool_, &fn);
  if (!list.ok()) co_return ErrorResponse(list.error());
  manager_->latencies().fork.ObserveMs((NowUs() - t0) / 1000.0);
  json arr = json::array();
  for (const auto& v : *list) arr.push_back(SandboxJson(v));
  co_return Json(201, {{"sandboxes", arr}});
}

}  // namespace sbx::api
