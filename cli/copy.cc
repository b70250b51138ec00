// `sbx cp`: files and folders between this machine and a sandbox, with docker cp's rules
// (`-` for a tar on stdin or stdout included). A file goes through the files API, a
// folder as one tar through the archive API.
// Downloads of folders are unpacked by the host's GNU tar, which refuses absolute and ".."
// names and creates links last, so a hostile sandbox's tar cannot write outside.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "commands.h"

namespace sbx::cli {
namespace {

using nlohmann::json;

// "ID:/path" -> (ID, /path); a local path -> nullopt.
std::optional<std::pair<std::string, std::string>> RemoteSide(const std::string& s) {
  size_t colon = s.find(':');
  if (colon == std::string::npos || colon == 0 || s.find('/') < colon) return std::nullopt;
  return std::make_pair(s.substr(0, colon), s.substr(colon + 1));
}

enum class Kind { kMissing, kFile, kDir };

// The sandbox's side of a copy: which sandbox, and as whom ("" = its default user).
struct Side {
  std::string id, user;
  // The API path of `route` ("files", "files/stat", "archive") for `path`.
  std::string Target(const std::string& route, const std::string& path) const {
    return "/v1/sandboxes/" + id + "/" + route + "?path=" + PercentEncode(path) +
           (user.empty() ? "" : "&user=" + PercentEncode(user));
  }
};

Kind LocalKind(const std::string& p) {
  struct stat st;
  if (::stat(p.c_str(), &st) != 0) return Kind::kMissing;
  return S_ISDIR(st.st_mode) ? Kind::kDir : Kind::kFile;
}

// What the sandbox has at `path` (an error other than "not found" is printed: nullopt).
std::optional<Kind> RemoteKind(HttpClient& c, const Side& sb, const std::string& path) {
  auto r = c.Call("GET", sb.Target("files/stat", path));
  if (r.ok() && r->status == 404) return Kind::kMissing;
  if (auto why = FailureOf(r)) {
    ReportError(*why, "client_error");
    return std::nullopt;
  }
  auto j = json::parse(r->body, nullptr, false);
  return j.is_object() && j.value("type", "") == "dir" ? Kind::kDir : Kind::kFile;
}

std::string BaseName(std::string p) {
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  size_t slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

std::string Join(const std::string& dir, const std::string& name) {
  return dir + (!dir.empty() && dir.back() == '/' ? "" : "/") + name;
}

bool EndsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// Runs argv (tar, chmod, rm) and returns its exit status.
int RunArgv(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = fork();
  if (pid == 0) {
    execvp(argv[0], argv.data());
    _exit(127);
  }
  int st = 0;
  if (pid < 0 || waitpid(pid, &st, 0) < 0) return -1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

// A temporary file's name under /tmp (created empty), or "" if none could be made.
std::string TempFile() {
  char tmpl[] = "/tmp/sbx-cp-XXXXXX";
  int fd = mkstemp(tmpl);
  if (fd < 0) return "";
  close(fd);
  return tmpl;
}

int Copied(const std::string& what, const std::string& to, uint64_t bytes) {
  std::fprintf(stderr, "copied %s (%llu bytes) to %s\n", what.c_str(), static_cast<unsigned long long>(bytes), to.c_str());
  return 0;
}

int Upload(HttpClient& c, const std::string& src, const Side& sb, std::string path) {
  const std::string& id = sb.id;
  if (path.empty() || path[0] != '/') return Usage("the sandbox path must be absolute: " + path);
  if (EndsWith(path, "/.")) path = path.size() > 2 ? path.substr(0, path.size() - 1) : "/";  // a folder: "DIR/"
  Kind from = LocalKind(src);
  if (from == Kind::kMissing) return Fail("no such file or folder: " + src);
  auto to = RemoteKind(c, sb, path);
  if (!to) return 1;
  if (from == Kind::kFile) {
    if (*to == Kind::kDir) path = Join(path, BaseName(src));
    else if (*to == Kind::kMissing && path.back() == '/')
      return Fail("the folder " + id + ":" + path + " does not exist (a destination ending in / must)");
    Progress progress("copying " + src);
    auto r = c.Upload(sb.Target("files", path), src,
                      [&](uint64_t s, uint64_t t) { progress.Update(s, t); }, "PUT");
    progress.Done();
    if (auto why = FailureOf(r)) return Fail(*why);
    struct stat st;
    return Copied("file " + src, id + ":" + path, ::stat(src.c_str(), &st) == 0 ? st.st_size : 0);
  }
  if (*to == Kind::kFile) return Fail("cannot copy the folder " + src + " onto the file " + id + ":" + path);
  // Into an existing folder, the folder itself goes (as SRC/. sends its contents); a
  // destination that does not exist becomes the folder.
  bool contents = *to == Kind::kMissing || EndsWith(src, "/.");
  std::string tmp = TempFile();
  if (tmp.empty()) return Fail("cannot create a temporary file");
  std::string parent = src;
  while (parent.size() > 1 && parent.back() == '/') parent.pop_back();
  parent = parent.rfind('/') == std::string::npos ? "." : parent.substr(0, std::max<size_t>(1, parent.rfind('/')));
  int rc = contents ? RunArgv({"tar", "-C", src, "-cf", tmp, "."}) : RunArgv({"tar", "-C", parent, "-cf", tmp, BaseName(src)});
  if (rc != 0) {
    unlink(tmp.c_str());
    return Fail("tar of " + src + " failed");
  }
  Progress progress("copying " + src);
  auto r = c.Upload(sb.Target("archive", path), tmp,
                    [&](uint64_t s, uint64_t t) { progress.Update(s, t); }, "PUT");
  progress.Done();
  unlink(tmp.c_str());
  if (auto why = FailureOf(r)) return Fail(*why);
  auto j = json::parse(r->body, nullptr, false);
  uint64_t bytes = j.is_object() && j["bytes"].is_number_unsigned() ? j["bytes"].get<uint64_t>() : 0;
  std::string where = contents ? path : Join(path, BaseName(src));
  return Copied("folder " + src, id + ":" + where, bytes);
}

// GETs `target` into the file `into` with progress on stderr, counting *bytes; 0, or the
// exit code after saying why (the file then removed).
int Fetch(HttpClient& c, const std::string& target, const std::string& into, const std::string& what, uint64_t* bytes) {
  Progress progress("copying " + what);
  auto r = c.Download(target, into, [&](uint64_t s, uint64_t t) {
    *bytes = s;
    progress.Update(s, t);
  });
  progress.Done();
  if (auto why = FailureOf(r)) {
    unlink(into.c_str());
    return Fail(*why);
  }
  return 0;
}

// `shown`: the destination as the closing message names it (default `dst`).
int Download(HttpClient& c, const Side& sb, std::string path, const std::string& dst, const std::string& shown = "") {
  const std::string& id = sb.id;
  // PATH/. names the folder's contents; the API takes the folder's own path.
  const bool contents = EndsWith(path, "/.");
  if (contents) path = path.size() > 2 ? path.substr(0, path.size() - 2) : "/";
  auto from = RemoteKind(c, sb, path);
  if (!from) return 1;
  if (*from == Kind::kMissing) return Fail("no such file or folder in the sandbox: " + id + ":" + path);
  Kind to = LocalKind(dst);
  if (*from == Kind::kFile) {
    if (to == Kind::kMissing && dst.back() == '/')
      return Fail("the folder " + dst + " does not exist (a destination ending in / must)");
    std::string target = to == Kind::kDir ? Join(dst, BaseName(path)) : dst;
    std::string part = target + ".sbx-part";
    uint64_t bytes = 0;
    if (int rc = Fetch(c, sb.Target("files", path), part, id + ":" + path, &bytes))
      return rc;
    if (std::rename(part.c_str(), target.c_str()) != 0) {
      unlink(part.c_str());
      return Fail("cannot write " + target);
    }
    return Copied("file " + id + ":" + path, shown.empty() ? target : shown, bytes);
  }
  if (to == Kind::kFile) return Fail("cannot copy the folder " + id + ":" + path + " onto the file " + dst);
  // As docker cp: into an existing folder goes the folder itself (PATH/. its contents);
  // a destination that does not exist becomes the folder.
  std::string target = to == Kind::kDir && !contents ? Join(dst, BaseName(path)) : dst;
  std::string tmp = TempFile();
  if (tmp.empty()) return Fail("cannot create a temporary file");
  uint64_t bytes = 0;
  if (int rc = Fetch(c, sb.Target("archive", path), tmp, id + ":" + path, &bytes))
    return rc;
  bool ok = LocalKind(target) != Kind::kMissing || mkdir(target.c_str(), 0755) == 0;
  int rc = ok ? RunArgv({"tar", "-C", target, "-xf", tmp, "--no-same-owner", "--no-same-permissions"}) : -1;
  unlink(tmp.c_str());
  if (rc != 0) return Fail("unpacking into " + target + " failed");
  return Copied("folder " + id + ":" + path, shown.empty() ? target : shown, bytes);
}

// A temporary folder's name under /tmp (created), or "".
std::string TempDir() {
  char tmpl[] = "/tmp/sbx-cp-XXXXXX";
  return mkdtemp(tmpl) ? tmpl : "";
}

// `sbx cp ID:PATH -`, as docker cp: a tar of PATH (a file, or a folder as itself; PATH/.
// its contents) on stdout. It is fetched into a temporary folder first, then packed.
int DownloadTar(HttpClient& c, const Side& sb, const std::string& path) {
  if (isatty(STDOUT_FILENO)) return Usage("cp ... - writes a tar archive: send stdout to a file or a pipe");
  const std::string tmp = TempDir();
  if (tmp.empty()) return Fail("cannot create a temporary folder");
  // The root has no name of its own: it goes as its contents.
  const bool contents = EndsWith(path, "/.") || BaseName(path) == "/";
  const std::string into = contents ? tmp + "/contents" : tmp;
  int rc = contents && mkdir(into.c_str(), 0700) != 0 ? Fail("cannot create a temporary folder") : 0;
  if (rc == 0) rc = Download(c, sb, BaseName(path) == "/" ? "/." : path, into, "stdout");
  if (rc == 0 && RunArgv({"tar", "-C", into, "-cf", "-", "--", contents ? "." : BaseName(path)}) != 0)
    rc = Fail("tar of " + sb.id + ":" + path + " failed");
  // (Folders unpacked read-only must be made writable to be removed.)
  RunArgv({"chmod", "-R", "u+w", "--", tmp});
  RunArgv({"rm", "-rf", "--", tmp});
  return rc;
}

// `sbx cp - ID:DIR`, as docker cp: a tar (or gzip-compressed tar) on stdin is extracted
// into the folder DIR, which must exist.
int UploadTar(HttpClient& c, const Side& sb, const std::string& path) {
  if (path.empty() || path[0] != '/') return Usage("the sandbox path must be absolute: " + path);
  if (isatty(STDIN_FILENO)) return Usage("cp - ... reads a tar archive: give it on stdin");
  auto to = RemoteKind(c, sb, path);
  if (!to) return 1;
  if (*to != Kind::kDir) return Fail("the destination " + sb.id + ":" + path + " must be a folder that exists");
  const std::string tmp = TempFile();
  if (tmp.empty()) return Fail("cannot create a temporary file");
  FILE* out = std::fopen(tmp.c_str(), "wb");
  bool ok = out != nullptr;
  char buf[1 << 16];
  for (size_t n; ok && (n = std::fread(buf, 1, sizeof buf, stdin)) > 0;) ok = std::fwrite(buf, 1, n, out) == n;
  ok = ok && !std::ferror(stdin);
  if (out && std::fclose(out) != 0) ok = false;
  if (!ok) {
    unlink(tmp.c_str());
    return Fail("cannot read the archive from stdin into " + tmp);
  }
  auto r = c.Upload(sb.Target("archive", path), tmp, nullptr, "PUT");
  unlink(tmp.c_str());
  if (auto why = FailureOf(r)) return Fail(*why);
  auto j = json::parse(r->body, nullptr, false);
  uint64_t bytes = j.is_object() && j["bytes"].is_number_unsigned() ? j["bytes"].get<uint64_t>() : 0;
  return Copied("an archive from stdin", sb.id + ":" + path, bytes);
}

}  // namespace

int CopyFiles(HttpClient& c, const std::string& src, const std::string& dst, const std::string& user) {
  auto rs = RemoteSide(src), rd = RemoteSide(dst);
  if (rs.has_value() == rd.has_value()) return Usage("cp copies between this machine and a sandbox: exactly one side is ID:/path");
  if (src.empty() || dst.empty()) return Usage("cp needs a source and a destination");
  if (rd) return src == "-" ? UploadTar(c, Side{rd->first, user}, rd->second) : Upload(c, src, Side{rd->first, user}, rd->second);
  if (dst == "-") return DownloadTar(c, Side{rs->first, user}, rs->second);
  return Download(c, Side{rs->first, user}, rs->second, dst);
}

}  // namespace sbx::cli
