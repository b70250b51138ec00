// A small blocking HTTP/1.1 client for the CLI (keep-alive, NDJSON streaming, file
// uploads). One instance per thread.
#pragma once

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "base/result.h"

namespace sbx::cli {

struct HttpResult {
  int status = 0;
  std::string body;
};

class HttpClient {
 public:
  // url: http://HOST:PORT
  HttpClient(std::string url, std::string api_key);
  ~HttpClient();
  Result<HttpResult> Call(const std::string& method, const std::string& target,
                          const std::string& body = "", const std::string& accept = "application/json");
  // Streams the response body line by line to `on_line` (status and error body returned).
  Result<HttpResult> Stream(const std::string& method, const std::string& target,
                            const std::string& body, const std::function<void(const std::string&)>& on_line);
  // Sends a file as the body (POST unless `method` says otherwise).
  Result<HttpResult> Upload(const std::string& target, const std::string& path,
                            const std::function<void(uint64_t, uint64_t)>& progress,
                            const std::string& method = "POST");
  // GET `target` into the file `path` (created or truncated) as it arrives; on a status
  // of 300 or more the file is left empty and the error body is returned.
  Result<HttpResult> Download(const std::string& target, const std::string& path,
                              const std::function<void(uint64_t, uint64_t)>& progress);
  void Close();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The message of an API error body, or the raw body.
std::string ErrorMessage(const HttpResult& r);
// Why the CLI has no API key (the key file it could not read), added to a 401's message.
void SetMissingKeyReason(std::string why);
// The error code of the last failed call: sbxd's (`not_found`, ...), "unavailable" when
// sbxd could not be reached; empty if none failed.
const std::string& LastErrorCode();
// True once an answer said the command line itself was wrong (an ambiguous id prefix):
// the command then exits 2, as for a usage error.
bool UsageErrorSeen();
// Why a call failed (transport error or an error status), or nullopt if it succeeded.
std::optional<std::string> FailureOf(const Result<HttpResult>& r);
// A JSON call that must succeed: its parsed body, or nullopt after printing why
// ("sbx: ..." on stderr).
std::optional<nlohmann::json> CallJson(HttpClient& c, const std::string& method, const std::string& target,
                                       const nlohmann::json& body = nullptr);

}  // namespace sbx::cli
