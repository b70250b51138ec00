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
