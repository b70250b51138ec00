// `sbx exec -i` with a pipe or a terminal as its input: the command runs as a background
// process of the sandbox (the processes API) and this input is streamed to its stdin as
// it comes, while its output is followed: an open pipe, as `docker exec -i` has.
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "base/base64.h"
#include "cli.h"
#include "commands.h"

namespace sbx::cli {
namespace {

using nlohmann::json;

std::atomic<int> g_interrupted{0};

void OnInterrupt(int sig) { g_interrupted.store(sig); }

// What the three threads share; held by each (the input thread may outlive the command:
// it is left blocked in read() when the command ends first).
struct Shared {
  std::mutex mu;               // for `wake`
  std::condition_variable wake;  // the watcher's wait ends at once when the command ends
  std::atomic<bool> ended{false};
  std::atomic<bool> timed_out{false};
  std::atomic<bool> abandon{false};  // this side cannot go on (output has nowhere to go)
};

// Reads this process's stdin and queues it for the command's, then closes it at EOF.
// Stops when the command no longer takes input (it ended, or closed its stdin).
void PumpStdin(const Globals& g, const std::string& base, std::shared_ptr<Shared> s) {
  HttpClient c(g.url, g.api_key);
  char buf[65536];
  while (!s->ended.load()) {
    ssize_t n = ::read(0, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    json body = n > 0 ? json{{"data", Base64Encode(std::string_view(buf, static_cast<size_t>(n)))},
                             {"encoding", "base64"}}
                      : json{{"data", ""}, {"eof", true}};
    // A full queue in sbxd (503) is waited out; any other failure (the command ended
    // or closed its stdin: 409) ends the input. (Not FailureOf: it records the error
    // code for the main thread's messages.)
    while (true) {
      auto r = c.Call("POST", base + "/stdin", body.dump());
      if (r.ok() && r->status == 503 && !s->ended.load()) {
        ::poll(nullptr, 0, 20);
        continue;
      }
      if (n <= 0 || !r.ok() || r->status >= 300) return;
      break;
    }
  }
}

// Kills the command's process group on Ctrl-C (SIGINT), SIGTERM or SIGHUP, and when
// `timeout` seconds have passed.
void Watch(const Globals& g, const std::string& base, int64_t timeout, std::shared_ptr<Shared> s) {
  HttpClient c(g.url, g.api_key);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout);
  while (!s->ended.load()) {
    bool late = std::chrono::steady_clock::now() >= deadline;
    if (g_interrupted.load() || late || s->abandon.load()) {
      if (late) s->timed_out.store(true);
      (void)c.Call("POST", base + "/signal", json{{"signal", "KILL"}}.dump());
      return;
    }
    std::unique_lock<std::mutex> lock(s->mu);
    s->wake.wait_for(lock, std::chrono::milliseconds(50), [&] { return s->ended.load(); });
  }
}

}  // namespace

void PrintExecObject(const std::string& out, const std::string& err, json fields,
                     double duration_ms) {
  fields["stdout"] = out;
  fields["stderr"] = err;
  fields["duration_ms"] = static_cast<double>(static_cast<int64_t>(duration_ms * 10)) / 10;
  // Output that is not UTF-8 shows U+FFFD there, as the API's text encoding does; the
  // exact bytes are what sbx exec writes without --json.
  std::printf("%s\n", fields.dump(-1, ' ', false, json::error_handler_t::replace).c_str());
}

int RunStreamingExec(HttpClient& c, const Globals& g, const std::string& id, const json& body,
                     int64_t timeout) {
  if (timeout < 1 || timeout > 86400) return Usage("--timeout must be between 1 and 86400 seconds");
  auto started = CallJson(c, "POST", "/v1/sandboxes/" + id + "/processes", body);
  if (!started) return 125;
  std::string base =
      "/v1/sandboxes/" + id + "/processes/" + std::to_string(started->value("pid", 0));
  auto shared = std::make_shared<Shared>();
  struct sigaction sa = {};
  sa.sa_handler = OnInterrupt;
  // The blocking reads go on; the watcher acts on the flag. A second Ctrl-C ends sbx at
  // once (SA_RESETHAND), should sbxd not answer.
  sa.sa_flags = SA_RESTART | SA_RESETHAND;
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(sig, &sa, nullptr);
  // A reader of this output that goes away (`| head -1`) must not end sbx before it has
  // stopped the command: the write fails instead, and the watcher kills the command.
  ::signal(SIGPIPE, SIG_IGN);
  std::thread(PumpStdin, g, base, shared).detach();
  std::thread watcher(Watch, g, base, timeout, shared);

  json last;
  bool garbled = false;
  std::string out, err;  // with --json: kept for the one object printed at the end
  auto t0 = std::chrono::steady_clock::now();
  auto r = c.Stream(
      "GET", base + "/output?follow=true&encoding=base64", "", [&](const std::string& line) {
        auto j = json::parse(line, nullptr, false);
        if (!j.is_object()) return;
        std::string t = j.value("type", "");
        if (t == "stdout" || t == "stderr") {
          auto raw = Base64Decode(j.value("data", ""));
          if (!raw.ok())
            garbled = true;
          else if (g.json)
            (t == "stdout" ? out : err) += *raw;
          else if (!WriteSandboxOutput(t == "stdout" ? 1 : 2, *raw))
            shared->abandon.store(true);
        } else if (t == "gap") {
          ReportError("output " + std::to_string(j.value("from", 0ULL)) + " to " +
                          std::to_string(j.value("to", 0ULL)) + " left the ring before it was read",
                      "client_error");
        } else if (t == "exit") {
          last = j;
        }
      });
  // From here on this side fails without an exit status: the command must not outlive it.
  auto give_up = [&] {
    HttpClient k(g.url, g.api_key);
    (void)k.Call("POST", base + "/signal", json{{"signal", "KILL"}}.dump());
  };
  {
    std::lock_guard<std::mutex> lock(shared->mu);
    shared->ended.store(true);
  }
  shared->wake.notify_all();
  watcher.join();
  if (auto why = FailureOf(r)) {
    give_up();
    ReportError(*why, "client_error");
    return 125;
  }
  if (garbled) {
    give_up();
    Fail("sbxd sent output that is not base64");
    return 125;
  }
  if (!last.is_object()) {
    give_up();
    Fail("the output stream ended without an exit status");
    return 125;
  }
  if (last["error"].is_string()) {
    Fail("the command's end is unknown: " + last["error"].get<std::string>());
    return 125;
  }
  bool timed_out = shared->timed_out.load();
  if (timed_out && !g.json)
    std::fprintf(stderr, "sbx: the command timed out after %lld s\n",
                 static_cast<long long>(timeout));
  // A command killed at its timeout exits 124, as an exec's does.
  int code = timed_out ? 124 : last["exit_code"].is_number_integer() ? last["exit_code"].get<int>() : 125;
  if (g.json) {
    double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    PrintExecObject(out, err,
                    json{{"exit_code", code}, {"signal", last["signal"]}, {"timed_out", timed_out}},
                    ms);
  }
  return code;
}

}  // namespace sbx::cli
