// A tty process's terminal over a WebSocket (GET .../processes/{pid}/tty with an upgrade).
// Runs on the connection's strand.
#pragma once

#include <utility>

#include <boost/asio/awaitable.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/parser.hpp>

#include "api/handlers.h"
#include "api/wire.h"

namespace sbx::api {

template <typename Stream>
boost::asio::awaitable<void> Terminal(Stream& stream, boost::beast::http::request_parser<boost::beast::http::empty_body>& hp,
                                      Api* api, const Request* req);

}  // namespace sbx::api
