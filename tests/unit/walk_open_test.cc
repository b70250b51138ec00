// WalkOpen (the agent's path resolution where the kernel has no openat2, as under gVisor)
// against openat2 itself on the same tree: the same file, or the same error.
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

#include "agent/file_paths.h"
#include "base/fs.h"
#include "base/unique_fd.h"

namespace sbx::agent {
namespace {

// The file an open reached, or the error it gave.
std::string Outcome(int fd) {
  if (fd < 0) return "errno " + std::to_string(errno);
  UniqueFd f(fd);
  struct stat st;
  if (::fstat(fd, &st) != 0) return "fstat failed";
  return "inode " + std::to_string(st.st_ino) + (S_ISLNK(st.st_mode) ? " (link)" : "");
}

class WalkOpenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sbx-walk-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    ASSERT_TRUE(fs::MkdirAll(dir_ + "/a/b").ok());
    ASSERT_TRUE(fs::WriteFile(dir_ + "/a/b/file", "x").ok());
    ASSERT_TRUE(fs::WriteFile(dir_ + "/top", "t").ok());
    ASSERT_EQ(::symlink("/a/b", (dir_ + "/a/abs").c_str()), 0);
    ASSERT_EQ(::symlink("../../../..", (dir_ + "/a/up").c_str()), 0);
    ASSERT_EQ(::symlink("b/file", (dir_ + "/a/rel").c_str()), 0);
    ASSERT_EQ(::symlink("loop", (dir_ + "/a/loop").c_str()), 0);
    ASSERT_EQ(::symlink("/nowhere", (dir_ + "/a/dangling").c_str()), 0);
    root_.Reset(::open(dir_.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    ASSERT_TRUE(root_.valid());
  }
  void TearDown() override { (void)fs::RemoveTree(dir_); }

  void Same(const std::string& path, int flags, uint64_t resolve) {
    std::string want = Outcome(Open2(root_.get(), path, flags, resolve));
    std::string got = Outcome(WalkOpen(root_.get(), path, flags, resolve));
    EXPECT_EQ(got, want) << path << " flags " << flags << " resolve " << resolve;
  }

  std::string dir_;
  UniqueFd root_;
};

TEST_F(WalkOpenTest, ResolvesInTheRootAsOpenat2Does) {
  for (const char* p : {"a/b/file", "/a/b/file", "a/abs/file", "/a/up/top", "a/up/a/b/file", "a/rel", "../../top",
                        "a/../a/b/file", "a/b/file/x", "missing", "a/loop", "a/dangling", "", "/", "a/b/"})
    for (int flags : {O_RDONLY, O_PATH, O_PATH | O_NOFOLLOW, O_RDONLY | O_DIRECTORY}) Same(p, flags, kInRoot);
}

TEST_F(WalkOpenTest, StaysBeneathTheStartAsOpenat2Does) {
  for (const char* p : {"a/b/file", "/a/b/file", "a/abs/file", "a/up/top", "a/rel", "../x", "a/../top", "a/b/../../top"})
    for (int flags : {O_RDONLY, O_PATH | O_DIRECTORY}) Same(p, flags, kBeneath);
}

TEST_F(WalkOpenTest, FollowsNoLinkWhenToldAsOpenat2Does) {
  for (const char* p : {"a/b/file", "a/abs/file", "a/rel"}) Same(p, O_RDONLY, RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS);
}

TEST_F(WalkOpenTest, RefusesProcMagicLinks) {
  UniqueFd proc(::open("/proc", O_PATH | O_DIRECTORY | O_CLOEXEC));
  ASSERT_TRUE(proc.valid());
  // /proc/self/root is a magic link to "/": refused, as openat2 refuses it.
  EXPECT_EQ(WalkOpen(proc.get(), "self/root/etc", O_PATH, kInRoot), -1);
  EXPECT_EQ(errno, ELOOP);
  // /proc/self is a plain link: followed.
  UniqueFd status(WalkOpen(proc.get(), "self/status", O_RDONLY, kInRoot));
  EXPECT_TRUE(status.valid());
}

}  // namespace
}  // namespace sbx::agent
