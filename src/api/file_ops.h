// The plumbing of one file operation in a sandbox's agent (agent/files.h), shared by
// sbx's files routes (file_routes.cc) and the E2B front's (e2b_files.cc). Internal to the API.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "agent/client.h"
#include "api/http_types.h"
#include "base/result.h"
#include "core/views.h"

namespace sbx::api {

// A file operation under way: the agent's first answer, and the connection (with the
// lease that keeps the agent) for what follows it.
// (Its implicit noexcept moves are json's own, which clang-tidy cannot see through.)
struct FileOp {  // NOLINT(bugprone-exception-escape)
  nlohmann::json first;
  std::shared_ptr<agent::Conn> conn;
  std::shared_ptr<core::AgentLease> lease;
};

// Streams the agent's kData frames (after its first answer, and `first` if not empty)
// to the client.
Response StreamData(std::shared_ptr<agent::Conn> conn, std::shared_ptr<core::AgentLease> lease,
                    const char* content_type, std::string first = "");

// One piece of an upload (at most agent::kMaxPayload bytes) as a kData frame.
boost::asio::awaitable<Status> SendUploadPiece(agent::Conn* conn, std::string piece);
// After an upload's pieces (`sent`: how sending them went): kDataEnd, then the agent's
// final answer (its refusal, when it stopped reading).
boost::asio::awaitable<Result<nlohmann::json>> EndUpload(agent::Conn* conn, Status sent);

// Sends the body file (or `body` when `body_file` is empty; it must outlive the call) as
// kData frames and kDataEnd, then takes the agent's final answer.
boost::asio::awaitable<Result<nlohmann::json>> Upload(agent::Conn* conn, const std::string* body_file,
                                                      std::string_view body);

}  // namespace sbx::api
