#include "api/errors.h"

#include <nlohmann/json.hpp>

namespace sbx::api {

int HttpStatus(Code c) {
  switch (c) {
    case Code::kOk: return 200;
    case Code::kInvalidArgument: return 400;
    case Code::kUnauthenticated: return 401;
    case Code::kPermissionDenied: return 403;
    case Code::kNotFound: return 404;
    case Code::kAlreadyExists:
    case Code::kFailedPrecondition: return 409;
    case Code::kTooLarge: return 413;
    case Code::kResourceExhausted: return 429;
    case Code::kUnavailable: return 503;
    case Code::kDeadlineExceeded: return 504;
    case Code::kInternal: return 500;
  }
  return 500;
}

const char* ErrorCode(Code c) {
  switch (c) {
    case Code::kOk: return "ok";
    case Code::kInvalidArgument: return "invalid_request";
    case Code::kUnauthenticated: return "unauthorized";
    case Code::kPermissionDenied: return "forbidden";
    case Code::kNotFound: return "not_found";
    case Code::kAlreadyExists:
    case Code::kFailedPrecondition: return "conflict";
    case Code::kTooLarge: return "too_large";
    case Code::kResourceExhausted: return "quota_exceeded";
    case Code::kUnavailable: return "unavailable";
    case Code::kDeadlineExceeded: return "exec_timeout";
    case Code::kInternal: return "internal";
  }
  return "internal";
}

Response ErrorResponse(Code code, const std::string& message) {
  Response r;
  r.status = HttpStatus(code);
  nlohmann::json j = {{"error", {{"code", ErrorCode(code)}, {"message", message}}}};
  r.body = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return r;
}

void AddRetryHint(const Error& e, Response* r) {
  if (e.retry_after_s > 0) r->headers.emplace_back("Retry-After", std::to_string(e.retry_after_s));
}

Response ErrorResponse(const Error& e) {
  Response r = ErrorResponse(e.code, e.message);
  AddRetryHint(e, &r);
  return r;
}

}  // namespace sbx::api
