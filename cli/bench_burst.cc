// See bench_burst.h.
#include "bench_burst.h"

#include <unistd.h>

#include <memory>
#include <thread>

#include "http_client.h"
#include "stats.h"

namespace sbx::cli {

using nlohmann::json;

Burst BurstCreates(const Globals& g, const json& body, int n) {
  struct One {
    std::unique_ptr<HttpClient> c;
    int status = 0;
    double ms = 0;
    std::string id, error;
  };
  std::vector<One> all(n);
  // Connected first (a HEALTH call each), so that the creates leave together.
  for (auto& o : all) {
    o.c = std::make_unique<HttpClient>(g.url, g.api_key);
    (void)o.c->Call("GET", "/v1/health");
  }
  std::vector<std::thread> threads;
  const std::string text = body.dump();
  for (auto& o : all)
    threads.emplace_back([&o, &text] {
      auto t0 = Clock::now();
      auto r = o.c->Call("POST", "/v1/sandboxes", text);
      o.ms = Ms(t0, Clock::now());
      if (!r.ok()) {
        o.error = r.error().message;
        return;
      }
      o.status = r->status;
      auto j = json::parse(r->body, nullptr, false);
      if (r->status == 201 && j.is_object()) o.id = j.value("id", "");
      else if (r->status != 429) o.error = ErrorMessage(*r);
    });
  for (auto& t : threads) t.join();
  Burst b;
  for (auto& o : all) {
    if (o.status == 201) b.answered_ms.push_back(o.ms);
    else if (o.status == 429) b.refused_ms.push_back(o.ms);
    else if (++b.failed == 1) b.failure = o.error;
    if (!o.id.empty()) (void)o.c->Call("DELETE", "/v1/sandboxes/" + o.id);
  }
  return b;
}

std::vector<double> MemoryTemplateCreates(const Globals& g, const std::string& isolation, int runs, std::string* why) {
  HttpClient c(g.url, g.api_key);
  json body = {{"type", "small"}, {"image", "busybox"}, {"no_env", true}, {"ttl_seconds", 600}};
  if (!isolation.empty()) body["isolation"] = isolation;
  std::vector<double> out;
  auto src = CallJson(c, "POST", "/v1/sandboxes", body);
  if (!src) {
    *why = "could not create its source";
    return out;
  }
  const std::string sid = (*src)["id"];
  const std::string name = "bench-mem-" + std::to_string(getpid());
  (void)c.Call("POST", "/v1/sandboxes/" + sid + "/exec",
               json{{"cmd", "(while :; do date > /tmp/now; sleep 0.1; done) >/dev/null 2>&1 &"}}.dump());
  auto snap = c.Call("POST", "/v1/sandboxes/" + sid + "/snapshot", json{{"name", name}, {"memory", true}}.dump());
  if (!snap.ok() || snap->status >= 300) {
    *why = snap.ok() ? ErrorMessage(*snap) : snap.error().message;
  } else {
    json from = {{"type", "small"}, {"from", name}, {"no_env", true}, {"ttl_seconds", 600}};
    if (!isolation.empty()) from["isolation"] = isolation;
    for (int i = 0; i < runs + 1; ++i) {  // the first is a warm-up (the images read cold)
      auto t0 = Clock::now();
      auto r = c.Call("POST", "/v1/sandboxes", from.dump());
      double ms = Ms(t0, Clock::now());
      if (!r.ok() || r->status != 201) {
        *why = r.ok() ? ErrorMessage(*r) : r.error().message;
        out.clear();
        break;
      }
      auto j = json::parse(r->body, nullptr, false);
      if (i > 0) out.push_back(ms);
      (void)c.Call("DELETE", "/v1/sandboxes/" + j.value("id", ""));
    }
    (void)c.Call("DELETE", "/v1/snapshots/" + name);
  }
  (void)c.Call("DELETE", "/v1/sandboxes/" + sid);
  return out;
}

}  // namespace sbx::cli
