#include "base/result.h"

#include <cstring>

namespace sbx {

const char* CodeName(Code c) {
  switch (c) {
    case Code::kOk: return "ok";
    case Code::kInvalidArgument: return "invalid_argument";
    case Code::kNotFound: return "not_found";
    case Code::kAlreadyExists: return "already_exists";
    case Code::kFailedPrecondition: return "failed_precondition";
    case Code::kResourceExhausted: return "resource_exhausted";
    case Code::kPermissionDenied: return "permission_denied";
    case Code::kUnauthenticated: return "unauthenticated";
    case Code::kUnavailable: return "unavailable";
    case Code::kDeadlineExceeded: return "deadline_exceeded";
    case Code::kTooLarge: return "too_large";
    case Code::kInternal: return "internal";
  }
  return "internal";
}

std::string Error::ToString() const { return std::string(CodeName(code)) + ": " + message; }

Error ErrnoError(const std::string& what, int err) {
  Code code = Code::kInternal;
  switch (err) {
    case ENOENT: code = Code::kNotFound; break;
    case EEXIST: code = Code::kAlreadyExists; break;
    case EACCES:
    case EPERM: code = Code::kPermissionDenied; break;
    case ENOSPC:
    case EMFILE:
    case ENFILE:
    case ENOMEM:
    case EAGAIN: code = Code::kResourceExhausted; break;
    case EINVAL: code = Code::kInvalidArgument; break;
    case ETIMEDOUT: code = Code::kDeadlineExceeded; break;
    default: break;
  }
  return Error{code, err, what + ": " + std::strerror(err)};
}

}  // namespace sbx
