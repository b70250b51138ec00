// Plain request and response types between the Beast server and the handlers, so that
// handlers compile without Beast. One request is handled by one coroutine.
#pragma once

#include <utility>

#include <boost/asio/awaitable.hpp>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace sbx::api {

// Decodes %XX escapes (and '+' as a space in query strings).
std::string PercentDecode(std::string_view s, bool plus_is_space);

struct Request {
  std::string method;
  std::string path;                          // as sent (encoded), without the query
  std::map<std::string, std::string> query;  // decoded
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
  std::string body_file;  // for routes that take a large body: a temp file holding it
  int64_t arrival_us = 0;
  std::map<std::string, std::string> params;  // from the route pattern, e.g. {id}
  std::string Header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? "" : it->second;
  }
};

// Writes one chunk of a streamed response; false once the client is gone.
using ChunkSink = std::function<boost::asio::awaitable<bool>(std::string_view)>;

struct Response {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  // A streamed (chunked) response: called with a sink instead of sending `body`. It may
  // return a non-empty Response instead if it fails before writing anything.
  std::function<boost::asio::awaitable<std::optional<Response>>(ChunkSink)> stream;
};

}  // namespace sbx::api
