// The handle of a runtime whose sandbox is a process tree on this host (the container
// runtime, the fake one): its top process by pidfd, and the saved state that finds it
// again after sbxd restarts ({"pid", "pid_start"}: the start time tells a reused pid).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>

#include "base/result.h"
#include "base/unique_fd.h"
#include "runtime/runtime.h"

namespace sbx::runtime {

struct ProcessHandle {
  pid_t pid = 0;
  uint64_t pid_start = 0;
  UniqueFd pidfd;  // readable once the process has exited
};

// Fills inst.handle and inst.saved_state for the process `pid` (pidfd already open).
void SetProcess(Instance* inst, pid_t pid, UniqueFd pidfd);
// The process of an instance made by SetProcess (null if none).
const ProcessHandle* ProcessOf(const Instance& inst);
// Finds the process of `saved_state` again: not found if it is gone (or its pid reused).
Result<std::shared_ptr<ProcessHandle>> OpenSavedProcess(const std::string& saved_state);
void SetProcess(Instance* inst, std::shared_ptr<ProcessHandle> p);
bool ProcessAlive(const Instance& inst);

}  // namespace sbx::runtime
