// `sbx run`: code in a sandbox's code interpreter (POST /v1/sandboxes/{id}/code): one
// cell from -c, a file or a pipe, or a read-eval-print loop on a terminal.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>

#include "commands.h"

namespace sbx::cli {
namespace {

using nlohmann::json;

struct CodeCommand {
  CLI::App* run = nullptr;
  std::string id, code, file, language, context;
  int64_t timeout = 300;
  bool interactive = false;

  void Add(CLI::App& app) {
    run = app.add_subcommand("run", "run code in a sandbox's code interpreter (state lasts between runs)");
    run->footer("Examples: sbx run my-box -c 'import sympy; sympy.factorint(2**64 - 1)'\n"
                "          sbx run my-box analysis.py\n"
                "          sbx run my-box --language bash -c 'cd /tmp; export X=1'\n"
                "          sbx run -it my-box             # a read-eval-print loop (the default on a terminal)");
    run->add_option("id", id, "sandbox id, name or unique id prefix")->required();
    run->add_option("file", file, "a file of code to run (- for stdin)");
    run->add_option("-c,--code", code, "the code to run");
    run->add_option("--language,-l", language, "python (default) or bash");
    run->add_option("--context", context, "a context id (default: the language's own context)");
    run->add_option("--timeout", timeout, "seconds before the cell is interrupted (default 300)");
    run->add_flag("--interactive,-i,--tty,-t", interactive,
                  "a read-eval-print loop (the default on a terminal when no code is given; -it as docker's)");
  }

  // Runs one cell, printing as it comes; 0, or 1 if it raised (or failed).
  int Cell(HttpClient& c, const Globals& g, const std::string& text) {
    json body = {{"code", text}, {"timeout_seconds", timeout}};
    if (!language.empty()) body["language"] = language;
    if (!context.empty()) body["context"] = context;
    const std::string target = "/v1/sandboxes/" + id + "/code";
    if (g.json) {
      auto j = CallJson(c, "POST", target, body);
      if (!j) return 1;
      std::printf("%s\n", j->dump().c_str());
      return (*j)["error"].is_null() ? 0 : 1;
    }
    bool failed = false, ended = false;
    std::string daemon_error;
    auto r = c.Stream("POST", target, body.dump(), [&](const std::string& line) {
      auto m = json::parse(line, nullptr, false);
      if (!m.is_object()) return;
      const std::string t = m.value("type", "");
      if (t == "stdout" || t == "stderr") {
        std::fflush(stdout);
        WriteSandboxOutput(t == "stdout" ? 1 : 2, m.value("text", ""));
      } else if (t == "result") {
        std::string shown = m.value("text", "");
        for (const char* k : {"png", "jpeg", "svg", "pdf", "html"})
          if (m.contains(k)) shown += std::string(shown.empty() ? "" : " ") + "[" + k + "]";
        if (!shown.empty()) WriteSandboxOutput(1, shown + "\n");
      } else if (t == "error" && m.contains("error")) {
        daemon_error = m["error"].value("message", "");
      } else if (t == "error") {
        failed = true;
        std::string tb = m.value("traceback", "");
        WriteSandboxOutput(2, tb.empty() ? m.value("name", "") + ": " + m.value("value", "") + "\n" : tb);
      } else if (t == "end") {
        ended = true;
        if (m.value("timed_out", false))
          std::fprintf(stderr, "sbx: the cell was interrupted after %lld s\n", static_cast<long long>(timeout));
      }
    });
    if (auto why = FailureOf(r)) {
      ReportError(*why, "client_error");
      return 1;
    }
    if (!daemon_error.empty()) return Fail(daemon_error);
    if (!ended) return Fail("the code stream ended before the cell did");
    return failed ? 1 : 0;
  }

  // A read-eval-print loop: a line runs at once, unless it opens a block (ends with ':'
  // or '\'), which runs at the first empty line, as Python's own prompt does.
  int Repl(HttpClient& c, const Globals& g) {
    const bool bash = language == "bash";
    std::fprintf(stderr, "sbx run: %s in %s (Ctrl-D to quit)\n", bash ? "bash" : "python", id.c_str());
    std::string cell, line;
    while (true) {
      std::fputs(cell.empty() ? (bash ? "$ " : ">>> ") : "... ", stdout);
      std::fflush(stdout);
      if (!std::getline(std::cin, line)) break;
      const bool opens = !line.empty() && (line.back() == ':' || line.back() == '\\');
      if (cell.empty() && line.empty()) continue;
      if (!line.empty()) cell += line + "\n";
      // A line alone runs now; a block runs at its first empty line.
      if ((cell.find('\n') == cell.size() - 1 && !opens) || line.empty()) {
        Cell(c, g, cell);
        cell.clear();
      }
    }
    if (!cell.empty()) Cell(c, g, cell);
    std::fputc('\n', stdout);
    return 0;
  }

  std::optional<int> Run(HttpClient& c, const Globals& g) {
    if (!*run) return std::nullopt;
    if (!code.empty() && !file.empty()) return Usage("give the code with -c or as a file, not both");
    if (interactive && (!code.empty() || !file.empty())) return Usage("-i runs a read-eval-print loop: give no code with it");
    if (interactive) return Repl(c, g);
    if (!code.empty()) return Cell(c, g, code);
    if (file.empty() && isatty(0)) return Repl(c, g);
    std::stringstream text;
    if (file.empty() || file == "-") {
      text << std::cin.rdbuf();
    } else {
      std::ifstream f(file);
      if (!f) return Fail("cannot read " + file);
      text << f.rdbuf();
    }
    return Cell(c, g, text.str());
  }
};

}  // namespace

Runner AddCodeCommand(CLI::App& app) { return Register<CodeCommand>(app); }

}  // namespace sbx::cli
