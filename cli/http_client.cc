#include "http_client.h"

#include "commands.h"

#include <cstdio>

#include <utility>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

namespace sbx::cli {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

struct HttpClient::Impl {
  std::string host, port, key;
  asio::io_context io;
  std::unique_ptr<asio::ip::tcp::socket> sock;
  beast::flat_buffer buf;

  Status Connect() {
    if (sock && sock->is_open()) return OkStatus();
    try {
      asio::ip::tcp::resolver res(io);
      sock = std::make_unique<asio::ip::tcp::socket>(io);
      asio::connect(*sock, res.resolve(host, port));
      sock->set_option(asio::ip::tcp::no_delay(true));
      buf.clear();
    } catch (const std::exception& e) {
      sock.reset();
      return MakeError(Code::kUnavailable, "cannot reach sbxd at http://" + host + ":" + port + ": " + e.what());
    }
    return OkStatus();
  }
  template <typename Req>
  void Prepare(Req& req, const std::string& method, const std::string& target) {
    req.method_string(method);
    req.target(target);
    req.version(11);
    req.set(http::field::host, host);
    req.set(http::field::user_agent, "sbx-cli/" SBX_VERSION);
    if (!key.empty()) req.set(http::field::authorization, "Bearer " + key);
    req.keep_alive(true);
  }
};

HttpClient::HttpClient(std::string url, std::string api_key) : impl_(new Impl) {
  std::string u = url;
  if (u.rfind("http://", 0) == 0) u = u.substr(7);
  while (!u.empty() && u.back() == '/') u.pop_back();
  auto colon = u.rfind(':');
  impl_->host = colon == std::string::npos ? u : u.substr(0, colon);
  impl_->port = colon == std::string::npos ? "80" : u.substr(colon + 1);
  impl_->key = std::move(api_key);
}

HttpClient::~HttpClient() = default;

void HttpClient::Close() { impl_->sock.reset(); }

Result<HttpResult> HttpClient::Call(const std::string& method, const std::string& target,
                                    const std::string& body, const std::string& accept) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    SBX_RETURN_IF_ERROR(impl_->Connect());
    http::request<http::string_body> req;
    impl_->Prepare(req, method, target);
    req.set(http::field::accept, accept);
    if (!body.empty() || method == "POST" || method == "PUT") {
      req.set(http::field::content_type, "application/json");
      req.body() = body;
    }
    req.prepare_payload();
    beast::error_code ec;
    http::write(*impl_->sock, req, ec);
    http::response_parser<http::string_body> p;
    p.body_limit(1ULL << 32);
    if (!ec) http::read(*impl_->sock, impl_->buf, p, ec);
    if (ec) {
      impl_->sock.reset();
      // A kept-alive connection the server closed: retry once on a fresh one.
      if (attempt == 0 && (ec == http::error::end_of_stream || ec == asio::error::connection_reset ||
                           ec == asio::error::broken_pipe || ec == asio::error::eof))
        continue;
      return MakeError(Code::kUnavailable, "talking to sbxd: " + ec.message());
    }
    if (!p.get().keep_alive()) impl_->sock.reset();
    return HttpResult{static_cast<int>(p.get().result_int()), std::move(p.get().body())};
  }
  return MakeError(Code::kUnavailable, "talking to sbxd failed");
}

Result<HttpResult> HttpClient::Stream(const std::string& method, const std::string& target,
                                      const std::string& body,
                                      const std::function<void(const std::string&)>& on_line) {
  SBX_RETURN_IF_ERROR(impl_->Connect());
  http::request<http::string_body> req;
  impl_->Prepare(req, method, target);
  req.set(http::field::accept, "application/x-ndjson");
  req.set(http::field::content_type, "application/json");
  req.body() = body;
  req.prepare_payload();
  beast::error_code ec;
  http::write(*impl_->sock, req, ec);
  if (ec) {
    impl_->sock.reset();
    return MakeError(Code::kUnavailable, "talking to sbxd: " + ec.message());
  }
  http::response_parser<http::buffer_body> p;
  p.body_limit(std::uint64_t{1} << 40);
  http::read_header(*impl_->sock, impl_->buf, p, ec);
  if (ec) {
    impl_->sock.reset();
    return MakeError(Code::kUnavailable, "talking to sbxd: " + ec.message());
  }
  HttpResult out;
  out.status = static_cast<int>(p.get().result_int());
  bool ndjson = p.get()[http::field::content_type].find("ndjson") != beast::string_view::npos;
  std::string pending;
  char chunk[65536];
  while (!p.is_done()) {
    p.get().body().data = chunk;
    p.get().body().size = sizeof chunk;
    // read_some, not read: read waits until the chunk is full, so output a command
    // produces slowly would show in 64 KiB batches, or only at its end.
    http::read_some(*impl_->sock, impl_->buf, p, ec);
    if (ec == http::error::need_buffer) ec = {};
    if (ec) {
      impl_->sock.reset();
      return MakeError(Code::kUnavailable, "the stream from sbxd broke: " + ec.message());
    }
    size_t n = sizeof chunk - p.get().body().size;
    if (!ndjson) {
      out.body.append(chunk, n);
      continue;
    }
    pending.append(chunk, n);
    size_t nl;
    while ((nl = pending.find('\n')) != std::string::npos) {
      on_line(pending.substr(0, nl));
      pending.erase(0, nl + 1);
    }
  }
  if (!pending.empty() && ndjson) on_line(pending);
  if (!p.get().keep_alive()) impl_->sock.reset();
  return out;
}

