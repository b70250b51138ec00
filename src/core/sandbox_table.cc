#include "core/sandbox_table.h"

#include <nlohmann/json.hpp>

#include "base/ids.h"

namespace sbx::core {

namespace {
constexpr std::pair<State, const char*> kNames[] = {
    {State::kCreating, "creating"}, {State::kRunning, "running"}, {State::kPaused, "paused"},
    {State::kStopped, "stopped"},   {State::kError, "error"},     {State::kDeleting, "deleting"},
    {State::kPooled, "pooled"},
};
}  // namespace

const char* StateName(State s) {
  for (const auto& [st, name] : kNames)
    if (st == s) return name;
  return "error";
}

State ParseState(const std::string& s) {
  for (const auto& [st, name] : kNames)
    if (s == name) return st;
  return State::kError;
}

std::vector<std::string> LayerPaths(const std::string& layers_json) {
  std::vector<std::string> out;
  auto arr = nlohmann::json::parse(layers_json, nullptr, false);
  if (arr.is_array())
    for (const auto& l : arr)
      if (l.is_string()) out.push_back(l.get<std::string>());
  return out;
}

Result<EntryPtr> SandboxTable::Find(const std::string& id) const {
  if (!ValidName(id)) return MakeError(Code::kInvalidArgument, "invalid sandbox id");
  auto it = live_.find(id);
  if (it == live_.end()) return MakeError(Code::kNotFound, "sandbox " + id + " not found");
  return it->second;
}

EntryPtr SandboxTable::Get(const std::string& id) const {
  auto it = live_.find(id);
  return it == live_.end() ? nullptr : it->second;
}

Status SandboxTable::RequireState(const Entry& e, std::initializer_list<State> allowed) const {
  const std::string& id = e.rec.id;
  if (e.busy || e.captures)
    return MakeError(Code::kFailedPrecondition, "sandbox " + id + " is changing state or being captured; try again");
  std::string want;
  for (State s : allowed) {
    if (e.is(s)) return OkStatus();
    want += (want.empty() ? "" : " or ") + std::string(StateName(s));
  }
  return MakeError(Code::kFailedPrecondition, "sandbox " + id + " is " + e.rec.state + ", not " + want);
}

Result<std::string> SandboxTable::Resolve(const std::string& ref) const {
  auto visible = [](const Entry& e) { return !e.is(State::kPooled); };
  if (auto it = live_.find(ref); it != live_.end() && visible(*it->second)) return ref;
  for (const auto& [id, e] : live_)
    if (visible(*e) && !ref.empty() && e->rec.name == ref) return id;
  std::vector<std::string> ids;
  for (const auto& [id, e] : live_)
    if (visible(*e)) ids.push_back(id);
  return PickByIdPrefix(ref, ids, "sb-", "sandbox");
}

Status SandboxTable::CheckNameFree(const std::string& name, const std::string& except) const {
  if (name.empty()) return OkStatus();
  for (const auto& [id, other] : live_)
    if (id != except && other->rec.name == name)
      return MakeError(Code::kAlreadyExists, "a sandbox named \"" + name + "\" exists");
  return OkStatus();
}

void SandboxTable::MarkDeleting(const EntryPtr& e) {
  e->set_state(State::kDeleting);
  live_.erase(e->rec.id);
  deleting_[e->rec.id] = e;
}

EntryPtr SandboxTable::Deleting(const std::string& id) const {
  auto it = deleting_.find(id);
  return it == deleting_.end() ? nullptr : it->second;
}

}  // namespace sbx::core
