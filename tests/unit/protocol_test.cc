#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "agent/protocol.h"
#include "agent/vm_config.h"
#include "agent/users.h"

#include <nlohmann/json.hpp>

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
  EXPECT_FALSE(ExecRequest::FromJson(R"({"v":3,"argv":["x"]})").ok());
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

TEST(Protocol, AgentInfoListsFeaturesAndOldPongsHaveNone) {
  AgentInfo mine = ThisAgent();
  EXPECT_EQ(mine.version, kProtocolVersion);
  EXPECT_TRUE(mine.Has("exec"));
  EXPECT_TRUE(mine.Has("files"));
  EXPECT_FALSE(mine.Has("no-such-feature"));
  auto back = AgentInfo::FromJson(mine.ToJson());
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->features, mine.features);
  // An agent from before the feature list answered {"version", "agent"} only.
  auto old = AgentInfo::FromJson(R"({"version":1,"agent":"sbx-agent 0.0.1"})");
  ASSERT_TRUE(old.ok());
  EXPECT_TRUE(old->features.empty());
  EXPECT_FALSE(old->Has("exec"));
  EXPECT_FALSE(AgentInfo::FromJson(R"({"agent":"x"})").ok());
  EXPECT_FALSE(AgentInfo::FromJson(R"({"version":1,"features":"exec"})").ok());
}

// A dialer whose "agent" is a thread that answers one ping with `pong`.
class OnePongDialer : public Dialer {
 public:
  explicit OnePongDialer(std::string pong) {
    int sv[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    mine_ = UniqueFd(sv[0]);
    theirs_ = std::thread([fd = sv[1], pong] {
      char hdr[8];
      if (::read(fd, hdr, sizeof hdr) == 8) {
        std::string f = EncodeFrame(FrameType::kPong, pong);
        EXPECT_EQ(::write(fd, f.data(), f.size()), static_cast<ssize_t>(f.size()));
      }
      ::close(fd);
    });
  }
  ~OnePongDialer() override { theirs_.join(); }
  Result<std::optional<UniqueFd>> TryDial() const override {
    return std::optional<UniqueFd>(UniqueFd(::dup(mine_.get())));
  }

 private:
  UniqueFd mine_;
  std::thread theirs_;
};

TEST(Protocol, RequireFeatureIsConflictForAnOlderAgent) {
  OnePongDialer old(R"({"version":1,"agent":"sbx-agent 0.0.1"})");
  Status st = RequireFeature(old, "files", 2000);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().code, Code::kFailedPrecondition);
  EXPECT_NE(st.error().message.find("files"), std::string::npos);
  OnePongDialer current(ThisAgent().ToJson());
  EXPECT_TRUE(RequireFeature(current, "files", 2000).ok());
}

TEST(Protocol, AnErrorFrameKeepsItsCodeAndOlderAgentsWordsStillRead) {
  // Every code goes over the wire and back as itself.
  for (int c = static_cast<int>(Code::kOk); c <= static_cast<int>(Code::kInternal); ++c) {
    const Code code = static_cast<Code>(c);
    nlohmann::json frame = {{"message", "m"}, {"code", CodeName(code)}};
    Error e = ErrorOfFrame(frame.dump());
    EXPECT_EQ(e.code, code) << CodeName(code);
    EXPECT_EQ(e.message, "m");
  }
  // What agents before it sent: the API's words.
  EXPECT_EQ(ErrorOfFrame(R"({"message":"x","code":"invalid_request"})").code, Code::kInvalidArgument);
  EXPECT_EQ(ErrorOfFrame(R"({"message":"x","code":"conflict"})").code, Code::kFailedPrecondition);
  EXPECT_EQ(ErrorOfFrame(R"({"message":"x","code":"forbidden"})").code, Code::kPermissionDenied);
  EXPECT_EQ(ErrorOfFrame(R"({"message":"x","code":"no-such-word"})").code, Code::kInternal);
  // A frame without a code is the caller's default; one that is no JSON is its own message.
  Error spawn = ErrorOfFrame(R"({"message":"sbx: exec nope: No such file"})", Code::kInvalidArgument);
  EXPECT_EQ(spawn.code, Code::kInvalidArgument);
  EXPECT_EQ(spawn.message, "sbx: exec nope: No such file");
  EXPECT_EQ(ErrorOfFrame("not json").message, "not json");
}

