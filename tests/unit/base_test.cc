#include <gtest/gtest.h>

#include "base/fs.h"
#include "base/ids.h"
#include "base/result.h"

namespace sbx {
namespace {

TEST(ValidName, AcceptsContractNames) {
  for (std::string ok : {std::string("a"), std::string("0"), std::string("tool-call-a"),
                         std::string("x.y_z-1"), std::string(63, 'a')})
    EXPECT_TRUE(ValidName(ok)) << ok;
}

TEST(ValidName, RejectsEverythingElse) {
  for (std::string bad : {std::string(""), std::string("-a"), std::string(".a"), std::string("A"),
                          std::string("a/b"), std::string(".."), std::string("a b"),
                          std::string(64, 'a'), std::string("a\0b", 3), std::string("é"),
                          std::string(10000, 'x')})
    EXPECT_FALSE(ValidName(bad)) << bad;
}

TEST(Ids, NewIdIsAValidNameAndUnique) {
  std::string a = NewId("sb"), b = NewId("sb");
  EXPECT_TRUE(ValidName(a));
  EXPECT_NE(a, b);
  EXPECT_EQ(a.size(), 3u + 16u);
}

TEST(Ids, Sha256KnownVector) {
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(Ids, Rfc3339) { EXPECT_EQ(FormatRfc3339(0), "1970-01-01T00:00:00Z"); }

TEST(Ids, ParseTimeMs) {
  EXPECT_EQ(ParseTimeMs("1970-01-01T00:00:00Z"), 0);
  EXPECT_EQ(ParseTimeMs("2026-11-30T13:52:16Z"), 1796046736000);
  EXPECT_EQ(ParseTimeMs("2026-11-30T14:52:16.25+01:00"), 1796046736250);
  EXPECT_EQ(ParseTimeMs("1796046736.5"), 1796046736500);
  for (const char* bad : {"", "yesterday", "2026-11-30T13:52:16", "2026-11-30T13:52:16+0:00",
                          "2026-11-30T13:52:16+01", "2026-11-30T13:52:16+24:00", "2026-13-45T00:00:00Z",
                          "2026-11-30T13:52:16Zjunk", "1e9", "-5"})
    EXPECT_EQ(ParseTimeMs(bad), -1) << bad;
}

Result<int> Half(int x) {
  if (x % 2) return MakeError(Code::kInvalidArgument, "odd");
  return x / 2;
}

Result<int> Quarter(int x) {
  SBX_ASSIGN_OR_RETURN(int h, Half(x));
  return Half(h);
}

TEST(Result, PropagatesErrors) {
  EXPECT_EQ(*Quarter(8), 2);
  auto r = Quarter(6);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Code::kInvalidArgument);
  EXPECT_EQ(r.error().Wrap("quartering").message, "quartering: odd");
}

TEST(Fs, ErrnoMapsToCodes) {
  auto r = fs::ReadFile("/nonexistent/file");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Code::kNotFound);
  EXPECT_EQ(r.error().sys_errno, ENOENT);
}

}  // namespace
}  // namespace sbx
