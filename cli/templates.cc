// `sbx template build` and `sbx bench patterns`.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli.h"
#include "http_client.h"

namespace sbx::cli {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

double Secs(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// A JSON call that must succeed; the error is printed and nullopt returned otherwise.
std::optional<json> Must(HttpClient& c, const std::string& method, const std::string& target, const json& body) {
  auto r = c.Call(method, target, body.is_null() ? "" : body.dump());
  if (!r.ok()) {
    std::fprintf(stderr, "sbx: %s\n", r.error().message.c_str());
    return std::nullopt;
  }
  if (r->status >= 300) {
    std::fprintf(stderr, "sbx: %s\n", ErrorMessage(*r).c_str());
    return std::nullopt;
  }
  auto j = json::parse(r->body, nullptr, false);
  if (j.is_discarded()) return json::object();
  return j;
}

// Runs `cmd` through the streaming exec, passing output on as it comes; the exit line.
std::optional<json> StreamExec(HttpClient& c, const std::string& id, const json& cmd, int64_t timeout,
                               bool echo, std::string* out) {
  json body = {{"cmd", cmd}, {"timeout_seconds", timeout}};
  json last;
  auto r = c.Stream("POST", "/v1/sandboxes/" + id + "/exec", body.dump(), [&](const std::string& line) {
    auto j = json::parse(line, nullptr, false);
    if (!j.is_object()) return;
    std::string t = j.value("type", "");
    if (t == "stdout" || t == "stderr") {
      std::string d = j.value("data", "");
      if (out && t == "stdout") *out += d;
      if (echo) {
        ssize_t w = ::write(t == "stdout" ? 1 : 2, d.data(), d.size());
        (void)w;
      }
    } else if (t == "exit" || t == "error") {
      last = j;
    }
  });
  if (!r.ok()) {
    std::fprintf(stderr, "sbx: %s\n", r.error().message.c_str());
    return std::nullopt;
  }
  if (r->status >= 300) {
    std::fprintf(stderr, "sbx: %s\n", ErrorMessage(*r).c_str());
    return std::nullopt;
  }
  if (!last.is_object() || last.value("type", "") != "exit") {
    std::fprintf(stderr, "sbx: the exec ended without an exit status%s\n",
                 last.contains("error") ? (": " + last["error"].value("message", "")).c_str() : "");
    return std::nullopt;
  }
  return last;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

int RunTemplateBuild(const Globals& g, const std::string& name, const std::string& image,
                     const std::string& from, const std::string& type,
                     const std::vector<std::string>& steps, int64_t timeout) {
  HttpClient c(g.url, g.api_key);
  json body = {{"type", type}, {"no_env", true}, {"ttl_seconds", std::max<int64_t>(3600, timeout * (int64_t)steps.size() + 600)}};
  if (!from.empty()) body["from"] = from;
  else if (!image.empty()) body["image"] = image;
  auto sb = Must(c, "POST", "/v1/sandboxes", body);
  if (!sb) return 1;
  std::string id = (*sb)["id"];
  auto cleanup = [&] { Must(c, "DELETE", "/v1/sandboxes/" + id, nullptr); };
  for (size_t i = 0; i < steps.size(); ++i) {
    std::fprintf(stderr, "\033[1m[step %zu/%zu]\033[0m %s\n", i + 1, steps.size(), steps[i].c_str());
    auto t0 = Clock::now();
    auto exit = StreamExec(c, id, steps[i], timeout, true, nullptr);
    if (!exit) {
      cleanup();
      return 1;
    }
    int code = exit->value("exit_code", 1);
    if (code != 0) {
      std::fprintf(stderr, "sbx: step %zu failed (exit %d%s); no template was saved\n", i + 1, code,
                   exit->value("timed_out", false) ? ", timed out" : "");
      cleanup();
      return 1;
    }
    std::fprintf(stderr, "  done in %.2f s\n", Secs(t0, Clock::now()));
  }
  std::fprintf(stderr, "\033[1m[snapshot]\033[0m saving as \"%s\"\n", name.c_str());
  auto t0 = Clock::now();
  auto snap = Must(c, "POST", "/v1/sandboxes/" + id + "/snapshot", json{{"name", name}});
  cleanup();
  if (!snap) return 1;
  std::fprintf(stderr, "  %.1f MB in %.2f s\n", snap->value("size_bytes", 0) / 1048576.0, Secs(t0, Clock::now()));
  std::printf("%s\n", g.json ? snap->dump().c_str() : name.c_str());
  return 0;
}

int RunBenchPatterns(const Globals& g, int runs) {
  const std::string call = "~/v/bin/python -c 'import sympy; print(sympy.factorint(2**64 - 1))'";
  const std::string install = "python3 -m venv ~/v && ~/v/bin/pip install -q sympy";
  const std::string want = "{3: 1, 5: 1, 17: 1, 257: 1, 641: 1, 65537: 1, 6700417: 1}\n";
  const std::string tmpl = "bench-patterns-" + std::to_string(::getpid());
  HttpClient c(g.url, g.api_key);
  json create = {{"type", "small"}, {"image", "default"}, {"no_env", true}, {"ttl_seconds", 1800}};
  struct Call {
    double create = 0, install = 0, run = 0, del = 0, total = 0;
  };
  auto run_call = [&](const std::string& id, Call* k) -> bool {
    std::string out;
    auto t0 = Clock::now();
    auto e = StreamExec(c, id, call, 300, false, &out);
    k->run = Secs(t0, Clock::now());
    if (!e || e->value("exit_code", 1) != 0 || out != want) {
      std::fprintf(stderr, "sbx bench: the tool call printed %s", out.c_str());
      return false;
    }
    return true;
  };
  auto fresh = [&](const json& body, bool do_install, Call* k) -> bool {
    auto t0 = Clock::now();
    auto sb = Must(c, "POST", "/v1/sandboxes", body);
    k->create = Secs(t0, Clock::now());
    if (!sb) return false;
    std::string id = (*sb)["id"];
    bool ok = true;
    if (do_install) {
      auto t1 = Clock::now();
      auto e = StreamExec(c, id, install, 300, false, nullptr);
      k->install = Secs(t1, Clock::now());
      ok = e && e->value("exit_code", 1) == 0;
    }
    ok = ok && run_call(id, k);
    auto t2 = Clock::now();
    ok = Must(c, "DELETE", "/v1/sandboxes/" + id, nullptr).has_value() && ok;
    k->del = Secs(t2, Clock::now());
    k->total = Secs(t0, Clock::now());
    return ok;
  };

  std::vector<Call> a(runs), b(runs), cc(runs);
  std::fprintf(stderr, "(a) fresh sandbox per call: create, install, run, delete\n");
  for (int i = 0; i < runs; ++i)
    if (!fresh(create, true, &a[i])) return 1;

  std::fprintf(stderr, "(b) one sandbox per session: install once, then run\n");
  double b_create = 0, b_install = 0;
  auto t0 = Clock::now();
  auto sess = Must(c, "POST", "/v1/sandboxes", create);
  if (!sess) return 1;
  b_create = Secs(t0, Clock::now());
  std::string sid = (*sess)["id"];
  auto t1 = Clock::now();
  auto inst = StreamExec(c, sid, install, 300, false, nullptr);
  b_install = Secs(t1, Clock::now());
  if (!inst || inst->value("exit_code", 1) != 0) return 1;
  for (int i = 0; i < runs; ++i) {
    if (!run_call(sid, &b[i])) return 1;
    b[i].total = b[i].run;
  }

  std::fprintf(stderr, "(c) fresh sandbox per call from a warm template\n");
  auto t2 = Clock::now();
  if (!Must(c, "POST", "/v1/sandboxes/" + sid + "/snapshot", json{{"name", tmpl}})) return 1;
  double save = Secs(t2, Clock::now());
  Must(c, "DELETE", "/v1/sandboxes/" + sid, nullptr);
  json from = {{"type", "small"}, {"from", tmpl}, {"no_env", true}, {"ttl_seconds", 600}};
  bool ok = true;
  for (int i = 0; i < runs && ok; ++i) ok = fresh(from, false, &cc[i]);
  Must(c, "DELETE", "/v1/snapshots/" + tmpl, nullptr);
  if (!ok) return 1;

  auto row = [&](const char* name, const std::vector<Call>& v) {
    std::printf("| %s |", name);
    std::vector<double> t;
    for (const auto& k : v) {
      std::printf(" %.3f |", k.total);
      t.push_back(k.total);
    }
    std::printf(" **%.3f** |\n", Median(t));
  };
  std::printf("Tool call: %s -> %s", call.c_str(), want.c_str());
  std::printf("\n| pattern (seconds per call) |");
  for (int i = 0; i < runs; ++i) std::printf(" call %d |", i + 1);
  std::printf(" median |\n|---|");
  for (int i = 0; i <= runs; ++i) std::printf("--:|");
  std::printf("\n");
  row("(a) fresh, install each time", a);
  row("(b) reused session sandbox", b);
  row("(c) fresh, from warm template", cc);
  auto med = [&](const std::vector<Call>& v, double Call::*f) {
    std::vector<double> x;
    for (const auto& k : v) x.push_back(k.*f);
    return Median(x);
  };
  std::printf("\n| step (median s) | (a) | (b) | (c) |\n|---|--:|--:|--:|\n");
  std::printf("| create to ready | %.3f | %.3f, once | %.3f |\n", med(a, &Call::create), b_create, med(cc, &Call::create));
  std::printf("| venv + pip install sympy | %.3f | %.3f, once | 0 (in the template) |\n", med(a, &Call::install), b_install);
  std::printf("| run the tool | %.3f | %.3f | %.3f |\n", med(a, &Call::run), med(b, &Call::run), med(cc, &Call::run));
  std::printf("| delete answer | %.3f | - | %.3f |\n", med(a, &Call::del), med(cc, &Call::del));
  std::printf("| template save (snapshot) | - | - | %.3f, once |\n", save);
  double mb = med(b, &Call::total), mc = med(cc, &Call::total);
  std::printf("\n(c) per call / (b) per call: %.3f (%+.1f%%)\n", mb > 0 ? mc / mb : 0, mb > 0 ? (mc / mb - 1) * 100 : 0);
  return 0;
}

}  // namespace sbx::cli
