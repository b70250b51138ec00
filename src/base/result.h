// Result<T>: a value or an Error{code, errno, message}. Any thread.
#pragma once

#include <cerrno>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace sbx {

enum class Code {
  kOk = 0,
  kInvalidArgument,
  kNotFound,
  kAlreadyExists,
  kFailedPrecondition,
  kResourceExhausted,
  kPermissionDenied,
  kUnauthenticated,
  kUnavailable,
  kDeadlineExceeded,
  kTooLarge,
  kInternal,
};

// A code's name ("invalid_argument", ...): also the word an agent's error frame carries.
const char* CodeName(Code c);
// The code a name stands for: CodeName's, or the API's words that agents before it sent
// ("invalid_request", "conflict", "forbidden"); anything else is kInternal.
Code CodeOfName(std::string_view name);

struct Error {
  Code code = Code::kInternal;
  int sys_errno = 0;
  std::string message;
  // A refusal that may pass later (a limit on work in flight): in how many seconds to
  // try again (0: no hint). The API sends it as Retry-After.
  int retry_after_s = 0;

  // Prepends context: "mounting overlay: <message>".
  Error Wrap(const std::string& context) const {
    return Error{code, sys_errno, context + ": " + message, retry_after_s};
  }
  std::string ToString() const;
};

inline Error MakeError(Code code, std::string message) { return Error{code, 0, std::move(message)}; }
// The code of an errno: the one table for sbxd and the agent. ENOENT is kNotFound, EEXIST
// kAlreadyExists, a full disk (ENOSPC, EDQUOT, EFBIG) kTooLarge, short of fds or memory
// (EMFILE, ENFILE, ENOMEM, EAGAIN) kResourceExhausted, a bad path kInvalidArgument, and
// so on (result.cc); anything unlisted is kInternal. A caller that means something else
// says so explicitly (OnDataDir below; a full disk in the disk files API, src/disks).
Code CodeOfErrno(int err);
// A write to sbxd's own data dir that found the file system full (ENOSPC, EDQUOT) is 503
// `unavailable` (the host's trouble), not 413 (a user's disk); anything else passes.
inline Error OnDataDir(Error e) {
  if (e.sys_errno == ENOSPC || e.sys_errno == EDQUOT) {
    e.code = Code::kUnavailable;
    e.message = "sbxd's data dir is full (" + e.message + "); free space and try again";
  }
  return e;
}
// From errno (captured by the caller right after the failing call), coded by CodeOfErrno.
Error ErrnoError(const std::string& what, int err = errno);

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}
  Result(Error error) : v_(std::move(error)) {}
  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  const Error& error() const { return std::get<1>(v_); }

 private:
  std::variant<T, Error> v_;
};

template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error error) : err_(std::move(error)), ok_(false) {}
  bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const Error& error() const { return err_; }

 private:
  Error err_;
  bool ok_ = true;
};

using Status = Result<void>;
inline Status OkStatus() { return Status(); }

}  // namespace sbx

// Returns the error of `expr` (a Result) from the enclosing function.
#define SBX_RETURN_IF_ERROR(expr)          \
  do {                                     \
    auto _st = (expr);                     \
    if (!_st.ok()) return _st.error();     \
  } while (0)

#define SBX_CONCAT_INNER(a, b) a##b
#define SBX_CONCAT(a, b) SBX_CONCAT_INNER(a, b)
// SBX_ASSIGN_OR_RETURN(auto x, Foo()); returns Foo()'s error, else binds its value.
#define SBX_ASSIGN_OR_RETURN(lhs, expr) \
  SBX_ASSIGN_OR_RETURN_IMPL(SBX_CONCAT(_res_, __LINE__), lhs, expr)
#define SBX_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.error();              \
  lhs = std::move(tmp).value()
