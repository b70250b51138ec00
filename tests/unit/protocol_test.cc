#include <gtest/gtest.h>

#include "agent/protocol.h"

namespace sbx::agent {
namespace {

TEST(Protocol, FramesRoundTripAcrossSplitReads) {
  std::string wire = EncodeFrame(FrameType::kStdout, "hello") + EncodeFrame(FrameType::kExit, "{}") +
                     EncodeFrame(FrameType::kStdinEof, "");
  FrameDecoder d;
  std::vector<Frame> got;
  for (char c : wire) {  // one byte at a time
    d.Feed(&c, 1);
    while (true) {
      auto f = d.Next();
      ASSERT_TRUE(f.ok());
      if (!f->has_value()) break;
      got.push_back(std::move(**f));
    }
  }
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].type, FrameType::kStdout);
  EXPECT_EQ(got[0].payload, "hello");
  EXPECT_EQ(got[1].type, FrameType::kExit);
  EXPECT_EQ(got[2].payload, "");
}

TEST(Protocol, RejectsOversizedAndUnknownFrames) {
  std::string h = EncodeHeader(FrameType::kStdout, kMaxPayload + 1);
  EXPECT_FALSE(DecodeHeader(reinterpret_cast<const unsigned char*>(h.data())).ok());
  std::string u = EncodeHeader(FrameType::kStdout, 1);
  u[4] = 99;
  EXPECT_FALSE(DecodeHeader(reinterpret_cast<const unsigned char*>(u.data())).ok());
  std::string r = EncodeHeader(FrameType::kStdout, 1);
  r[6] = 1;
  EXPECT_FALSE(DecodeHeader(reinterpret_cast<const unsigned char*>(r.data())).ok());
}

TEST(Protocol, ExecRequestRoundTripAndValidation) {
  ExecRequest r;
  r.argv = {"/bin/sh", "-c", "echo hi"};
  r.env = {"A=1"};
  r.cwd = "/tmp";
  r.timeout_ms = 5000;
  r.stdin_open = true;
  auto back = ExecRequest::FromJson(r.ToJson());
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->argv, r.argv);
  EXPECT_EQ(back->env, r.env);
  EXPECT_EQ(back->timeout_ms, 5000);
  EXPECT_TRUE(back->stdin_open);
  EXPECT_FALSE(ExecRequest::FromJson(R"({"v":2,"argv":["x"]})").ok());
  EXPECT_FALSE(ExecRequest::FromJson(R"({"v":1,"argv":[]})").ok());
  EXPECT_FALSE(ExecRequest::FromJson(R"({"v":1,"argv":["x"],"env":["NOEQUALS"]})").ok());
  EXPECT_FALSE(ExecRequest::FromJson("not json").ok());
}

TEST(Protocol, ExitInfoRoundTrip) {
  ExitInfo e;
  e.exit_code = 137;
  e.signal = 9;
  e.stdout_truncated = true;
  auto back = ExitInfo::FromJson(e.ToJson());
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->exit_code, 137);
  EXPECT_EQ(back->signal, 9);
  EXPECT_TRUE(back->stdout_truncated);
  EXPECT_FALSE(back->timed_out);
}

}  // namespace
}  // namespace sbx::agent
