#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <utility>

#include "base/fs.h"
#include "base/ids.h"
#include "base/result.h"
#include "base/tar.h"

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

TEST(CodeOfErrno, OneTableForTheDaemonAndTheAgent) {
  const std::pair<int, Code> table[] = {
      {ENOENT, Code::kNotFound},
      {EEXIST, Code::kAlreadyExists},
      {ENOTEMPTY, Code::kFailedPrecondition},   {EBUSY, Code::kFailedPrecondition},
      {EISDIR, Code::kInvalidArgument},         {ENOTDIR, Code::kInvalidArgument},
      {EINVAL, Code::kInvalidArgument},         {ENAMETOOLONG, Code::kInvalidArgument},
      {ELOOP, Code::kInvalidArgument},          {EXDEV, Code::kInvalidArgument},
      {EACCES, Code::kPermissionDenied},        {EPERM, Code::kPermissionDenied},
      {EROFS, Code::kPermissionDenied},
      {ENOSPC, Code::kTooLarge},                {EDQUOT, Code::kTooLarge},
      {EFBIG, Code::kTooLarge},
      {EMFILE, Code::kResourceExhausted},       {ENFILE, Code::kResourceExhausted},
      {ENOMEM, Code::kResourceExhausted},       {EAGAIN, Code::kResourceExhausted},
      {ETIMEDOUT, Code::kDeadlineExceeded},
      // Anything else is internal.
      {EIO, Code::kInternal},                   {ECONNREFUSED, Code::kInternal},
      {EPIPE, Code::kInternal},                 {0, Code::kInternal},
  };
  for (const auto& [err, code] : table) {
    EXPECT_EQ(CodeOfErrno(err), code) << std::strerror(err);
    Error e = ErrnoError("write x", err);
    EXPECT_EQ(e.code, code) << std::strerror(err);
    EXPECT_EQ(e.sys_errno, err);
    EXPECT_EQ(e.message, std::string("write x: ") + std::strerror(err));
  }
}

TEST(CodeOfErrno, SbxdsOwnDataDirFullIsUnavailable) {
  for (int err : {ENOSPC, EDQUOT}) {
    Error e = OnDataDir(ErrnoError("write x", err));
    EXPECT_EQ(e.code, Code::kUnavailable) << std::strerror(err);
    EXPECT_EQ(e.sys_errno, err);
  }
  EXPECT_EQ(OnDataDir(ErrnoError("write x", EFBIG)).code, Code::kTooLarge);
  EXPECT_EQ(OnDataDir(ErrnoError("write x", ENOENT)).code, Code::kNotFound);
}

TEST(Fs, ErrnoMapsToCodes) {
  auto r = fs::ReadFile("/nonexistent/file");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Code::kNotFound);
  EXPECT_EQ(r.error().sys_errno, ENOENT);
}

TEST(Fs, AnOwnedFileIsReadOnlyWhenItIsARegularFile) {
  char tmpl[] = "/tmp/sbx-owned-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  ASSERT_TRUE(fs::WriteFile(dir + "/log", "said").ok());
  ASSERT_EQ(::symlink("/etc/hostname", (dir + "/link").c_str()), 0);
  ASSERT_EQ(::mkfifo((dir + "/fifo").c_str(), 0600), 0);
  EXPECT_EQ(*fs::ReadOwnedFile(dir + "/log"), "said");
  auto link = fs::ReadOwnedFile(dir + "/link");  // a planted link is not followed
  ASSERT_FALSE(link.ok());
  EXPECT_EQ(link.error().sys_errno, ELOOP);
  auto fifo = fs::ReadOwnedFile(dir + "/fifo");  // nor a FIFO waited on
  ASSERT_FALSE(fifo.ok());
  EXPECT_EQ(fifo.error().code, Code::kPermissionDenied);
  ASSERT_TRUE(fs::RemoveTree(dir).ok());
}

struct Collected : tar::Sink {
  std::vector<tar::Entry> entries;
  std::vector<std::string> data;
  Status OnEntry(const tar::Entry& e) override {
    entries.push_back(e);
    data.emplace_back();
    return OkStatus();
  }
  Status OnData(std::string_view c) override {
    data.back().append(c);
    return OkStatus();
  }
  Status OnEntryEnd() override { return OkStatus(); }
};

