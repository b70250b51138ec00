// See process_tree.h.
#include "runtime/container/process_tree.h"

#include <map>
#include <sstream>
#include <vector>

#include "base/fs.h"

namespace sbx::runtime {

namespace {

struct Task {
  pid_t ppid = 0, sid = 0;
  std::string comm;
  pid_t inner = 0;  // its pid in the sandbox
};

// /proc/<pid>/stat and NSpid of one process (host pids), or false once it is gone.
bool ReadTask(pid_t pid, Task* t) {
  auto stat = fs::ReadFile("/proc/" + std::to_string(pid) + "/stat", 4096);
  if (!stat.ok()) return false;
  const size_t open = stat->find('('), close = stat->rfind(')');
  if (open == std::string::npos || close == std::string::npos) return false;
  t->comm = stat->substr(open + 1, close - open - 1);
  std::istringstream f(stat->substr(close + 1));
  char state;
  pid_t pgrp;
  if (!(f >> state >> t->ppid >> pgrp >> t->sid)) return false;
  t->inner = pid;
  auto status = fs::ReadFile("/proc/" + std::to_string(pid) + "/status", 1 << 16);
  if (status.ok()) {
    const size_t at = status->find("\nNSpid:");
    if (at != std::string::npos) {
      std::istringstream ids(status->substr(at + 7, status->find('\n', at + 1) - at - 7));
      for (pid_t id; ids >> id;) t->inner = id;
    }
  }
  return true;
}

std::string Name(const Task& t) { return "process " + std::to_string(t.inner) + " (" + t.comm + ")"; }

}  // namespace

std::optional<std::string> UnrestorableProcess(pid_t init) {
  // The tree, from each thread's children (a child is listed under the thread that
  // forked it).
  std::map<pid_t, Task> tree;
  std::vector<pid_t> todo = {init};
  while (!todo.empty()) {
    const pid_t pid = todo.back();
    todo.pop_back();
    Task t;
    if (tree.count(pid) || !ReadTask(pid, &t)) continue;
    tree[pid] = t;
    const std::string tasks = "/proc/" + std::to_string(pid) + "/task";
    auto threads = fs::ListDir(tasks);
    if (!threads.ok()) continue;
    for (const auto& tid : *threads) {
      auto children = fs::ReadFile(tasks + "/" + tid + "/children", 1 << 20);
      if (!children.ok()) continue;
      std::istringstream in(*children);
      for (pid_t c; in >> c;) todo.push_back(c);
    }
  }
  for (const auto& [pid, t] : tree) {
    // A session leader, a child of init (CRIU forks a helper as its leader), or one whose
    // parent shares its session.
    if (pid == init || t.sid == pid || t.ppid == init) continue;
    auto parent = tree.find(t.ppid);
    if (parent == tree.end() || parent->second.sid == t.sid) continue;
    // Or one forked before its parent (or a parent's parent) left the session: the
    // leader is above it.
    bool led = false;
    size_t steps = 0;  // read while running, a chain may loop through a reused pid
    for (auto up = parent; up != tree.end() && steps++ < tree.size(); up = tree.find(up->second.ppid))
      if (up->first == t.sid) led = true;
    if (!led)
      return Name(t) + " is in a session whose leader has ended, below " + Name(parent->second) +
             " rather than the sandbox's init: CRIU cannot restore that";
  }
  return std::nullopt;
}

}  // namespace sbx::runtime
