// multipart/form-data bodies (RFC 7578), as E2B's SDK uploads files: read piece by piece
// as the body arrives, so that a part's content goes on to the sandbox without the body
// ever being held whole (in memory or on the host's disk). Pure parsing of untrusted bytes
// (fuzzed: fuzz/multipart_fuzz.cc). One reader per body, on one thread.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"

namespace sbx::api {

// A parameter of a header value such as Content-Type or Content-Disposition
// (`name="x"` or `name=x`), "" when absent.
std::string HeaderParam(std::string_view value, const std::string& name);

// What a piece of the body completed: a part's start (with its Content-Disposition's name
// and filename parameters, "" when absent), some of its content, or its end.
struct MultipartEvent {
  enum Kind { kPart, kData, kPartEnd } kind = kData;
  std::string name, filename;  // kPart
  std::string data;            // kData
};

class MultipartReader {
 public:
  // Headers of one part may take at most this much.
  static constexpr size_t kMaxPartHeader = 16 << 10;
  explicit MultipartReader(std::string boundary);
  // Takes the next piece of the body and appends the events it completes to `out` (a
  // part's content may come as several kData events). kInvalidArgument, naming what is
  // malformed, once the body is; the reader then takes nothing more. Holds at most a
  // part's header or a delimiter's length of the body between calls.
  Status Feed(std::string_view piece, std::vector<MultipartEvent>* out);
  // At the body's end: kInvalidArgument unless its closing delimiter came.
  Status Finish() const;

 private:
  enum class State { kPreamble, kAfterDelimiter, kHeaders, kContent, kDone, kFailed };
  // Makes what progress buf_ allows; false when it needs more bytes.
  Result<bool> Step(std::vector<MultipartEvent>* out);
  std::string delim_;  // "--" + boundary
  std::string buf_;
  State state_ = State::kPreamble;
};

}  // namespace sbx::api
