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

namespace {

// The parts of `body` as a reader gives them when the body comes in pieces of `step`
// bytes (0: whole): each part's name, filename and content.
struct ReadPart {
  std::string name, filename, content;
};
sbx::Result<std::vector<ReadPart>> ReadAll(std::string_view body, const std::string& boundary, size_t step) {
  sbx::api::MultipartReader r(boundary);
  std::vector<sbx::api::MultipartEvent> ev;
  if (step == 0) step = body.size() + 1;
  for (size_t at = 0; at < body.size(); at += step)
    if (auto st = r.Feed(body.substr(at, step), &ev); !st.ok()) return st.error();
  if (body.empty())
    if (auto st = r.Feed("", &ev); !st.ok()) return st.error();
  if (auto st = r.Finish(); !st.ok()) return st.error();
  std::vector<ReadPart> parts;
  bool open = false;
  for (auto& e : ev) {
    if (e.kind == sbx::api::MultipartEvent::kPart) {
      EXPECT_FALSE(open);
      parts.push_back({e.name, e.filename, ""});
      open = true;
    } else if (e.kind == sbx::api::MultipartEvent::kData) {
      EXPECT_TRUE(open);
      EXPECT_FALSE(e.data.empty());
      parts.back().content += e.data;
    } else {
      EXPECT_TRUE(open);
      open = false;
    }
  }
  EXPECT_FALSE(open);
  return parts;
}

}  // namespace

TEST(Multipart, PartsAndTheirNamesInAnyPieces) {
  const std::string body =
      "preamble\r\n--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"/tmp/a b.txt\"\r\n"
      "Content-Type: application/octet-stream\r\n\r\nhello\r\n--XyZ-not-the-end\r\n"
      "--XyZ\r\ncontent-disposition: form-data; name=file; filename=rel.txt\r\n\r\n\r\n--XyZ\r\n\r\nno headers\r\n"
      "--XyZ--\r\nepilogue";
  for (size_t step : {0, 1, 2, 3, 7, 64}) {
    auto parts = ReadAll(body, "XyZ", step);
    ASSERT_TRUE(parts.ok()) << parts.error().message;
    ASSERT_EQ(parts->size(), 3u);
    const auto& a = (*parts)[0];
    EXPECT_EQ(a.name, "file");
    EXPECT_EQ(a.filename, "/tmp/a b.txt");
    // A line that only starts like the boundary is content.
    EXPECT_EQ(a.content, "hello\r\n--XyZ-not-the-end");
    EXPECT_EQ((*parts)[1].filename, "rel.txt");
    EXPECT_EQ((*parts)[1].content, "");  // an empty file
    EXPECT_EQ((*parts)[2].name, "");
    EXPECT_EQ((*parts)[2].content, "no headers");
  }
  EXPECT_EQ(sbx::api::HeaderParam("multipart/form-data; boundary=----abc", "boundary"), "----abc");
  EXPECT_EQ(sbx::api::HeaderParam("multipart/form-data; boundary=\"q;x\"; a=b", "boundary"), "q;x");
  EXPECT_EQ(sbx::api::HeaderParam("form-data; filename=\"f\"", "name"), "");  // not a suffix of another
  EXPECT_EQ(sbx::api::HeaderParam("Multipart/Form-Data; Boundary=AbC", "boundary"), "AbC");
}

TEST(Multipart, AReaderHoldsLittleOfALargePart) {
  sbx::api::MultipartReader r("B");
  std::vector<sbx::api::MultipartEvent> ev;
  ASSERT_TRUE(r.Feed("--B\r\n\r\n", &ev).ok());
  size_t got = 0;
  const std::string piece(1 << 16, 'x');
  for (int i = 0; i < 64; ++i) {
    ev.clear();
    ASSERT_TRUE(r.Feed(piece, &ev).ok());
    for (auto& e : ev) got += e.data.size();
  }
  // All but a delimiter's length went on as it came.
  EXPECT_GE(got, 64u * piece.size() - 8);
  ev.clear();
  ASSERT_TRUE(r.Feed("\r\n--B--", &ev).ok());
  for (auto& e : ev) got += e.data.size();
  EXPECT_EQ(got, 64u * piece.size());
  EXPECT_TRUE(r.Finish().ok());
  // A part's headers are bounded.
  sbx::api::MultipartReader h("B");
  EXPECT_FALSE(h.Feed("--B\r\n" + std::string(sbx::api::MultipartReader::kMaxPartHeader + 8, 'h'), &ev).ok());
}

TEST(Multipart, MalformedBodiesAreRefused) {
  for (const char* body : {"", "no boundary here", "--B", "--Bjunk", "--B\r\nContent-Disposition: x\r\n",
                           "--B\r\n\r\nnever ends", "--B\r\n\r\nx\r\n--B"}) {
    for (size_t step : {0, 1}) {
      auto parts = ReadAll(body, "B", step);
      EXPECT_FALSE(parts.ok()) << body;
      if (!parts.ok()) {
        EXPECT_EQ(parts.error().code, sbx::Code::kInvalidArgument);
      }
    }
  }
  EXPECT_FALSE(ReadAll("--\r\n\r\nx\r\n----", "", 0).ok());  // no boundary given
  auto none = ReadAll("--B--", "B", 1);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}
