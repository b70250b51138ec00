#include "runtime/process_handle.h"

#include <nlohmann/json.hpp>

#include "base/proc.h"

namespace sbx::runtime {

void SetProcess(Instance* inst, std::shared_ptr<ProcessHandle> p) {
  inst->saved_state = nlohmann::json{{"pid", p->pid}, {"pid_start", p->pid_start}}.dump();
  inst->handle = std::move(p);
}

void SetProcess(Instance* inst, pid_t pid, UniqueFd pidfd) {
  auto p = std::make_shared<ProcessHandle>();
  p->pid = pid;
  p->pid_start = proc::StartTime(pid);
  p->pidfd = std::move(pidfd);
  SetProcess(inst, std::move(p));
}

const ProcessHandle* ProcessOf(const Instance& inst) { return static_cast<const ProcessHandle*>(inst.handle.get()); }

Result<std::shared_ptr<ProcessHandle>> OpenSavedProcess(const std::string& saved_state) {
  auto j = nlohmann::json::parse(saved_state, nullptr, false);
  if (!j.is_object() || !j["pid"].is_number_integer() || !j["pid_start"].is_number_unsigned())
    return MakeError(Code::kNotFound, "no process was saved");
  auto p = std::make_shared<ProcessHandle>();
  p->pid = j["pid"].get<pid_t>();
  p->pid_start = j["pid_start"].get<uint64_t>();
  if (p->pid <= 0 || proc::StartTime(p->pid) != p->pid_start) return MakeError(Code::kNotFound, "its process is gone");
  SBX_ASSIGN_OR_RETURN(p->pidfd, proc::PidfdOpen(p->pid));
  // The pid was checked before the pidfd was opened: check again after.
  if (proc::StartTime(p->pid) != p->pid_start) return MakeError(Code::kNotFound, "its process is gone");
  return p;
}

bool ProcessAlive(const Instance& inst) {
  const ProcessHandle* p = ProcessOf(inst);
  return p && p->pidfd.valid() && !proc::PidfdExited(p->pidfd.get());
}

}  // namespace sbx::runtime
