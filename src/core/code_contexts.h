// CodeContexts: the code interpreter (POST /v1/sandboxes/{id}/code). A context is a
// background process of the sandbox (ProcessTable) that runs sbx's interpreter
// (core/code_interpreter.py, built into sbxd) as the sandbox's user: variables, imports
// and the working directory last from one cell to the next. Contexts have no table of
// their own: they are the sandbox's processes whose argv names them (`python3 -u -c BOOT
// sbx-code ID LANGUAGE`), so they outlive sbxd as kept processes do, and go with their
// sandbox. The cells of one context run one at a time, in the order they came.
#pragma once

#include <atomic>
#include <utility>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "base/result.h"
#include "core/processes.h"

namespace sbx::core {

struct CodeContext {
  std::string id;        // "python" / "bash" for a language's default context, else ctx-...
  std::string language;  // python or bash
  std::string cwd;       // where it started
  std::string user;
  int64_t pid = 0;  // the interpreter, inside the sandbox
  int64_t started_ms = 0;
};

struct CodeCell {
  std::string code;
  std::string language;  // empty: the context's (python for a default context)
  std::string context;   // empty: the language's default context, made on first use
  std::map<std::string, std::string> env;  // for this cell only
  int64_t timeout_seconds = 300;
};

struct CellEnd {
  std::string context;
  int64_t execution_count = 0;
  bool timed_out = false;
  bool restarted = false;  // a new interpreter took the context's place: what it held is gone
};

// A message of the running cell, as it comes: {"type": "stdout" | "stderr", "text"},
// {"type": "result", "is_main_result", "text", "html", "png", ...} or
// {"type": "error", "name", "value", "traceback"}.
using CellEventFn = std::function<boost::asio::awaitable<void>(const nlohmann::json&)>;

class CodeContexts {
 public:
  CodeContexts(SandboxManager* manager, ProcessTable* processes);

  // A new context (language python or bash; cwd and user as a process's, default the
  // sandbox's user and that user's home), ready for cells.
  boost::asio::awaitable<Result<CodeContext>> Create(boost::asio::any_io_executor ex, std::string sandbox,
                                                     std::string language, std::string cwd, std::string user);
  Result<std::vector<CodeContext>> List(const std::string& sandbox);
  // A new interpreter in the context's place (same id, language, cwd and user).
  boost::asio::awaitable<Result<CodeContext>> Restart(boost::asio::any_io_executor ex, std::string sandbox,
                                                      std::string id);
  Status Delete(const std::string& sandbox, const std::string& id);
  // Runs one cell, handing each message to `on_event`. Past timeout_seconds the cell is
  // interrupted (KeyboardInterrupt, Ctrl-C for bash); if it has not ended 3 s later, its
  // interpreter is killed and a new one takes its place.
  boost::asio::awaitable<Result<CellEnd>> Run(boost::asio::any_io_executor ex, std::string sandbox, CodeCell cell,
                                              CellEventFn on_event);

 private:
  Result<CodeContext> Find(const std::string& sandbox, const std::string& id);
  // Starts the interpreter and waits for its "ready".
  boost::asio::awaitable<Result<CodeContext>> Start(boost::asio::any_io_executor ex, const std::string& sandbox,
                                                    const std::string& id, const std::string& language,
                                                    const std::string& cwd, const std::string& user);
  // The interpreter is gone or past saving: a new one in its place, and the cell's error
  // (TimeoutError or ContextDied) says why.
  boost::asio::awaitable<Result<CellEnd>> Replace(boost::asio::any_io_executor ex, const std::string& sandbox,
                                                  const CodeContext& ctx, CellEnd& end, CellEventFn& on_event,
                                                  const std::string& why);
  // Waits until the context is free and every earlier waiter had it (false: not within
  // `max_ms`), then holds it; TryHold takes it only if it is free with no one waiting.
  boost::asio::awaitable<bool> Hold(boost::asio::any_io_executor ex, const std::string& key, int64_t max_ms);
  bool TryHold(const std::string& key);
  void Release(const std::string& key);

  // SIGKILL to a context's interpreter, which is then neither found nor listed (an error,
  // and still listed, when the signal cannot be sent: its sandbox hibernated).
  Status Kill(const std::string& sandbox, const CodeContext& c);
  // The contexts among the sandbox's processes (the newest interpreter of each id),
  // without the interpreters being killed.
  std::map<std::string, CodeContext> Live(const std::string& sandbox, const std::vector<ProcessInfo>& procs);

  SandboxManager* manager_;
  ProcessTable* processes_;
  std::atomic<int64_t> next_cell_;
  std::mutex mu_;
  struct Holding {
    bool busy = false;            // a cell, a start, a restart or a delete is under way
    std::set<int64_t> waiting;    // the tickets of the cells waiting, in the order they came
  };
  std::map<std::string, Holding> held_;  // by "sandbox/context"
  int64_t next_ticket_ = 0;
  // Interpreters killed (sandbox, pid, start), until they have ended.
  std::set<std::tuple<std::string, int64_t, int64_t>> killed_;
};

}  // namespace sbx::core
