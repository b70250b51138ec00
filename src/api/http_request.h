// A parsed HTTP request as the handlers see it, and the decoding of its target. No
// Beast or Asio here: the fuzz harness builds it with another compiler.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/cancel.h"

namespace sbx::api {

class BodySource;  // http_types.h

// Decodes %XX escapes (and '+' as a space in query strings).
std::string PercentDecode(std::string_view s, bool plus_is_space);
// The "name=value" pairs of a Cookie header, leading spaces trimmed, empty ones left out.
std::vector<std::string_view> CookiePairs(std::string_view header);

struct Request {
  std::string method;
  std::string path;                          // as sent (encoded), without the query
  std::map<std::string, std::string> query;  // decoded
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
  std::string body_file;  // for routes that take a large body: a temp file holding it
  BodySource* body_source = nullptr;  // for routes that read their body as it comes
  int64_t arrival_us = 0;
  std::map<std::string, std::string> params;  // from the route pattern, e.g. {id}
  // Set when the request came through the in-sandbox API socket: the sandbox it came
  // from (its processes' cgroup), which is then the caller whatever the headers say.
  std::string via_sandbox;
  bool admin = false;  // the admin key came with it (set by Api::Refusal)
  // The sandbox whose token (SBX_TOKEN, or E2B's access token) authorised it, over TCP or
  // sbxd's socket (set by Api::Refusal): its connections count against that sandbox's cap.
  std::string token_sandbox;
  std::string pattern;  // the route it matched (set by Api::Match)
  // Fires when the client goes away (closes its end) while the request is handled or its
  // answer streamed: work done only for it (an exec) stops. Set by the session.
  std::shared_ptr<CancelSignal> client_gone;
  std::string Header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? "" : it->second;
  }
};

// Splits a request target into the (still encoded) path and the decoded query.
void ParseTarget(std::string_view target, Request& req);

// Strict framing (RFC 9112): whether the raw header section `head` (request line to the
// blank line) folds a line (obs-fold), and the reason a request's Transfer-Encoding
// fields (`codings`, each field's value) are refused (empty: fine). Only a single final
// "chunked" is accepted, and never together with Content-Length.
bool HasObsFold(std::string_view head);
std::string CheckTransferEncoding(const std::vector<std::string>& codings, bool has_content_length);

}  // namespace sbx::api
