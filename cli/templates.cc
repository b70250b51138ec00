// `sbx template build` and `sbx bench patterns`.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "base/base64.h"
#include "cli.h"
#include "commands.h"
#include "stats.h"
#include "http_client.h"

namespace sbx::cli {
namespace {

using nlohmann::json;

// Runs `cmd` through the streaming exec, passing output on as it comes; the exit line.
std::optional<json> StreamExec(HttpClient& c, const std::string& id, const json& cmd, int64_t timeout,
                               bool echo, std::string* out) {
  return StreamExecBody(c, id, json{{"cmd", cmd}, {"timeout_seconds", timeout}}, echo, out);
}


}  // namespace

std::optional<json> StreamExecBody(HttpClient& c, const std::string& id, const json& body, bool echo,
                                   std::string* out, std::string* err) {
  json last;
  // base64: the output arrives byte for byte (a tar piped out stays a tar), not as text.
  json sent = body;
  sent["encoding"] = "base64";
  bool garbled = false;
  auto r = c.Stream("POST", "/v1/sandboxes/" + id + "/exec", sent.dump(), [&](const std::string& line) {
    auto j = json::parse(line, nullptr, false);
    if (!j.is_object()) return;
    std::string t = j.value("type", "");
    if (t == "stdout" || t == "stderr") {
      auto raw = Base64Decode(j.value("data", ""));
      if (!raw.ok()) {
        garbled = true;
        return;
      }
      const std::string& d = *raw;
      if (out && t == "stdout") *out += d;
      if (err && t == "stderr") *err += d;
      if (echo) WriteSandboxOutput(t == "stdout" ? 1 : 2, d);
    } else if (t == "exit" || t == "error") {
      last = j;
    }
  });
  if (auto why = FailureOf(r)) {
    ReportError(*why, "client_error");
    return std::nullopt;
  }
  if (garbled) {
    Fail("sbxd sent output that is not base64");
    return std::nullopt;
  }
  if (!last.is_object() || last.value("type", "") != "exit") {
    Fail("the exec ended without an exit status" +
         (last.contains("error") ? ": " + last["error"].value("message", "") : std::string()));
    return std::nullopt;
  }
  return last;
}

int RunTemplateBuild(const Globals& g, const std::string& name, const std::string& image,
                     const std::string& from, const std::string& type, const std::string& user,
                     const std::vector<std::string>& steps, int64_t timeout) {
  HttpClient c(g.url, g.api_key);
  json body = {{"type", type}, {"no_env", true}, {"ttl_seconds", std::max<int64_t>(3600, timeout * (int64_t)steps.size() + 600)}};
  if (!from.empty()) body["from"] = from;
  else if (!image.empty()) body["image"] = image;
  auto sb = CallJson(c, "POST", "/v1/sandboxes", body);
  if (!sb) return 1;
  std::string id = (*sb)["id"];
  auto cleanup = [&] { CallJson(c, "DELETE", "/v1/sandboxes/" + id, nullptr); };
  for (size_t i = 0; i < steps.size(); ++i) {
    std::fprintf(stderr, "\033[1m[step %zu/%zu]\033[0m %s\n", i + 1, steps.size(), steps[i].c_str());
    auto t0 = Clock::now();
    json step = {{"cmd", steps[i]}, {"timeout_seconds", timeout}};
    if (!user.empty()) step["user"] = user;
    auto exit = StreamExecBody(c, id, step, true, nullptr);
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
  auto snap = CallJson(c, "POST", "/v1/sandboxes/" + id + "/snapshot", json{{"name", name}});
  cleanup();
  if (!snap) return 1;
  std::fprintf(stderr, "  %.1f MB in %.2f s\n", snap->value("size_bytes", 0) / 1048576.0, Secs(t0, Clock::now()));
  std::printf("%s\n", g.json ? snap->dump().c_str() : name.c_str());
  return 0;
}

int RunBenchPatterns(const Globals& g, int runs, int gap_ms) {
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
    if (gap_ms > 0) ::usleep(static_cast<useconds_t>(gap_ms) * 1000);
    auto t0 = Clock::now();
    auto sb = CallJson(c, "POST", "/v1/sandboxes", body);
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
    ok = CallJson(c, "DELETE", "/v1/sandboxes/" + id, nullptr).has_value() && ok;
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
  auto sess = CallJson(c, "POST", "/v1/sandboxes", create);
  if (!sess) return 1;
  b_create = Secs(t0, Clock::now());
  std::string sid = (*sess)["id"];
  auto t1 = Clock::now();
  auto inst = StreamExec(c, sid, install, 300, false, nullptr);
  b_install = Secs(t1, Clock::now());
  if (!inst || inst->value("exit_code", 1) != 0) return 1;

  // (f): the same tool call through the session sandbox's code interpreter, whose
  // context imported sympy (from (b)'s venv) once, before the timed calls.
  const std::string warm = "import sys, glob\nsys.path[:0] = glob.glob('/home/user/v/lib/python3*/site-packages')\nimport sympy";
  const std::string cell = "print(sympy.factorint(2**64 - 1))";
  {
    auto w = CallJson(c, "POST", "/v1/sandboxes/" + sid + "/code", json{{"code", warm}});
    if (!w) return 1;
    if (!(*w)["error"].is_null()) {
      std::fprintf(stderr, "sbx bench: the code interpreter could not import sympy: %s\n", (*w)["error"].dump().c_str());
      return 1;
    }
  }
  // What a cell printed, from the code interpreter's answer.
  auto stdout_of = [](const std::optional<json>& r) {
    std::string out;
    if (r)
      for (const auto& part : (*r)["logs"]["stdout"]) out += part.get<std::string>();
    return out;
  };
  auto run_cell = [&](Call* k) -> bool {
    auto t = Clock::now();
    auto r = CallJson(c, "POST", "/v1/sandboxes/" + sid + "/code", json{{"code", cell}});
    k->run = k->total = Secs(t, Clock::now());
    std::string out = stdout_of(r);
    if (out != want) std::fprintf(stderr, "sbx bench: run_code printed %s", out.c_str());
    return out == want;
  };
  std::vector<Call> ff(runs), ee;
  // (e): a fresh sandbox per call from a memory template of the session sandbox (its
  // context imported sympy), where the session's wall keeps memory; else the reason.
  const std::string mem_tmpl = tmpl + "-mem";
  std::string e_why;
  {
    auto m = c.Call("POST", "/v1/sandboxes/" + sid + "/snapshot", json{{"name", mem_tmpl}, {"memory", true}}.dump());
    if (auto why = FailureOf(m)) e_why = *why;
    else ee.resize(runs);
  }
  json from_mem = {{"type", "small"}, {"from", mem_tmpl}, {"no_env", true}, {"ttl_seconds", 600}};
  auto fresh_cell = [&](Call* k) -> bool {
    if (gap_ms > 0) ::usleep(static_cast<useconds_t>(gap_ms) * 1000);
    auto t = Clock::now();
    auto sb = CallJson(c, "POST", "/v1/sandboxes", from_mem);
    k->create = Secs(t, Clock::now());
    if (!sb) return false;
    std::string id = (*sb)["id"];
    auto t1 = Clock::now();
    auto r = CallJson(c, "POST", "/v1/sandboxes/" + id + "/code", json{{"code", cell}});
    k->run = Secs(t1, Clock::now());
    std::string out = stdout_of(r);
    auto t2 = Clock::now();
    bool deleted = CallJson(c, "DELETE", "/v1/sandboxes/" + id, nullptr).has_value();
    k->del = Secs(t2, Clock::now());
    k->total = Secs(t, Clock::now());
    if (out != want) std::fprintf(stderr, "sbx bench: run_code in a copy printed %s", out.c_str());
    return deleted && out == want;
  };

  std::fprintf(stderr, "(c) fresh sandbox per call from a warm template, taken of (b)'s sandbox\n");
  auto t2 = Clock::now();
  if (!CallJson(c, "POST", "/v1/sandboxes/" + sid + "/snapshot", json{{"name", tmpl}})) return 1;
  double save = Secs(t2, Clock::now());
  json from = {{"type", "small"}, {"from", tmpl}, {"no_env", true}, {"ttl_seconds", 600}};
  // (b) and (c) calls alternate, so that the machine's drift over the run weighs on both
  // alike.
  bool ok = true;
  for (int i = 0; i < runs && ok; ++i) {
    // Think time before each tool call, as a model takes between calls (not timed).
    if (gap_ms > 0) ::usleep(static_cast<useconds_t>(gap_ms) * 1000);
    ok = run_call(sid, &b[i]);
    b[i].total = b[i].run;
    ok = ok && fresh(from, false, &cc[i]);
    ok = ok && run_cell(&ff[i]);
    if (!ee.empty()) ok = ok && fresh_cell(&ee[i]);
  }
  // Forks of the session sandbox (sympy installed), each deleted at once.
  std::vector<double> forks;
  for (int i = 0; i < runs && ok; ++i) {
    auto t3 = Clock::now();
    auto f = CallJson(c, "POST", "/v1/sandboxes/" + sid + "/fork", json{{"count", 1}});
    if (!f) ok = false;
    else {
      forks.push_back(Secs(t3, Clock::now()));
      CallJson(c, "DELETE", "/v1/sandboxes/" + (*f)["sandboxes"][0]["id"].get<std::string>(), nullptr);
    }
  }
  CallJson(c, "DELETE", "/v1/sandboxes/" + sid, nullptr);
  CallJson(c, "DELETE", "/v1/snapshots/" + tmpl, nullptr);
  if (!ee.empty()) CallJson(c, "DELETE", "/v1/snapshots/" + mem_tmpl, nullptr);
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
  if (gap_ms > 0) std::printf("Think time before each call: %d ms (not counted)\n", gap_ms);
  std::printf("\n| pattern (seconds per call) |");
  for (int i = 0; i < runs; ++i) std::printf(" call %d |", i + 1);
  std::printf(" median |\n|---|");
  for (int i = 0; i <= runs; ++i) std::printf("--:|");
  std::printf("\n");
  row("(a) fresh, install each time", a);
  row("(b) reused session sandbox", b);
  row("(c) fresh, from warm template", cc);
  if (!ee.empty()) row("(e) fresh, from memory template, run_code", ee);
  row("(f) session sandbox, run_code (warm context)", ff);
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
  std::printf("| fork (count 1) of (b)'s sandbox, after the save | - | %.3f | - |\n", Median(forks));
  double mb = med(b, &Call::total), mc = med(cc, &Call::total);
  std::printf("\n(c) per call / (b) per call: %.3f (%+.1f%%)\n", mb > 0 ? mc / mb : 0, mb > 0 ? (mc / mb - 1) * 100 : 0);
  if (ee.empty()) {
    std::printf("(e) not measured: %s\n", e_why.c_str());
  } else {
    double me = med(ee, &Call::total);
    std::printf("(e) per call / (c) per call: %.3f (%.1f ms: create %.1f, run_code %.1f, delete %.1f)\n",
                mc > 0 ? me / mc : 0, me * 1000, med(ee, &Call::create) * 1000, med(ee, &Call::run) * 1000,
                med(ee, &Call::del) * 1000);
  }
  double mf = med(ff, &Call::total);
  std::printf("(f) per call / (b) per call: %.3f (%.1f ms against %.1f ms)\n", mb > 0 ? mf / mb : 0, mf * 1000, mb * 1000);
  return 0;
}

int RunBenchDiskExec(const Globals& g, int runs, const std::string& data_dir, int gap_ms) {
  HttpClient c(g.url, g.api_key);
  auto disk = CallJson(c, "POST", "/v1/disks", json{{"size_mb", 512}});
  if (!disk) return 1;
  std::string id = (*disk)["id"];
  auto cleanup = [&] { CallJson(c, "DELETE", "/v1/disks/" + id, nullptr); };
  auto call = [&](const json& body, double* e2e, double* queue) -> std::optional<json> {
    auto t0 = Clock::now();
    auto j = CallJson(c, "POST", "/v1/disks/" + id + "/exec", body);
    if (e2e) *e2e = Secs(t0, Clock::now()) * 1000;
    if (j && queue) *queue = (*j)["timing"].value("queue_ms", 0.0);
    return j;
  };
  std::fprintf(stderr, "%d sequential serverless calls of `true`...\n", runs);
  json t = {{"cmd", {"true"}}};
  if (!call(t, nullptr, nullptr)) return cleanup(), 1;
  std::vector<double> e2e, queue, exec_ms;
  for (int i = 0; i < runs; ++i) {
    // Think time between calls, as an agent's model takes between tool calls.
    if (gap_ms > 0) ::usleep(static_cast<useconds_t>(gap_ms) * 1000);
    double a, q;
    auto j = call(t, &a, &q);
    if (!j || (*j)["exit_code"] != 0) return cleanup(), 1;
    e2e.push_back(a);
    queue.push_back(q);
    exec_ms.push_back((*j)["timing"].value("execute_ms", 0.0));
  }
  std::printf("| serverless `true` on a disk (ms), %d ms between calls | n | median | p90 |\n|---|--:|--:|--:|\n", gap_ms);
  std::printf("| end to end (loopback HTTP) | %zu | %.2f | %.2f |\n", e2e.size(), Pctl(e2e, 0.5), Pctl(e2e, 0.9));
  std::printf("| queue_ms | %zu | %.2f | %.2f |\n", queue.size(), Pctl(queue, 0.5), Pctl(queue, 0.9));
  std::printf("| execute_ms | %zu | %.2f | %.2f |\n", exec_ms.size(), Pctl(exec_ms, 0.5), Pctl(exec_ms, 0.9));

  // A real project's test suite on the disk: mpmath (from the default image's wheelhouse,
  // made from Debian's python3-mpmath), with its own runner.
  // Modules whose tests need nothing beyond mpmath (others import pytest).
  const std::string suite = "basic_ops convert gammazeta identify diff eigen interval";
  std::fprintf(stderr, "copying mpmath onto the disk and running part of its test suite 5 times...\n");
  json copy = {{"cmd", "python3 -c \"import glob, zipfile; zipfile.ZipFile(glob.glob('/opt/sbx/wheelhouse/mpmath-*.whl')[0]).extractall('.')\""},
               {"image", "default"}};
  auto cp = call(copy, nullptr, nullptr);
  if (!cp || (*cp)["exit_code"] != 0) {
    std::fprintf(stderr, "sbx bench: cannot copy mpmath onto the disk (is the default image built?)\n");
    return cleanup(), 1;
  }
  json run = {{"cmd", "PYTHONPATH=/mnt/disk python3 mpmath/tests/runtests.py " + suite}, {"image", "default"}};
  std::vector<double> suite_ms;
  for (int i = 0; i < 5; ++i) {
    double a;
    auto j = call(run, &a, nullptr);
    if (!j || (*j)["exit_code"] != 0 || j->value("stdout", "").find("finished tests") == std::string::npos) {
      std::fprintf(stderr, "sbx bench: the suite failed: %s\n", j ? j->value("stderr", "").c_str() : "");
      return cleanup(), 1;
    }
    suite_ms.push_back(a);
  }
  // The floor: the same files and the same suite run directly on the host.
  std::string mnt = data_dir + "/disks/" + id + "/mnt";
  std::vector<double> host_ms;
  if (::access((mnt + "/mpmath/tests/runtests.py").c_str(), R_OK) == 0 && ::access("/usr/bin/python3", X_OK) == 0) {
    for (int i = 0; i < 5; ++i) {
      auto t0 = Clock::now();
      std::string cmd = "cd '" + mnt + "' && PYTHONPATH='" + mnt + "' /usr/bin/python3 mpmath/tests/runtests.py " + suite +
                        " > /dev/null 2>&1";
      if (std::system(cmd.c_str()) != 0) break;
      host_ms.push_back(Secs(t0, Clock::now()) * 1000);
    }
  }
  std::printf("\n| mpmath test suite (%s) | n | median ms |\n|---|--:|--:|\n", suite.c_str());
  std::printf("| serverless call on the disk | 5 | %.0f |\n", Pctl(suite_ms, 0.5));
  if (!host_ms.empty()) {
    std::printf("| directly on the host (floor) | %zu | %.0f |\n", host_ms.size(), Pctl(host_ms, 0.5));
    std::printf("\nserverless / host: %.3f\n", Pctl(suite_ms, 0.5) / Pctl(host_ms, 0.5));
  } else {
    std::printf("| directly on the host (floor) | 0 | - (disk not reachable from here; pass --data-dir) |\n");
  }
  cleanup();
  return 0;
}

}  // namespace sbx::cli
