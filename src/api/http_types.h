// Plain request and response types between the Beast server and the handlers, so that
// handlers compile without Beast. One request is handled by one coroutine.
#pragma once

#include <utility>

#include <boost/asio/awaitable.hpp>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "api/http_request.h"

namespace sbx::api {

// Writes one chunk of a streamed response; false once the client is gone.
using ChunkSink = std::function<boost::asio::awaitable<bool>(std::string_view)>;

struct Response {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // more header fields (not streamed answers)
  // A streamed (chunked) response: called with a sink instead of sending `body`. It may
  // return a non-empty Response instead if it fails before writing anything.
  std::function<boost::asio::awaitable<std::optional<Response>>(ChunkSink)> stream;
};

}  // namespace sbx::api
