// Shared pieces of the sbx CLI. Main thread only.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>
#include <optional>

#include "http_client.h"

namespace sbx::cli {

struct Globals {
  std::string url;
  std::string api_key;
  bool json = false;
  std::string data_dir;  // sbxd's data dir (--data-dir): the admin key, cgroup paths for benches
};

// Writes sandbox output to fd 1 or 2: byte-exact to a pipe or a file; on a terminal its
// control characters and escape sequences are shown as text (^[ for ESC), unless
// SetRawOutput(true) (`--raw-output`).
// False when the write failed (a reader that went away: EPIPE where SIGPIPE is ignored).
bool WriteSandboxOutput(int fd, std::string_view data);
void SetRawOutput(bool raw);

// Progress of a long transfer on stderr, from 8 MiB on: a bar redrawn in place on a
// terminal, a plain line at each tenth when stderr is a pipe or a file (no escape codes).
class Progress {
 public:
  explicit Progress(std::string what) : what_(std::move(what)) {}
  void Update(uint64_t done, uint64_t total);  // total 0: unknown
  void Done();                                 // ends the bar's line

 private:
  std::string what_;
  int last_ = -1;
  bool shown_ = false;
};

// A streamed exec of `body` in sandbox `id`: output goes to this process's stdout/stderr
// when `echo`, stdout also into *out (and stderr into *err); the exit line, or nullopt
// after printing the error.
std::optional<nlohmann::json> StreamExecBody(HttpClient& c, const std::string& id,
                                             const nlohmann::json& body, bool echo, std::string* out,
                                             std::string* err = nullptr);

// exec_stream.cc: `sbx exec -i` with a pipe or a terminal: `body` (cmd, cwd, env) as a
// background process with this input streamed to its stdin; returns its exit code (125
// when the CLI itself failed). Ctrl-C and `timeout` seconds kill its process group.
int RunStreamingExec(HttpClient& c, const Globals& g, const std::string& id, const nlohmann::json& body,
                     int64_t timeout);
// `sbx exec --json`: one object on stdout, `fields` with "stdout", "stderr" and
// "duration_ms" (as the CLI measured it) added.
void PrintExecObject(const std::string& out, const std::string& err, nlohmann::json fields, double duration_ms);

// `sbx exec -it`: `body` (cmd, cwd, env) as a tty process, this terminal attached to it
// over its WebSocket; returns its exit code.
int RunInteractiveExec(HttpClient& c, const Globals& g, const std::string& id, const nlohmann::json& body);

// `sbx bench`: returns the process exit code.
int RunBench(const Globals& g, int runs, const std::string& image, const std::string& isolation, bool peers);
// `sbx bench disk-exec`: serverless calls on a disk, and a test suite against the host.
int RunBenchDiskExec(const Globals& g, int runs, const std::string& data_dir, int gap_ms);
// `sbx bench hibernate`: hibernate and restore of a sandbox holding ~100 MB of Python
// objects, beside CRIU on the same program on the host (`criu`, if not empty).
int RunBenchHibernate(const Globals& g, int runs, const std::string& data_dir, const std::string& criu,
                      const std::string& isolation);
// `sbx bench patterns`: the seed's three tool-call patterns, timed.
int RunBenchPatterns(const Globals& g, int runs, int gap_ms);
// `sbx template build`: runs the steps in a fresh sandbox (streaming their output) as
// `user` (empty: the sandbox's), then snapshots it as `name`; a failing step fails the
// build and leaves no snapshot.
int RunTemplateBuild(const Globals& g, const std::string& name, const std::string& image,
                     const std::string& from, const std::string& type, const std::string& user,
                     const std::vector<std::string>& steps, int64_t timeout);
// `sbx image build NAME`: builds (or reuses from the cache) a rootfs tarball and imports it.
int RunImageBuild(const Globals& g, const std::string& name, const std::string& cache_dir);

}  // namespace sbx::cli
