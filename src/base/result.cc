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

Code CodeOfName(std::string_view name) {
  if (name == "invalid_request") return Code::kInvalidArgument;
  if (name == "conflict") return Code::kFailedPrecondition;
  if (name == "forbidden") return Code::kPermissionDenied;
  for (int c = static_cast<int>(Code::kOk); c <= static_cast<int>(Code::kInternal); ++c)
    if (name == CodeName(static_cast<Code>(c))) return static_cast<Code>(c);
  return Code::kInternal;
}

std::string Error::ToString() const { return std::string(CodeName(code)) + ": " + message; }

Code CodeOfErrno(int err) {
  switch (err) {
    case ENOENT: return Code::kNotFound;
    case EEXIST: return Code::kAlreadyExists;
    case ENOTEMPTY:
    case EBUSY: return Code::kFailedPrecondition;
    case EISDIR:
    case ENOTDIR:
    case EINVAL:
    case ENAMETOOLONG:
    case ELOOP:
    case EXDEV: return Code::kInvalidArgument;
    case EACCES:
    case EPERM:
    case EROFS: return Code::kPermissionDenied;
    case ENOSPC:
    case EDQUOT:
    case EFBIG: return Code::kTooLarge;
    case EMFILE:
    case ENFILE:
    case ENOMEM:
    case EAGAIN: return Code::kResourceExhausted;
    case ETIMEDOUT: return Code::kDeadlineExceeded;
    default: return Code::kInternal;
  }
}

Error ErrnoError(const std::string& what, int err) {
  return Error{CodeOfErrno(err), err, what + ": " + std::strerror(err)};
}

}  // namespace sbx
