#include "runtime/gvisor/memory.h"

#include <nlohmann/json.hpp>

#include "base/fs.h"
#include "runtime/gvisor/bundle.h"

namespace sbx::runtime::gvisor {

namespace {
constexpr const char* kShapeFile = "shape.json";
std::string Mb(uint64_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }
}  // namespace

SavedShape ShapeOf(const StartSpec& spec) {
  return SavedShape{spec.limits.memory_bytes, spec.limits.cpus, spec.link.has_value()};
}

Status WriteShape(const std::string& memory_dir, const SavedShape& s) {
  nlohmann::json j = {{"memory_bytes", s.memory_bytes}, {"cpus", s.cpus}, {"network", s.network}};
  return fs::WriteFileAtomic(memory_dir + "/" + kShapeFile, j.dump(), 0600);
}

Result<SavedShape> ReadShape(const std::string& memory_dir) {
  auto text = fs::ReadFile(memory_dir + "/" + kShapeFile, 4096);
  if (!text.ok()) return MakeError(Code::kFailedPrecondition, "the saved memory in " + memory_dir + " is not whole");
  auto j = nlohmann::json::parse(*text, nullptr, false);
  if (!j.is_object() || !j["memory_bytes"].is_number_unsigned() || !j["cpus"].is_number_integer() ||
      !j["network"].is_boolean())
    return MakeError(Code::kFailedPrecondition, "the saved memory's shape in " + memory_dir + " is damaged");
  return SavedShape{j["memory_bytes"].get<uint64_t>(), j["cpus"].get<int>(), j["network"].get<bool>()};
}

std::string Mismatch(const SavedShape& saved, const StartSpec& spec) {
  const SavedShape now = ShapeOf(spec);
  if (now.memory_bytes != saved.memory_bytes || now.cpus != saved.cpus)
    return "its resources (" + std::to_string(now.cpus) + " CPUs, " + Mb(now.memory_bytes) +
           ") are not its template's (" + std::to_string(saved.cpus) + ", " + Mb(saved.memory_bytes) + ")";
  if (now.network != saved.network) return now.network ? "its template had no network" : "its template had a network";
  return "";
}

Error SaveRefused(const std::string& log, const std::string& instead) {
  auto text = fs::ReadFile(log, 1 << 20);
  std::string line = text.ok() ? *text : "";
  if (size_t at = line.find("checkpoint failed"); at != std::string::npos) line = line.substr(at);
  line = line.substr(0, line.find('\n'));
  if (size_t at = line.find("unsupported networking state"); at != std::string::npos) {
    std::string which;  // "local A:P, remote B:Q"
    if (size_t l = line.find("local ", at); l != std::string::npos) {
      which = line.substr(l);
      while (!which.empty() && (which.back() == ':' || which.back() == ' ')) which.pop_back();
    }
    return MakeError(Code::kFailedPrecondition,
                     "gVisor cannot checkpoint a sandbox with a TCP connection open, or closed by it within about "
                     "a minute" + (which.empty() ? "" : " (" + which + ")") +
                         "; close it and wait, or " + instead);
  }
  // runsc fails to encode other state it cannot save (seen: a connection of the sandbox's
  // to a host socket, such as the in-sandbox API's); the sandbox runs on.
  if (line.find("encoding error") != std::string::npos)
    return MakeError(Code::kFailedPrecondition,
                     "gVisor could not save the sandbox's state (a connection to a host socket, such as " +
                         std::string(kApiInside) + "/api.sock, cannot be saved; close it, or " +
                         instead + "): " + line.substr(0, 400));
  return MakeError(Code::kInternal, "runsc could not checkpoint the sandbox: " + line.substr(0, 600));
}

}  // namespace sbx::runtime::gvisor
