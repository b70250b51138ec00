// Helpers shared by the route handlers (handlers.cc, file_routes.cc). Internal to the API.
#pragma once

#include <utility>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "api/errors.h"
#include "api/http_types.h"
#include "base/ids.h"
#include "base/run_blocking.h"

namespace sbx::api {

inline Response Json(int status, const nlohmann::json& j) {
  Response r;
  r.status = status;
  r.body = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return r;
}

inline int64_t NowUs() { return SteadyUs(); }

inline Response Bad(const std::string& msg) { return ErrorResponse(MakeError(Code::kInvalidArgument, msg)); }

using sbx::RunBlocking;

// Text of `data` after `carry` (bytes held back from the last call), valid up to its last
// whole UTF-8 sequence; a sequence cut at the end is held back in `carry`.
inline std::string TakeUtf8(std::string& carry, std::string_view data) {
  std::string s = carry;
  s.append(data);
  size_t n = s.size();
  size_t i = n;
  int back = 0;
  while (i > 0 && back < 3 && (static_cast<unsigned char>(s[i - 1]) & 0xC0) == 0x80) {
    --i;
    ++back;
  }
  if (i > 0) {
    unsigned char lead = static_cast<unsigned char>(s[i - 1]);
    int need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    if (need > 1 && need > back + 1) {
      carry = s.substr(i - 1);
      s.resize(i - 1);
      return s;
    }
  }
  carry.clear();
  return s;
}

}  // namespace sbx::api
