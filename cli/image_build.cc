// `sbx image build default`: a Debian bookworm minbase root with python3, venv, pip, git,
// curl and CA certificates, made by debootstrap from the host's Debian mirror. The tarball
// is cached under the cache dir and reused; then it is imported through the API.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "base/fs.h"
#include "cli.h"

extern char** environ;

namespace sbx::cli {
namespace {

// Bump when the recipe changes, so the cache is rebuilt.
constexpr const char* kDefaultRecipe = "default-bookworm-v1";
constexpr const char* kDefaultPackages = "python3,python3-venv,python3-pip,git,curl,ca-certificates";

int Spawn(const std::vector<std::string>& argv) {
  std::vector<char*> a;
  for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
  a.push_back(nullptr);
  pid_t pid;
  if (posix_spawnp(&pid, a[0], nullptr, nullptr, a.data(), environ) != 0) return 127;
  int st;
  while (waitpid(pid, &st, 0) < 0) {
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

std::string Mirror() {
  // The mirror apt already uses (deb822 or one-line format); Debian's by default.
  for (const char* f : {"/etc/apt/sources.list.d/debian.sources", "/etc/apt/sources.list"}) {
    std::ifstream in(f);
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("URIs:", 0) == 0) {
        std::string u = line.substr(5);
        u.erase(0, u.find_first_not_of(" \t"));
        u = u.substr(0, u.find(' '));
        if (u.find("security") == std::string::npos) return u;
      }
      if (line.rfind("deb ", 0) == 0) {
        std::string rest = line.substr(4);
        if (rest[0] == '[') rest = rest.substr(rest.find(']') + 2);
        std::string u = rest.substr(0, rest.find(' '));
        if (u.find("security") == std::string::npos) return u;
      }
    }
  }
  return "http://deb.debian.org/debian";
}

}  // namespace

int RunImageBuild(const Globals& g, const std::string& name, const std::string& cache_dir) {
  if (name == "busybox") {
    std::fprintf(stderr, "sbx: busybox is built in: sbxd builds it from the host's busybox at start\n");
    return 0;
  }
  if (name != "default") {
    std::fprintf(stderr, "sbx: no recipe for image \"%s\" (known: default); use `sbx image import`\n", name.c_str());
    return 2;
  }
  std::string dir = cache_dir + "/images";
  if (auto st = fs::MkdirAll(dir, 0755); !st.ok()) {
    std::fprintf(stderr, "sbx: %s\n", st.error().message.c_str());
    return 1;
  }
  std::string tar = dir + "/" + kDefaultRecipe + ".tar";
  if (fs::Exists(tar)) {
    std::fprintf(stderr, "[1/2] reusing the cached root filesystem %s\n", tar.c_str());
  } else {
    if (::geteuid() != 0) {
      std::fprintf(stderr, "sbx: building the default image needs root (debootstrap)\n");
      return 1;
    }
    std::string build = dir + "/" + kDefaultRecipe + ".build";
    (void)fs::RemoveTree(build);
    std::fprintf(stderr, "[1/2] debootstrap bookworm (%s) from %s; a few minutes, once\n", kDefaultPackages,
                 Mirror().c_str());
    int rc = Spawn({"debootstrap", "--variant=minbase", std::string("--include=") + kDefaultPackages,
                    "bookworm", build, Mirror()});
    if (rc != 0) {
      std::fprintf(stderr, "sbx: debootstrap failed (exit %d); see %s/debootstrap/debootstrap.log\n", rc, build.c_str());
      return 1;
    }
    Spawn({"sh", "-c", "rm -rf '" + build + "'/var/cache/apt/archives/*.deb '" + build +
                           "'/var/lib/apt/lists/* '" + build + "'/var/log/*.log"});
    if (Spawn({"tar", "--numeric-owner", "-C", build, "-cf", tar + ".tmp", "."}) != 0 ||
        ::rename((tar + ".tmp").c_str(), tar.c_str()) != 0) {
      std::fprintf(stderr, "sbx: cannot write %s\n", tar.c_str());
      return 1;
    }
    (void)fs::RemoveTree(build);
  }
  std::fprintf(stderr, "[2/2] importing into sbxd as image \"%s\"\n", name.c_str());
  HttpClient c(g.url, g.api_key);
  int last = -1;
  auto r = c.Upload("/v1/images/" + name, tar, [&](uint64_t s, uint64_t t) {
    int pct = t ? static_cast<int>(s * 100 / t) : 100;
    if (pct != last && isatty(2)) {
      int bar = pct / 4;
      std::fprintf(stderr, "\r  [%.*s%*s] %3d%%", bar, "#########################", 25 - bar, "", pct);
    }
    last = pct;
  });
  if (isatty(2)) std::fprintf(stderr, "\n");
  if (!r.ok()) {
    std::fprintf(stderr, "sbx: %s\n", r.error().message.c_str());
    return 1;
  }
  if (r->status >= 300) {
    std::fprintf(stderr, "sbx: %s\n", ErrorMessage(*r).c_str());
    return 1;
  }
  std::printf("%s\n", r->body.c_str());
  return 0;
}

}  // namespace sbx::cli
