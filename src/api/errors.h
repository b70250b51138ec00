// The one place where errors become HTTP: status codes and the JSON error body. Any thread.
#pragma once

#include "api/http_types.h"
#include "base/result.h"

namespace sbx::api {

int HttpStatus(Code code);
const char* ErrorCode(Code code);
Response ErrorResponse(const Error& e);
// Handlers name an error by its code only; its status and body come from here.
Response ErrorResponse(Code code, const std::string& message);
// An error that may pass later (Error::retry_after_s) says when, as Retry-After.
void AddRetryHint(const Error& e, Response* r);

}  // namespace sbx::api
