// `sbx exec -it`: the command runs as a tty process in the sandbox, and this terminal
// talks to it over the process's WebSocket: raw mode here, keys as binary messages, its
// output straight to stdout, window size changes as resize messages. One thread.
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>
#include <cstdio>
#include <deque>
#include <memory>

#include "cli.h"

namespace sbx::cli {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace ws = beast::websocket;
using nlohmann::json;
using boost::system::error_code;

namespace {

std::pair<int, int> WindowSize() {
  struct winsize w = {};
  if (::ioctl(STDOUT_FILENO, TIOCGWINSZ, &w) == 0 && w.ws_col > 0 && w.ws_row > 0) return {w.ws_col, w.ws_row};
  return {80, 24};
}

// Puts the local terminal in raw mode for as long as it lives.
class RawMode {
 public:
  RawMode() {
    if (!::isatty(STDIN_FILENO) || ::tcgetattr(STDIN_FILENO, &saved_) != 0) return;
    struct termios raw = saved_;
    ::cfmakeraw(&raw);
    active_ = ::tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0;
  }
  ~RawMode() {
    if (active_) ::tcsetattr(STDIN_FILENO, TCSANOW, &saved_);
  }

 private:
  struct termios saved_ = {};
  bool active_ = false;
};

class Session {
 public:
  Session(asio::io_context& io, ws::stream<asio::ip::tcp::socket>& w) : io_(io), w_(w), in_(io), winch_(io, SIGWINCH) {}

  void Run() {
    int fd = ::dup(STDIN_FILENO);
    error_code ec;
    if (fd >= 0) in_.assign(fd, ec);
    if (fd < 0 || ec) {
      // Not something to wait on (a regular file, say): no input.
      if (fd >= 0 && ec) ::close(fd);
      Send(json{{"type", "eof"}}.dump(), true);
    } else {
      ReadStdin();
    }
    Winch();
    ReadSocket();
  }
  int exit_code = 1;
  bool exited = false;

 private:
  void Send(std::string data, bool text) {
    queue_.emplace_back(std::move(data), text);
    if (!writing_) WriteNext();
  }
  void WriteNext() {
    if (queue_.empty()) {
      writing_ = false;
      return;
    }
    writing_ = true;
    w_.text(queue_.front().second);
    w_.async_write(asio::buffer(queue_.front().first), [this](error_code ec, size_t) {
      queue_.pop_front();
      if (ec) {
        queue_.clear();
        writing_ = false;
        return;
      }
      WriteNext();
    });
  }
  void ReadStdin() {
    in_.async_read_some(asio::buffer(buf_), [this](error_code ec, size_t n) {
      if (ec) {
        Send(json{{"type", "eof"}}.dump(), true);
        return;
      }
      Send(std::string(buf_.data(), n), false);
      ReadStdin();
    });
  }
  void Winch() {
    winch_.async_wait([this](error_code ec, int) {
      if (ec) return;
      auto [cols, rows] = WindowSize();
      Send(json{{"type", "resize"}, {"cols", cols}, {"rows", rows}}.dump(), true);
      Winch();
    });
  }
  void ReadSocket() {
    w_.async_read(rbuf_, [this](error_code ec, size_t) {
      if (ec) {
        io_.stop();
        return;
      }
      std::string data = beast::buffers_to_string(rbuf_.data());
      rbuf_.consume(rbuf_.size());
      if (w_.got_binary()) {
        size_t off = 0;
        while (off < data.size()) {
          ssize_t n = ::write(STDOUT_FILENO, data.data() + off, data.size() - off);
          if (n <= 0) break;
          off += n;
        }
      } else {
        auto j = json::parse(data, nullptr, false);
        if (j.is_object() && j.value("type", "") == "exit") {
          exited = true;
          exit_code = j["exit_code"].is_number() ? j["exit_code"].get<int>() : 1;
        }
      }
      ReadSocket();
    });
  }

  asio::io_context& io_;
  ws::stream<asio::ip::tcp::socket>& w_;
  asio::posix::stream_descriptor in_;
  asio::signal_set winch_;
  std::array<char, 16384> buf_;
  beast::flat_buffer rbuf_;
  std::deque<std::pair<std::string, bool>> queue_;
  bool writing_ = false;
};

}  // namespace

int RunInteractiveExec(HttpClient& c, const Globals& g, const std::string& id, const nlohmann::json& body_in) {
  auto [cols, rows] = WindowSize();
  json body = body_in;
  body["tty"] = true;
  body["cols"] = cols;
  body["rows"] = rows;
  auto started = CallJson(c, "POST", "/v1/sandboxes/" + id + "/processes", body);
  if (!started) return 1;
  int64_t pid = started->value("pid", int64_t{0});
  // http://HOST:PORT[/prefix]
  std::string rest = g.url.substr(g.url.find("://") == std::string::npos ? 0 : g.url.find("://") + 3);
  if (g.url.rfind("https://", 0) == 0) {
    std::fprintf(stderr, "sbx: exec -it needs an http:// URL\n");
    return 1;
  }
  std::string hostport = rest.substr(0, rest.find('/'));
  std::string prefix = rest.find('/') == std::string::npos ? "" : rest.substr(rest.find('/'));
  while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
  std::string host = hostport, port = "80";
  if (auto colon = hostport.rfind(':'); colon != std::string::npos) {
    host = hostport.substr(0, colon);
    port = hostport.substr(colon + 1);
  }
  asio::io_context io;
  ws::stream<asio::ip::tcp::socket> w(io);
  error_code ec;
  asio::ip::tcp::resolver resolver(io);
  auto endpoints = resolver.resolve(host, port, ec);
  if (!ec) asio::connect(w.next_layer(), endpoints, ec);
  std::string key = g.api_key;
  w.set_option(ws::stream_base::decorator([key](ws::request_type& r) {
    if (!key.empty()) r.set(beast::http::field::authorization, "Bearer " + key);
  }));
  if (!ec) w.handshake(hostport, prefix + "/v1/sandboxes/" + id + "/processes/" + std::to_string(pid) + "/tty", ec);
  if (ec) {
    std::fprintf(stderr, "sbx: cannot attach to the terminal of process %lld: %s\n", static_cast<long long>(pid),
                 ec.message().c_str());
    return 1;
  }
  Session s(io, w);
  {
    RawMode raw;
    s.Run();
    io.run();
  }
  if (!s.exited) {
    std::fprintf(stderr, "\r\nsbx: the terminal connection ended before the process (pid %lld)\n",
                 static_cast<long long>(pid));
    return 1;
  }
  return s.exit_code;
}

}  // namespace sbx::cli
