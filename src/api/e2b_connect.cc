// Connect-RPC's wire forms as the E2B front speaks them (JSON messages over HTTP/1.1).
#include "api/e2b_connect.h"

#include "api/decode.h"

#include "api/handler_util.h"
#include "base/base64.h"

namespace sbx::api {

using nlohmann::json;

std::string Envelope(uint8_t flags, const json& msg) {
  std::string body = msg.dump(-1, ' ', false, json::error_handler_t::replace);
  std::string out(5, '\0');
  out[0] = static_cast<char>(flags);
  auto n = static_cast<uint32_t>(body.size());
  for (int i = 0; i < 4; ++i) out[1 + i] = static_cast<char>((n >> (24 - 8 * i)) & 0xff);
  return out + body;
}

// The one message of a server-streaming request's body.
Result<json> ReadEnvelope(const std::string& body) {
  if (body.size() < 5) return MakeError(Code::kInvalidArgument, "the request is not a Connect envelope");
  if (static_cast<uint8_t>(body[0]) & kCompressed)
    return MakeError(Code::kInvalidArgument, "compressed Connect messages are not supported");
  uint32_t n = 0;
  for (int i = 1; i <= 4; ++i) n = (n << 8) | static_cast<uint8_t>(body[i]);
  if (body.size() != 5 + static_cast<size_t>(n))
    return MakeError(Code::kInvalidArgument, "the Connect envelope's length does not match its body");
  SBX_ASSIGN_OR_RETURN(json j, ParseJson(std::string_view(body).substr(5)));
  if (!j.is_object()) return MakeError(Code::kInvalidArgument, "the message is not a JSON object");
  return j;
}

// Connect's name for an sbx error code (an end-of-stream error).
const char* ConnectCode(Code c) {
  switch (c) {
    case Code::kInvalidArgument: return "invalid_argument";
    case Code::kUnauthenticated: return "unauthenticated";
    case Code::kPermissionDenied: return "permission_denied";
    case Code::kNotFound: return "not_found";
    case Code::kAlreadyExists: return "already_exists";
    case Code::kFailedPrecondition: return "failed_precondition";
    case Code::kResourceExhausted: return "resource_exhausted";
    case Code::kUnavailable: return "unavailable";
    case Code::kDeadlineExceeded: return "deadline_exceeded";
    default: return "internal";
  }
}

// A unary call's error as Connect answers it: its HTTP status and {"code", "message"}
// with Connect's code name (the SDK tells a missing process by not_found).
Response ConnectError(const Error& e) {
  static const std::pair<Code, int> kStatus[] = {
      {Code::kInvalidArgument, 400}, {Code::kUnauthenticated, 401}, {Code::kPermissionDenied, 403},
      {Code::kNotFound, 404},        {Code::kAlreadyExists, 409},   {Code::kFailedPrecondition, 400},
      {Code::kResourceExhausted, 429}, {Code::kUnavailable, 503},  {Code::kDeadlineExceeded, 504}};
  int status = 500;
  for (const auto& [code, s] : kStatus)
    if (code == e.code) status = s;
  return Json(status, {{"code", ConnectCode(e.code)}, {"message", e.message}});
}

std::string EndOfStream(const std::optional<Error>& e) {
  if (!e) return Envelope(kEndStream, json::object());
  return Envelope(kEndStream, {{"error", {{"code", ConnectCode(e->code)}, {"message", e->message}}}});
}

// The user of `Authorization: Basic base64(user:)`: empty when none is named.
Result<std::string> BasicUser(const std::string& header) {
  if (header.empty()) return std::string();
  const std::string prefix = "Basic ";
  if (header.rfind(prefix, 0) != 0) return MakeError(Code::kInvalidArgument, "Authorization must be Basic base64(user:)");
  SBX_ASSIGN_OR_RETURN(std::string plain, Base64Decode(header.substr(prefix.size())));
  return plain.substr(0, plain.find(':'));
}

// An error of a streaming call before its stream began: Connect sends it as the stream's
// only message, the end of stream, under 200 (a client maps other statuses to codes of
// its own: a 404 would read as "unimplemented").
Response StreamError(const Error& e) {
  Response r;
  r.content_type = "application/connect+json";
  r.body = EndOfStream(e);
  return r;
}

bool SpeaksConnectJson(const Request& req, Response* refusal) {
  if (req.Header("content-type") == "application/connect+json") return true;
  *refusal = ConnectError(MakeError(Code::kInvalidArgument, "only application/connect+json is spoken here"));
  refusal->status = 415;
  return false;
}

Result<json> UnaryBody(const Request& req) {
  SBX_ASSIGN_OR_RETURN(json j, ParseJson(req.body));
  if (!j.is_object()) return MakeError(Code::kInvalidArgument, "the body is not a JSON object");
  return j;
}

}  // namespace sbx::api
