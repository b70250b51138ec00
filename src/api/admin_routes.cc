// Daemon-wide routes: health, the OpenAPI document, metrics, usage and secrets.
#include <boost/asio/this_coro.hpp>
#include <nlohmann/json.hpp>

#include "api/decode.h"
#include "api/errors.h"
#include "api/handler_util.h"
#include "api/handlers.h"
#include "api/render.h"
#include "base/ids.h"
#include "base/proc.h"
#include <cmath>
#include <sstream>

namespace sbx::api {

namespace asio = boost::asio;
using nlohmann::json;

asio::awaitable<Response> Api::Health(Request& req) {
  // One shape that later walls extend: what this daemon has, then the store's use.
  core::SandboxManager::Features f = manager_->GetFeatures();
  json health = {{"status", "ok"},
                 {"version", SBX_VERSION},
                 {"features", {{"hibernate", f.hibernate},
                               {"hibernate_isolation", f.hibernate_isolation},
                               {"memory_isolation", f.memory_isolation},
                               {"store", f.store},
                               {"isolation", f.isolation}}},
                 // The microVM wall's accelerator (null: no such wall, or its probe still runs).
                 {"microvm_accel", f.microvm_accel.empty() ? json(nullptr) : json(f.microvm_accel)},
                 // And how it reaches its guests' agents (microvm_runtime.cc: vsock or serial).
                 {"microvm_channel", f.microvm_channel.empty() ? json(nullptr) : json(f.microvm_channel)}};
  if (f.store) {
    core::StoreStats s = manager_->StoreUse();
    health["store"] = {{"size_mb", s.size_mb},           {"free_mb", s.free_mb},
                       {"reserve_mb", s.reserve_mb},     {"committed_mb", s.committed_mb},
                       {"overcommit", s.overcommit > 0 ? json(s.overcommit) : json(nullptr)}};
  } else {
    health["store"] = nullptr;
  }
  co_return Json(200, health);
}

asio::awaitable<Response> Api::OpenApi(Request& req) {
  Response r;
  r.body = OpenApiDocument();
  co_return r;
}

asio::awaitable<Response> Api::Metrics(Request& req) {
  auto c = manager_->GetCounts();
  std::ostringstream o;
  o << "# HELP sbx_sandboxes Sandboxes by state.\n# TYPE sbx_sandboxes gauge\n";
  for (const auto& [k, n] : c.by_state)
    o << "sbx_sandboxes{state=\"" << k.first << "\",isolation=\"" << k.second << "\"} " << n << "\n";
  o << "# TYPE sbx_creates_total counter\nsbx_creates_total " << c.creates << "\n";
  o << "# TYPE sbx_execs_total counter\nsbx_execs_total " << c.execs << "\n";
  o << "# TYPE sbx_deletes_total counter\nsbx_deletes_total " << c.deletes << "\n";
  o << "# TYPE sbx_snapshots_total counter\nsbx_snapshots_total " << c.snapshots << "\n";
  o << "# TYPE sbx_forks_total counter\nsbx_forks_total " << c.forks << "\n";
  o << "# TYPE sbx_pauses_total counter\nsbx_pauses_total " << c.pauses << "\n";
  o << "# TYPE sbx_resumes_total counter\nsbx_resumes_total " << c.resumes << "\n";
  auto& lat = manager_->latencies();
  lat.create.Write(o, "sbx_create_seconds", "Time to create a sandbox, to ready.");
  lat.exec.Write(o, "sbx_exec_seconds", "Time of an exec, from arrival to its answer.");
  lat.snapshot.Write(o, "sbx_snapshot_seconds", "Time to take a named snapshot.");
  lat.fork.Write(o, "sbx_fork_seconds", "Time to fork a sandbox (all its copies).");
  lat.pause.Write(o, "sbx_pause_seconds", "Time to pause (freeze) a sandbox.");
  lat.resume.Write(o, "sbx_resume_seconds", "Time to resume (thaw) a frozen sandbox.");
  lat.hibernate.Write(o, "sbx_hibernate_seconds", "Time to hibernate a sandbox (checkpoint to disk).");
  lat.restore.Write(o, "sbx_restore_seconds", "Time to resume a hibernated sandbox (restore from disk).");
  lat.disk_exec.Write(o, "sbx_disk_exec_seconds", "Time of a serverless call on a disk, end to end.");
  o << "# HELP sbx_pool_ready Booted, warmed sandboxes waiting in the warm pool.\n"
    << "# TYPE sbx_pool_ready gauge\nsbx_pool_ready " << c.pooled << "\n";
  o << "# TYPE sbx_pool_claims_total counter\nsbx_pool_claims_total " << c.pool_claims << "\n";
  o << "# HELP sbx_network_bytes Bytes the sandboxes there are now sent and received through their links.\n"
    << "# TYPE sbx_network_bytes gauge\nsbx_network_bytes{direction=\"tx\"} " << c.net_tx_bytes
    << "\nsbx_network_bytes{direction=\"rx\"} " << c.net_rx_bytes << "\n";
  o << "# TYPE sbx_dns_queries_total counter\nsbx_dns_queries_total " << c.dns_queries << "\n"
    << "# TYPE sbx_dns_refused_total counter\nsbx_dns_refused_total " << c.dns_refused << "\n"
    << "# TYPE sbx_dns_rebinding_total counter\nsbx_dns_rebinding_total " << c.dns_rebinding << "\n"
    << "# HELP sbx_dns_rate_limited_total Queries refused because their sandbox asked more than --net-dns-rate a second.\n"
    << "# TYPE sbx_dns_rate_limited_total counter\nsbx_dns_rate_limited_total " << c.dns_rate_limited << "\n";
  o << "# TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes "
    << proc::SelfRssBytes() << "\n";
  o << "# HELP process_resident_memory_peak_bytes The most resident memory sbxd has had.\n"
    << "# TYPE process_resident_memory_peak_bytes gauge\nprocess_resident_memory_peak_bytes "
    << proc::SelfPeakRssBytes() << "\n";
  o << "# TYPE process_open_fds gauge\nprocess_open_fds " << proc::SelfFdCount() << "\n";
  Response r;
  r.content_type = "text/plain; version=0.0.4";
  r.body = o.str();
  co_return r;
}

asio::awaitable<Response> Api::Usage(Request& req) {
  int64_t now = NowUnixMs();
  int64_t from = 0, to = now + 1;
  for (const auto& [k, v] : req.query) {
    if (k != "from" && k != "to") co_return Bad("unknown parameter \"" + k + "\" (from, to)");
    int64_t t = ParseTimeMs(v);
    if (t < 0) co_return Bad(k + " must be an RFC 3339 time (2026-01-31T12:00:00Z) or Unix seconds");
    (k == "from" ? from : to) = t;
  }
  auto u = manager_->metering().Usage(from, to);
  if (!u.ok()) co_return ErrorResponse(u.error());
  auto r6 = [](double x) { return std::round(x * 1e9) / 1e9; };
  auto r3 = [](double x) { return std::round(x * 1000) / 1000; };
  json sbs = json::array();
  for (const auto& l : u->sandboxes) {
    json line = {{"id", l.id}, {"name", l.name.empty() ? json(nullptr) : json(l.name)}, {"type", l.type},
                 {"billed_seconds", r3(l.seconds)}, {"cost_usd", r6(l.cost_usd)}};
    // Bytes through its links within the window (deleted sandboxes' too).
    line["network"] = {{"tx_bytes", l.tx_bytes}, {"rx_bytes", l.rx_bytes}};
    sbs.push_back(line);
  }
  json types = json::object();
  for (const auto& [t, sc] : u->by_type) types[t] = {{"billed_seconds", r3(sc.first)}, {"cost_usd", r6(sc.second)}};
  co_return Json(200, {{"from", FormatRfc3339(u->from_ms)},
                       {"to", FormatRfc3339(u->to_ms)},
                       {"sandboxes", sbs},
                       {"types", types},
                       {"serverless", {{"calls", u->calls}, {"cost_usd", r6(u->calls_usd)}}},
                       {"total", {{"billed_seconds", r3(u->seconds)},
                                  {"compute_usd", r6(u->compute_usd)},
                                  {"cost_usd", r6(u->total_usd)},
                                  {"network", {{"tx_bytes", u->tx_bytes}, {"rx_bytes", u->rx_bytes}}}}}});
}

asio::awaitable<Response> Api::ListSecrets(Request& req) {
  auto list = manager_->secrets().List();
  if (!list.ok()) co_return ErrorResponse(list.error());
  json arr = json::array();
  for (const auto& [name, ms] : *list) arr.push_back({{"name", name}, {"updated_at", FormatRfc3339(ms)}});
  co_return Json(200, {{"secrets", arr}});  // names only: values never leave sbxd but into sandboxes
}

asio::awaitable<Response> Api::SetSecret(Request& req) {
  const std::string& name = req.params["name"];
  auto j = ParseObject(req.body, {"value"});
  if (!j.ok()) co_return ErrorResponse(j.error());
  if (!j->contains("value") || !(*j)["value"].is_string()) co_return Bad("value (a string) is required");
  auto st = manager_->secrets().Set(name, (*j)["value"].get<std::string>());
  if (!st.ok()) co_return ErrorResponse(st.error());
  co_return Json(200, {{"type", "secret.set"}, {"name", name}});
}

asio::awaitable<Response> Api::DeleteSecret(Request& req) {
  const std::string& name = req.params["name"];
  auto st = manager_->secrets().Delete(name);
  if (!st.ok()) co_return ErrorResponse(st.error());
  co_return Json(200, {{"type", "secret.deleted"}, {"name", name}});
}

}  // namespace sbx::api