// A memory image's copy: data lands at its offsets, holes and (asked for) zero pages stay
// holes, and from a memfd to a file (no copy_file_range between them) too.
TEST(Fs, CopyDataKeepsOffsetsAndHoles) {
  int in = memfd_create("copy-test", MFD_CLOEXEC);
  ASSERT_GE(in, 0);
  const uint64_t size = 64 << 20;
  ASSERT_EQ(ftruncate(in, static_cast<off_t>(size)), 0);
  std::string page(4096, 'a'), zeros(4096, '\0');
  ASSERT_EQ(pwrite(in, page.data(), page.size(), 8 << 20), 4096);
  ASSERT_EQ(pwrite(in, zeros.data(), zeros.size(), (8 << 20) + 4096), 4096);  // touched, zero
  ASSERT_EQ(pwrite(in, "tail", 4, static_cast<off_t>(size - 4)), 4);
  char tmpl[] = "/tmp/sbx-copy-XXXXXX";
  int out = mkstemp(tmpl);
  ASSERT_GE(out, 0);
  unlink(tmpl);
  ASSERT_EQ(ftruncate(out, static_cast<off_t>(size)), 0);
  auto copied = sbx::fs::CopyData(in, out, size, /*skip_zero_pages=*/true);
  ASSERT_TRUE(copied.ok()) << copied.error().message;
  EXPECT_EQ(*copied, 2u * 4096);  // the data page and the last page, not the zero one
  char back[4] = {};
  ASSERT_EQ(pread(out, back, 4, static_cast<off_t>(size - 4)), 4);
  EXPECT_EQ(std::string(back, 4), "tail");
  std::string got(4096, '\0');
  ASSERT_EQ(pread(out, got.data(), got.size(), 8 << 20), 4096);
  EXPECT_EQ(got, page);
  struct stat st;
  ASSERT_EQ(fstat(out, &st), 0);
  EXPECT_LE(static_cast<uint64_t>(st.st_blocks) * 512, 64u << 10);  // the rest are holes
  // Without skipping, the zero page is copied too.
  char tmpl2[] = "/tmp/sbx-copy-XXXXXX";
  int out2 = mkstemp(tmpl2);
  ASSERT_GE(out2, 0);
  unlink(tmpl2);
  ASSERT_EQ(ftruncate(out2, static_cast<off_t>(size)), 0);
  auto all = sbx::fs::CopyData(in, out2, size);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(*all, 3u * 4096);
  close(in);
  close(out);
  close(out2);
}

TEST(Tar, WrittenArchivesReadBackByteForByte) {
  std::vector<tar::Entry> in(5);
  in[0] = {"dir/", "", tar::Type::kDir, '5', 0, 0755, 1700000000};
  in[1] = {"dir/" + std::string(180, 'n'), "", tar::Type::kFile, '0', 3, 0600, 1};  // ustar prefix split
  in[2] = {std::string(300, 'p'), "", tar::Type::kFile, '0', 5, 0644, 2};            // pax path
  in[3] = {"link", std::string(150, 't'), tar::Type::kSymlink, '2', 0, 0777, 3};     // pax linkpath
  in[4] = {"hard", "link", tar::Type::kHardlink, '1', 0, 0644, 4};
  std::string out;
  for (const auto& e : in) {
    out += tar::WriteHeader(e);
    std::string body(e.size, 'x');
    out += body + tar::Padding(e.size);
  }
  out += tar::EndOfArchive();
  // Fed one byte at a time: the reader keeps no assumption about chunk boundaries.
  Collected c;
  tar::Reader r(&c);
  for (char ch : out) ASSERT_TRUE(r.Feed(std::string_view(&ch, 1)).ok());
  ASSERT_TRUE(r.Finish().ok());
  ASSERT_EQ(c.entries.size(), in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    EXPECT_EQ(c.entries[i].name, in[i].name);
    EXPECT_EQ(c.entries[i].linkname, in[i].linkname);
    EXPECT_EQ(c.entries[i].type, in[i].type);
    EXPECT_EQ(c.entries[i].mode, in[i].mode);
    EXPECT_EQ(c.entries[i].mtime, in[i].mtime);
    EXPECT_EQ(c.data[i], std::string(in[i].size, 'x'));
  }
}

TEST(Tar, RefusesBrokenHeadersAndTruncation) {
  tar::Entry e{"f", "", tar::Type::kFile, '0', 10, 0644, 0};
  std::string good = tar::WriteHeader(e) + std::string(10, 'y') + tar::Padding(10) + tar::EndOfArchive();
  {
    std::string bad = good;
    bad[0] ^= 1;  // the checksum no longer matches
    Collected c;
    tar::Reader r(&c);
    auto st = r.Feed(bad);
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.error().code, Code::kInvalidArgument);
  }
  {
    std::string bad = good;
    bad[124] = '9';  // not an octal digit
    Collected c;
    tar::Reader r(&c);
    EXPECT_FALSE(r.Feed(bad).ok());
  }
  {
    Collected c;
    tar::Reader r(&c);
    ASSERT_TRUE(r.Feed(good.substr(0, 515)).ok());
    EXPECT_FALSE(r.Finish().ok());  // ends inside the data
  }
  {
    Collected c;
    tar::Reader r(&c);
    ASSERT_TRUE(r.Feed(good.substr(0, 600)).ok());  // header + data, no end marker
    EXPECT_FALSE(r.Finish().ok());                 // still inside the padding
  }
}

}  // namespace
}  // namespace sbx