TEST(Users, FindsNamesUidsAndGroups) {
  const char* passwd =
      "root:x:0:0:root:/root:/bin/bash\n# a comment\nbroken line\nuser:x:1000:1000::/home/user:/bin/bash\n"
      "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\nbad:x:12x:1::/:/bin/sh\n";
  const char* group = "root:x:0:\nuser:x:1000:\ndocker:x:999:other,user\naudio:x:29:other\n";
  auto u = FindUser("user", passwd, group);
  ASSERT_TRUE(u.ok()) << u.error().message;
  EXPECT_EQ(u->uid, 1000u);
  EXPECT_EQ(u->gid, 1000u);
  EXPECT_EQ(u->home, "/home/user");
  EXPECT_EQ(u->groups, (std::vector<gid_t>{1000, 999}));
  auto by_uid = FindUser("65534", passwd, group);
  ASSERT_TRUE(by_uid.ok());
  EXPECT_EQ(by_uid->name, "nobody");
  EXPECT_EQ(by_uid->gid, 65534u);
  // A uid without a line: gid = uid, no other group, home /.
  auto bare = FindUser("4321", passwd, group);
  ASSERT_TRUE(bare.ok());
  EXPECT_EQ(bare->gid, 4321u);
  EXPECT_EQ(bare->groups, (std::vector<gid_t>{4321}));
  EXPECT_EQ(bare->home, "/");
  EXPECT_EQ(FindUser("nosuch", passwd, group).error().code, Code::kNotFound);
  EXPECT_EQ(FindUser("bad", passwd, group).error().code, Code::kNotFound);  // its uid is not a number
  EXPECT_EQ(FindUser("a:b", passwd, group).error().code, Code::kInvalidArgument);
  EXPECT_EQ(FindUser("4294967295", passwd, group).error().code, Code::kNotFound);  // (uid_t)-1 is no uid
}

TEST(Users, NamesOfIds) {
  const char* passwd = "root:x:0:0:root:/root:/bin/bash\nbad:x:12x:1::/:/bin/sh\nuser:x:1000:1000::/home/user:/bin/sh\n";
  const char* group = "root:x:0:\nstaff:x:50:\nuser:x:1000:\n";
  EXPECT_EQ(NameOfId(0, passwd), "root");
  EXPECT_EQ(NameOfId(1000, passwd), "user");
  EXPECT_EQ(NameOfId(12, passwd), "");  // a malformed line names nobody
  EXPECT_EQ(NameOfId(4321, passwd), "");
  EXPECT_EQ(NameOfId(50, group), "staff");
  EXPECT_EQ(NameOfId(0, ""), "");
}

TEST(Protocol, ExecRequestWithAUserSaysVersion2) {
  ExecRequest r;
  r.argv = {"id"};
  auto plain = nlohmann::json::parse(r.ToJson());
  EXPECT_EQ(plain["v"], kProtocolVersion);
  EXPECT_FALSE(plain.contains("user"));
  r.user = "user";
  auto j = nlohmann::json::parse(r.ToJson());
  EXPECT_EQ(j["v"], kUserProtocolVersion);
  auto back = ExecRequest::FromJson(r.ToJson());
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->user, "user");
}

// The microVM's config carries its disks' places, in order: the guest mounts the tag
// sbx-disk-N at the Nth. A config without disks says nothing of them.
TEST(VmConfig, DisksGoThroughInOrder) {
  VmConfig c;
  c.hostname = "sb-1";
  c.disks = {"/mnt/disk", "/work/data"};
  auto back = VmConfig::FromJson(c.ToJson());
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->disks, c.disks);
  EXPECT_EQ(VmDiskTag(1), "sbx-disk-1");
  VmConfig none;
  EXPECT_EQ(none.ToJson().find("disks"), std::string::npos);
  auto empty = VmConfig::FromJson(none.ToJson());
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->disks.empty());
}

}  // namespace
}  // namespace sbx::agent
