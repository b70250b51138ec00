#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>

#include "api/errors.h"
#include "api/handlers.h"
#include "api/multipart.h"
#include "base/fs.h"

namespace sbx::api {
namespace {

TEST(OpenApi, DocumentListsExactlyTheRouterRoutes) {
  auto doc = nlohmann::json::parse(OpenApiDocument());
  std::set<std::string> documented, routed;
  for (auto& [path, ops] : doc["paths"].items())
    for (auto& [method, _] : ops.items()) {
      std::string m = method;
      for (auto& c : m) c = static_cast<char>(std::toupper(c));
      documented.insert(m + " " + path);
    }
  for (const auto& r : Routes()) routed.insert(std::string(r.method) + " " + r.pattern);
  for (const auto& r : ProxyRoutes()) routed.insert(std::string(r.method) + " " + r.pattern);
  EXPECT_EQ(documented, routed);
}

TEST(OpenApi, ServedDocumentIsTheOneInDocs) {
  auto file = fs::ReadFile(std::string(SBX_SOURCE_DIR) + "/docs/openapi.json");
  ASSERT_TRUE(file.ok());
  EXPECT_EQ(*file, OpenApiDocument());
}

TEST(Errors, ContractCodes) {
  struct Case {
    Code code;
    int status;
    const char* name;
  } cases[] = {{Code::kInvalidArgument, 400, "invalid_request"}, {Code::kUnauthenticated, 401, "unauthorized"},
               {Code::kPermissionDenied, 403, "forbidden"},     {Code::kNotFound, 404, "not_found"},
               {Code::kAlreadyExists, 409, "conflict"},         {Code::kFailedPrecondition, 409, "conflict"},
               {Code::kTooLarge, 413, "too_large"},             {Code::kResourceExhausted, 429, "quota_exceeded"},
               {Code::kInternal, 500, "internal"},              {Code::kUnavailable, 503, "unavailable"},
               {Code::kDeadlineExceeded, 504, "exec_timeout"}};
  for (const auto& c : cases) {
    auto r = ErrorResponse(MakeError(c.code, "m"));
    EXPECT_EQ(r.status, c.status);
    auto j = nlohmann::json::parse(r.body);
    EXPECT_EQ(j["error"]["code"], c.name);
    EXPECT_EQ(j["error"]["message"], "m");
  }
}

}  // namespace
}  // namespace sbx::api

TEST(Multipart, PartsAndTheirNames) {
  const std::string body =
      "preamble\r\n--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"/tmp/a b.txt\"\r\n"
      "Content-Type: application/octet-stream\r\n\r\nhello\r\n--XyZ-not-the-end\r\n"
      "--XyZ\r\ncontent-disposition: form-data; name=file; filename=rel.txt\r\n\r\n\r\n--XyZ\r\n\r\nno headers\r\n"
      "--XyZ--\r\nepilogue";
  auto parts = sbx::api::ParseMultipart(body, "XyZ");
  ASSERT_TRUE(parts.ok()) << parts.error().message;
  ASSERT_EQ(parts->size(), 3u);
  const auto& a = (*parts)[0];
  EXPECT_EQ(a.name, "file");
  EXPECT_EQ(a.filename, "/tmp/a b.txt");
  // A line that only starts like the boundary is content.
  EXPECT_EQ(body.substr(a.begin, a.end - a.begin), "hello\r\n--XyZ-not-the-end");
  EXPECT_EQ((*parts)[1].filename, "rel.txt");
  EXPECT_EQ((*parts)[1].begin, (*parts)[1].end);  // an empty file
  EXPECT_EQ((*parts)[2].name, "");
  EXPECT_EQ(body.substr((*parts)[2].begin, (*parts)[2].end - (*parts)[2].begin), "no headers");
  EXPECT_EQ(sbx::api::HeaderParam("multipart/form-data; boundary=----abc", "boundary"), "----abc");
  EXPECT_EQ(sbx::api::HeaderParam("multipart/form-data; boundary=\"q;x\"; a=b", "boundary"), "q;x");
  EXPECT_EQ(sbx::api::HeaderParam("form-data; filename=\"f\"", "name"), "");  // not a suffix of another
  EXPECT_EQ(sbx::api::HeaderParam("Multipart/Form-Data; Boundary=AbC", "boundary"), "AbC");
}

TEST(Multipart, MalformedBodiesAreRefused) {
  for (const char* body : {"", "no boundary here", "--B", "--Bjunk", "--B\r\nContent-Disposition: x\r\n",
                           "--B\r\n\r\nnever ends", "--B\r\n\r\nx\r\n--B"}) {
    auto parts = sbx::api::ParseMultipart(body, "B");
    EXPECT_FALSE(parts.ok()) << body;
    if (!parts.ok()) {
      EXPECT_EQ(parts.error().code, sbx::Code::kInvalidArgument);
    }
  }
  EXPECT_FALSE(sbx::api::ParseMultipart("--\r\n\r\nx\r\n----", "").ok());  // no boundary given
  auto none = sbx::api::ParseMultipart("--B--", "B");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}
