#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>

#include "api/errors.h"
#include "api/handlers.h"
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
