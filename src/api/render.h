// How core's answers look in JSON (the SPEC's shapes), shared by the route files.
#pragma once

#include <utility>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "agent/client.h"
#include "api/http_types.h"
#include "core/views.h"

namespace sbx::api {

nlohmann::json SandboxJson(const core::SandboxView& v);
nlohmann::json SnapshotJson(const storage::SnapshotRecord& r);
nlohmann::json DiskJson(const storage::DiskRecord& d, int64_t used);
// exit_code, timed_out, truncation, timing and cost of an exec.
nlohmann::json ExitJson(const core::ExecResult& r);

// Gathers a buffered exec's stdout and stderr for its JSON answer.
struct Collector {
  std::shared_ptr<std::string> out = std::make_shared<std::string>();
  std::shared_ptr<std::string> err = std::make_shared<std::string>();
  agent::OutputFn Fn() const;
  // The answer: `head` and the output, streamed out (api/exec_answer.h); each stream's
  // JSON is capped at twice the raw output cap.
  Response Answer(int status, nlohmann::json head, uint64_t output_cap, bool base64 = false) const;
};

}  // namespace sbx::api
