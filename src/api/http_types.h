// Plain request and response types between the Beast server and the handlers, so that
// handlers compile without Beast. One request is handled by one coroutine.
#pragma once

#include <utility>

#include <boost/asio/awaitable.hpp>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "api/http_request.h"
#include "base/result.h"

namespace sbx::api {

// Writes one chunk of a streamed response; false once the client is gone.
using ChunkSink = std::function<boost::asio::awaitable<bool>(std::string_view)>;

// The body of a route that reads it as it arrives (Body::kStream): pulled piece by piece,
// so that it is never held whole, in memory or on the host's disk. Lives for one request,
// on its connection's strand.
class BodySource {
 public:
  virtual ~BodySource() = default;
  // The length the client declared (Content-Length); nullopt for a chunked body.
  virtual std::optional<uint64_t> declared() const = 0;
  // The next piece ("" once the body has ended), or why it cannot be read: too large
  // (kTooLarge), malformed, or stalled or cut off by the client.
  virtual boost::asio::awaitable<Result<std::string>> Next() = 0;
  // Whether the whole body has been read (the connection can then take another request).
  virtual bool done() const = 0;
};

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