Result<HttpResult> HttpClient::Upload(const std::string& target, const std::string& path,
                                      const std::function<void(uint64_t, uint64_t)>& progress,
                                      const std::string& method) {
  SBX_RETURN_IF_ERROR(impl_->Connect());
  http::request<http::file_body> req;
  impl_->Prepare(req, method, target);
  req.set(http::field::content_type, "application/x-tar");
  beast::error_code ec;
  req.body().open(path.c_str(), beast::file_mode::scan, ec);
  if (ec) return MakeError(Code::kNotFound, "cannot open " + path + ": " + ec.message());
  uint64_t total = req.body().size();
  req.prepare_payload();
  http::request_serializer<http::file_body> sr{req};
  sr.limit(1 << 20);
  uint64_t sent = 0;
  http::write_header(*impl_->sock, sr, ec);
  while (!ec && !sr.is_done()) {
    size_t n = http::write_some(*impl_->sock, sr, ec);
    sent += n;
    if (progress) progress(std::min(sent, total), total);
  }
  if (ec) {
    impl_->sock.reset();
    return MakeError(Code::kUnavailable, "uploading to sbxd: " + ec.message());
  }
  http::response_parser<http::string_body> p;
  http::read(*impl_->sock, impl_->buf, p, ec);
  if (ec) {
    impl_->sock.reset();
    return MakeError(Code::kUnavailable, "talking to sbxd: " + ec.message());
  }
  return HttpResult{static_cast<int>(p.get().result_int()), std::move(p.get().body())};
}

Result<HttpResult> HttpClient::Download(const std::string& target, const std::string& path,
                                        const std::function<void(uint64_t, uint64_t)>& progress) {
  SBX_RETURN_IF_ERROR(impl_->Connect());
  http::request<http::empty_body> req;
  impl_->Prepare(req, "GET", target);
  req.set(http::field::accept, "*/*");
  beast::error_code ec;
  http::write(*impl_->sock, req, ec);
  http::response_parser<http::buffer_body> p;
  p.body_limit(std::uint64_t{1} << 40);
  if (!ec) http::read_header(*impl_->sock, impl_->buf, p, ec);
  if (ec) {
    impl_->sock.reset();
    return MakeError(Code::kUnavailable, "talking to sbxd: " + ec.message());
  }
  HttpResult out;
  out.status = static_cast<int>(p.get().result_int());
  uint64_t total = p.content_length().value_or(0), got = 0;
  FILE* f = out.status < 300 ? std::fopen(path.c_str(), "wb") : nullptr;
  if (out.status < 300 && !f) {
    impl_->sock.reset();
    return MakeError(Code::kInvalidArgument, "cannot write " + path);
  }
  bool write_ok = true;
  char chunk[1 << 16];
  while (!p.is_done()) {
    p.get().body().data = chunk;
    p.get().body().size = sizeof chunk;
    http::read_some(*impl_->sock, impl_->buf, p, ec);
    if (ec == http::error::need_buffer) ec = {};
    if (ec) break;
    size_t n = sizeof chunk - p.get().body().size;
    got += n;
    if (f) write_ok = write_ok && std::fwrite(chunk, 1, n, f) == n;
    else out.body.append(chunk, n);
    if (f && progress) progress(got, total);
  }
  if (f) write_ok = std::fclose(f) == 0 && write_ok;
  if (ec) {
    impl_->sock.reset();
    return MakeError(Code::kUnavailable, "the download from sbxd broke: " + ec.message());
  }
  if (!p.get().keep_alive()) impl_->sock.reset();
  if (!write_ok) return MakeError(Code::kInvalidArgument, "cannot write " + path);
  return out;
}

namespace {
bool g_usage_error = false;
std::string g_last_code;
std::string g_missing_key;
}  // namespace

void SetMissingKeyReason(std::string why) { g_missing_key = std::move(why); }

const std::string& LastErrorCode() { return g_last_code; }

bool UsageErrorSeen() { return g_usage_error; }

std::string ErrorMessage(const HttpResult& r) {
  auto j = nlohmann::json::parse(r.body, nullptr, false);
  if (j.is_object() && j.contains("error") && j["error"].is_object()) {
    std::string code = j["error"].value("code", "");
    std::string msg = j["error"].value("message", "");
    g_last_code = code;
    if (r.status == 401 && !g_missing_key.empty()) msg += ": " + g_missing_key;
    // A name or id prefix that fits several: the command line was wrong, as for a typo.
    if (r.status == 400 && msg.rfind("ambiguous", 0) == 0) g_usage_error = true;
    return msg + (code.empty() ? "" : " (" + code + ")");
  }
  g_last_code = r.status >= 500 ? "internal" : "invalid_request";
  return "HTTP " + std::to_string(r.status) + ": " + r.body;
}

std::optional<std::string> FailureOf(const Result<HttpResult>& r) {
  if (!r.ok()) {
    g_last_code = r.error().code == Code::kUnavailable ? "unavailable" : "client_error";
    return r.error().message;
  }
  if (r->status >= 300) return ErrorMessage(*r);
  return std::nullopt;
}

std::optional<nlohmann::json> CallJson(HttpClient& c, const std::string& method, const std::string& target,
                                       const nlohmann::json& body) {
  auto r = c.Call(method, target, body.is_null() ? "" : body.dump());
  std::optional<std::string> why = FailureOf(r);
  auto j = why ? nlohmann::json() : nlohmann::json::parse(r->body, nullptr, false);
  if (!why && j.is_discarded()) why = "sbxd sent a body that is not JSON";
  if (why) {
    ReportError(*why, "internal");
    return std::nullopt;
  }
  return j;
}

}  // namespace sbx::cli
