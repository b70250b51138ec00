// Server: the HTTP/1.1 listener (TCP and a unix socket) built on Boost.Beast. Reads
// requests, hands them to Api, writes answers (chunked when streamed). Created and run from
// the daemon's main thread; sessions run on the io_context's threads.
#pragma once

#include <utility>

#include <boost/asio/io_context.hpp>
#include <memory>
#include <string>

#include "api/handlers.h"
#include "api/wire.h"
#include "base/result.h"

namespace sbx::api {

struct ServerOptions {
  std::string listen_host = "127.0.0.1";
  int listen_port = 7070;
  std::string socket_path;  // empty: no unix socket
  ConnLimits limits;
  // The in-sandbox API socket (empty: none): bound into every sandbox; each connection
  // is the sandbox its peer process is in (asked of the sandbox's runtime).
  std::string sandbox_socket_path;
};

class Server {
 public:
  Server(ServerOptions opts, Api* api, boost::asio::io_context* io);
  ~Server();
  // Binds the listeners and starts accepting (returns at once).
  Status Start();
  int bound_port() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sbx::api
