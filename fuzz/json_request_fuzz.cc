// Bytes as a request body: the strict object parser, the create decoder (every field's
// type and range checks), the exec "cmd" decoder, and the time parser of /v1/usage.
#include <cstddef>
#include <cstdint>
#include <string>

#include "api/decode.h"
#include "base/ids.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string body(reinterpret_cast<const char*>(data), size);
  auto c = sbx::api::DecodeCreate(body);
  if (c.ok() && c->ttl_action.empty()) __builtin_trap();  // a decoded create has its defaults
  auto j = sbx::api::ParseObject(body, {"cmd", "cwd", "env", "stdin", "timeout_seconds"});
  if (j.ok()) {
    std::string shell;
    std::vector<std::string> argv;
    if (sbx::api::ParseCmd(*j, &shell, &argv).ok() && shell.empty() && argv.empty()) __builtin_trap();
    (void)sbx::api::GetInt(*j, "timeout_seconds");
    (void)sbx::api::GetStringMap(*j, "env");
  }
  int64_t t = sbx::ParseTimeMs(body);
  if (t < -1) __builtin_trap();
  return 0;
}
