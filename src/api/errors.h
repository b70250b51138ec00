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

}  // namespace sbx::api
