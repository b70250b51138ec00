// The port proxy's exchange: one client request to a port inside a sandbox, through a
// port-open connection to the sandbox's agent. sbxd frames both messages itself: the
// request goes up without the caller's credentials, the answer comes back with its own
// framing and `Connection: close`, and the client's connection ends after it, so nothing
// the client sends later can reach the sandbox. Raw bytes flow only after the sandbox's
// server answered 101 to a real upgrade request. Runs on the connection's strand.
#pragma once

#include <utility>

#include <boost/asio/awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <string>
#include <functional>
#include <string_view>

#include "api/handlers.h"
#include "api/wire.h"

namespace sbx::api {

// `hp` holds the request's header (its body is still unread in `buf` and the stream).
// `by_path` is true for /v1/sandboxes/{id}/ports/{port}/... (served from the API's own
// origin: answers carry a CSP sandbox so that a browser gives the page an opaque origin).
// `authorized` is called once the caller may use the port (before anything is proxied).
template <typename Stream>
boost::asio::awaitable<void> ProxyExchange(Stream& stream, boost::beast::flat_buffer& buf,
                                           boost::beast::http::request_parser<boost::beast::http::empty_body>& hp,
                                           Api* api, const ProxyTarget& t, const Request& req,
                                           const ConnLimits& limits, bool by_path,
                                    const std::function<void()>& authorized);

// A Set-Cookie value without its Domain attribute (so the cookie stays with the one
// sandbox's host that set it).
std::string StripCookieDomain(std::string_view set_cookie);

}  // namespace sbx::api
