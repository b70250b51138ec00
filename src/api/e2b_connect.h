// Connect-RPC's wire forms as the E2B front speaks them: JSON messages over HTTP/1.1,
// unary calls as plain JSON, server streams in Connect's envelopes. Internal to the API.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "api/http_request.h"
#include "api/http_types.h"
#include "base/result.h"

namespace sbx::api {

// Connect's envelope flags.
constexpr uint8_t kCompressed = 0x01;
constexpr uint8_t kEndStream = 0x02;

// One message in its envelope: a flags byte, a 4-byte big-endian length, the message.
std::string Envelope(uint8_t flags, const nlohmann::json& msg);
// The one message of a server-streaming request's body.
Result<nlohmann::json> ReadEnvelope(const std::string& body);
// Connect's name for an sbx error code.
const char* ConnectCode(Code c);
// A unary call's error as Connect answers it: its HTTP status and {"code", "message"}.
Response ConnectError(const Error& e);
// The end-of-stream envelope, with the error that ended the stream if any.
std::string EndOfStream(const std::optional<Error>& e);
// An error of a streaming call before its stream began: the end of stream alone, under
// 200 (a client maps other statuses to codes of its own: 404 reads as "unimplemented").
Response StreamError(const Error& e);
// A unary call's body: a JSON object (unknown fields are ignored, as protobuf's JSON does).
Result<nlohmann::json> UnaryBody(const Request& req);
// Whether a streaming call's body is Connect's JSON envelope (application/connect+json);
// if not, `*refusal` is the 415 to answer.
bool SpeaksConnectJson(const Request& req, Response* refusal);
// The user of `Authorization: Basic base64(user:)`: empty when none is named.
Result<std::string> BasicUser(const std::string& header);

}  // namespace sbx::api
