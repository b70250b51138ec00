#include "agent/file_archive.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "agent/file_paths.h"
#include "agent/frame_io.h"
#include "base/tar.h"
#include "base/unique_fd.h"

namespace sbx::agent {
namespace {

using nlohmann::json;

// Appends a folder's tree to a tar stream, sending full chunks as it goes.
class TarOut {
 public:
  explicit TarOut(int sock) : sock_(sock) {}
  bool Add(std::string_view s) {
    buf_.append(s);
    return buf_.size() < kDataChunk || Flush();
  }
  bool Flush() {
    if (buf_.empty()) return true;
    bool ok = Send(sock_, FrameType::kData, buf_);
    buf_.clear();
    return ok;
  }
  // Walks `dfd`; names in the archive start with `prefix` ("" or "a/b/").
  bool Walk(int dfd, const std::string& prefix, int depth) {
    if (depth > 256) return true;
    auto names = Names(dfd);
    if (!names.ok()) return true;
    for (const auto& n : *names) {
      struct stat st;
      if (::fstatat(dfd, n.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
      tar::Entry e;
      e.name = prefix + n;
      e.mode = st.st_mode & 07777;
      e.mtime = st.st_mtim.tv_sec;
      if (S_ISDIR(st.st_mode)) {
        e.type = tar::Type::kDir;
        e.name += "/";
        if (!Add(tar::WriteHeader(e))) return false;
        UniqueFd sub(::openat(dfd, n.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (sub.valid() && !Walk(sub.get(), e.name, depth + 1)) return false;
      } else if (S_ISLNK(st.st_mode)) {
        e.type = tar::Type::kSymlink;
        e.linkname = ReadLinkAt(dfd, n);
        if (!Add(tar::WriteHeader(e))) return false;
      } else if (S_ISREG(st.st_mode)) {
        UniqueFd fd(::openat(dfd, n.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
        if (!fd.valid() || ::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
        e.type = tar::Type::kFile;
        e.size = st.st_size;
        if (!Add(tar::WriteHeader(e))) return false;
        // Exactly the size in the header: a file that shrinks meanwhile is padded with
        // zeros, one that grows is cut.
        uint64_t left = e.size;
        char buf[65536];
        while (left > 0) {
          ssize_t got = ::read(fd.get(), buf, std::min<uint64_t>(sizeof buf, left));
          if (got < 0 && errno == EINTR) continue;
          if (got <= 0) {
            std::string zeros(std::min<uint64_t>(sizeof buf, left), '\0');
            if (!Add(zeros)) return false;
            left -= zeros.size();
            continue;
          }
          if (!Add(std::string_view(buf, got))) return false;
          left -= got;
        }
        if (!Add(tar::Padding(e.size))) return false;
      }
      // Fifos, sockets and devices are left out.
    }
    return true;
  }

 private:
  int sock_;
  std::string buf_;
};

// A cleaned archive name: components without "." and empty ones. Refuses absolute names
// and any "..".
Result<std::vector<std::string>> CleanName(const std::string& name, const char* what) {
  if (name.empty() || name[0] == '/')
    return MakeError(Code::kInvalidArgument, std::string(what) + " '" + name + "' is absolute");
  std::vector<std::string> parts = Components(name);
  for (const auto& c : parts)
    if (c == "..") return MakeError(Code::kInvalidArgument, std::string(what) + " '" + name + "' holds '..'");
  return parts;
}

std::string JoinParts(const std::vector<std::string>& parts, size_t n) {
  std::string s;
  for (size_t i = 0; i < n; ++i) s += (i ? "/" : "") + parts[i];
  return s;
}

// Extracts entries under the destination folder. Every lookup is RESOLVE_BENEATH that
// folder: a link in the archive (or already there) cannot lead a later entry outside.
class Extractor : public tar::Sink {
 public:
  Extractor(int dest, uint64_t max_bytes) : dest_(dest), max_bytes_(max_bytes) {}
  uint64_t files = 0, bytes = 0;

  Status OnEntry(const tar::Entry& e) override {
    if (e.type == tar::Type::kOther)
      return MakeError(Code::kInvalidArgument, "entry '" + e.name + "': devices, fifos and other special files are not allowed");
    auto parts = CleanName(e.name, "entry");
    if (!parts.ok()) return parts.error();
    if (parts->empty()) return OkStatus();  // "./" itself
    if (++files > 1000000) return MakeError(Code::kTooLarge, "the archive holds too many entries");
    std::string rel = JoinParts(*parts, parts->size());
    base_ = parts->back();
    std::string parent = JoinParts(*parts, parts->size() - 1);
    SBX_RETURN_IF_ERROR(MkdirBeneath(*parts, parts->size() - 1));
    parent_.Reset(Open2(dest_, parent, O_PATH | O_DIRECTORY, kBeneath));
    if (!parent_.valid()) return Errno(errno, "entry '" + e.name + "'");
    int pfd = parent_.get();
    const char* b = base_.c_str();
    name_ = e.name;
    switch (e.type) {
      case tar::Type::kDir: {
        if (::mkdirat(pfd, b, (e.mode & 0777) | 0700) != 0) {
          struct stat st;
          if (errno != EEXIST || ::fstatat(pfd, b, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode))
            return Errno(errno == EEXIST ? EEXIST : errno, "entry '" + e.name + "'");
        }
        return OkStatus();
      }
      case tar::Type::kFile: {
        if (max_bytes_ && bytes + e.size > max_bytes_)
          return MakeError(Code::kTooLarge, "the archive expands past the sandbox's disk (" + std::to_string(max_bytes_) + " bytes)");
        SBX_RETURN_IF_ERROR(Replace(pfd, b, e.name));
        file_.Reset(::openat(pfd, b, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
        if (!file_.valid()) return Errno(errno, "entry '" + e.name + "'");
        mode_ = e.mode & 0777;
        mtime_ = e.mtime;
        return OkStatus();
      }
      case tar::Type::kSymlink: {
        // The target must stay inside the destination, read from the link's folder.
        if (e.linkname.empty() || e.linkname[0] == '/')
          return MakeError(Code::kInvalidArgument, "entry '" + e.name + "': a link may not point to an absolute path");
        int level = static_cast<int>(parts->size()) - 1;
        size_t pos = 0;
        while (pos <= e.linkname.size()) {
          size_t next = e.linkname.find('/', pos);
          if (next == std::string::npos) next = e.linkname.size();
          std::string c = e.linkname.substr(pos, next - pos);
          pos = next + 1;
          if (c == "..") --level;
          else if (!c.empty() && c != ".") ++level;
          if (level < 0) return MakeError(Code::kInvalidArgument, "entry '" + e.name + "': a link may not point outside the folder");
        }
        SBX_RETURN_IF_ERROR(Replace(pfd, b, e.name));
        if (::symlinkat(e.linkname.c_str(), pfd, b) != 0) return Errno(errno, "entry '" + e.name + "'");
        return OkStatus();
      }
      case tar::Type::kHardlink: {
        auto target = CleanName(e.linkname, "link target");
        if (!target.ok()) return target.error();
        if (target->empty()) return MakeError(Code::kInvalidArgument, "entry '" + e.name + "': bad link target");
        UniqueFd tp(Open2(dest_, JoinParts(*target, target->size() - 1), O_PATH | O_DIRECTORY, kBeneath));
        if (!tp.valid()) return Errno(errno, "entry '" + e.name + "' (link target)");
        SBX_RETURN_IF_ERROR(Replace(pfd, b, e.name));
        if (::linkat(tp.get(), target->back().c_str(), pfd, b, 0) != 0)
          return Errno(errno, "entry '" + e.name + "' (link to " + e.linkname + ")");
        return OkStatus();
      }
      case tar::Type::kOther:
        break;
    }
    return OkStatus();
  }
  Status OnData(std::string_view chunk) override {
    if (!file_.valid()) return OkStatus();
    bytes += chunk.size();
    while (!chunk.empty()) {
      ssize_t n = ::write(file_.get(), chunk.data(), chunk.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return Errno(errno, "entry '" + name_ + "'");
      chunk.remove_prefix(n);
    }
    return OkStatus();
  }
  Status OnEntryEnd() override {
    if (!file_.valid()) return OkStatus();
    ::fchmod(file_.get(), mode_);
    struct timespec ts[2] = {{mtime_, 0}, {mtime_, 0}};
    ::futimens(file_.get(), ts);
    file_.Reset();
    return OkStatus();
  }

 private:
  // Removes a non-folder already at `b` (a file, or a link that must not be written through).
  Status Replace(int pfd, const char* b, const std::string& name) {
    if (::unlinkat(pfd, b, 0) == 0 || errno == ENOENT) return OkStatus();
    return Errno(errno, "entry '" + name + "'");
  }
  Status MkdirBeneath(const std::vector<std::string>& parts, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      UniqueFd p(Open2(dest_, JoinParts(parts, i), O_PATH | O_DIRECTORY, kBeneath));
      if (!p.valid()) return Errno(errno, "folder '" + JoinParts(parts, i) + "'");
      if (::mkdirat(p.get(), parts[i].c_str(), 0755) != 0 && errno != EEXIST)
        return Errno(errno, "folder '" + JoinParts(parts, i + 1) + "'");
    }
    return OkStatus();
  }
  int dest_;
  uint64_t max_bytes_;
  UniqueFd parent_, file_;
  std::string base_, name_;
  uint32_t mode_ = 0644;
  int64_t mtime_ = 0;
};

}  // namespace

void ArchiveGet(int sock, int root, const json& req) {
  std::string path = req.value("path", "");
  if (auto st = CheckPath(path, "path"); !st.ok()) return SendError(sock, st.error());
  auto dfd = OpenDir(root, path, O_RDONLY);
  if (!dfd.ok()) return SendError(sock, dfd.error());
  if (!SendJson(sock, json::object())) return;
  TarOut out(sock);
  if (!out.Walk(dfd->get(), "", 0)) return;
  if (!out.Add(tar::EndOfArchive()) || !out.Flush()) return;
  Send(sock, FrameType::kDataEnd, "");
}

void ArchivePut(int sock, FrameDecoder* in, int root, const json& req) {
  std::string path = req.value("path", "");
  if (auto st = CheckPath(path, "path"); !st.ok()) return SendError(sock, st.error());
  uint64_t max_bytes = req.value("max_bytes", uint64_t{0});
  if (auto st = MkdirAll(root, path); !st.ok()) return SendError(sock, st.error());
  auto dfd = OpenDir(root, path);
  if (!dfd.ok()) return SendError(sock, dfd.error());
  if (!SendJson(sock, {{"ready", true}})) return;
  Extractor x(dfd->get(), max_bytes);
  tar::Reader reader(&x);
  // A gzip stream is inflated on the way; what it may expand to is bounded.
  const uint64_t max_tar = (max_bytes ? max_bytes : (uint64_t{64} << 30)) + (uint64_t{64} << 20);
  uint64_t tar_bytes = 0;
  bool first = true, gzip = false;
  z_stream zs = {};
  struct ZEnd {
    z_stream* z;
    bool* on;
    ~ZEnd() {
      if (*on) inflateEnd(z);
    }
  } zend{&zs, &gzip};
  std::string out(kDataChunk, '\0');
  Status st = OkStatus();
  auto feed = [&](std::string_view s) -> Status {
    tar_bytes += s.size();
    if (tar_bytes > max_tar) return MakeError(Code::kTooLarge, "the archive expands past its limit");
    return reader.Feed(s);
  };
  Frame f;
  while (true) {
    if (!NextFrame(sock, in, &f)) return;
    if (f.type == FrameType::kDataEnd) break;
    if (f.type != FrameType::kData) return SendError(sock, MakeError(Code::kInvalidArgument, "expected data frames"));
    if (!st.ok()) continue;  // drain what the client still sends, then answer
    if (first && !f.payload.empty()) {
      first = false;
      if (f.payload.size() >= 2 && static_cast<unsigned char>(f.payload[0]) == 0x1f &&
          static_cast<unsigned char>(f.payload[1]) == 0x8b) {
        if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) return SendError(sock, MakeError(Code::kInternal, "inflateInit failed"));
        gzip = true;
      }
    }
    if (!gzip) {
      st = feed(f.payload);
      continue;
    }
    zs.next_in = reinterpret_cast<Bytef*>(f.payload.data());
    zs.avail_in = static_cast<uInt>(f.payload.size());
    while (st.ok() && zs.avail_in > 0) {
      zs.next_out = reinterpret_cast<Bytef*>(out.data());
      zs.avail_out = static_cast<uInt>(out.size());
      int rc = inflate(&zs, Z_NO_FLUSH);
      size_t got = out.size() - zs.avail_out;
      if (got) st = feed(std::string_view(out.data(), got));
      if (rc == Z_STREAM_END) break;
      if (rc != Z_OK && rc != Z_BUF_ERROR) st = MakeError(Code::kInvalidArgument, "the gzip stream is corrupt");
      if (rc == Z_BUF_ERROR) break;
    }
  }
  if (st.ok()) st = reader.Finish();
  if (!st.ok()) return SendError(sock, st.error());
  SendJson(sock, {{"files", x.files}, {"bytes", x.bytes}});
}

}  // namespace sbx::agent
