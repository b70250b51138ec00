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
#include "commands.h"

extern char** environ;

namespace sbx::cli {

// images/default/wheelhouse.py, embedded at build time (generated/wheelhouse_script.cc).
extern const char* const kWheelScript;

namespace {

// Bump when a recipe changes, so the cache is rebuilt. The base is the debootstrap tree
// (slow: minutes); the image adds an offline wheelhouse to it (seconds).
constexpr const char* kBaseRecipe = "default-bookworm-v1";
constexpr const char* kImageRecipe = "default-bookworm-v1-wheels-v3-user-v1";
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
    return Usage("no recipe for image \"" + name + "\" (known: default); use `sbx image import`");
  }
  std::string dir = cache_dir + "/images";
  if (auto st = fs::MkdirAll(dir, 0755); !st.ok()) return Fail(st.error().message);
  std::string base = dir + "/" + kBaseRecipe + ".tar";
  std::string tar = dir + "/" + kImageRecipe + ".tar";
  if (fs::Exists(tar)) {
    std::fprintf(stderr, "[1/3] reusing the cached image %s\n", tar.c_str());
  } else {
    if (::geteuid() != 0) return Fail("building the default image needs root (debootstrap)");
    if (fs::Exists(base)) {
      std::fprintf(stderr, "[1/3] reusing the cached debootstrap tree %s\n", base.c_str());
    } else {
      std::string build = dir + "/" + kBaseRecipe + ".build";
      (void)fs::RemoveTree(build);
      std::fprintf(stderr, "[1/3] debootstrap bookworm (%s) from %s; a few minutes, once\n", kDefaultPackages,
                   Mirror().c_str());
      int rc = Spawn({"debootstrap", "--variant=minbase", std::string("--include=") + kDefaultPackages,
                      "bookworm", build, Mirror()});
      if (rc != 0)
        return Fail("debootstrap failed (exit " + std::to_string(rc) + "); see " + build + "/debootstrap/debootstrap.log");
      Spawn({"sh", "-c", "rm -rf '" + build + "'/var/cache/apt/archives/*.deb '" + build +
                             "'/var/lib/apt/lists/* '" + build + "'/var/log/*.log"});
      if (Spawn({"tar", "--numeric-owner", "-C", build, "-cf", base + ".tmp", "."}) != 0 ||
          ::rename((base + ".tmp").c_str(), base.c_str()) != 0)
        return Fail("cannot write " + base);
      (void)fs::RemoveTree(build);
    }
    // The wheelhouse: sympy and mpmath as wheels (from Debian's packages), and pip set to
    // install from it offline. A real `pip install sympy` in a venv still does all its work.
    std::fprintf(stderr, "[2/3] adding an offline wheelhouse (sympy, mpmath) at /opt/sbx/wheelhouse\n");
    std::string work = dir + "/" + kImageRecipe + ".build";
    (void)fs::RemoveTree(work);
    std::string root = work + "/rootfs", debs = work + "/debs", unpacked = work + "/unpacked";
    for (const auto& d : {root, debs, unpacked}) (void)fs::MkdirAll(d);
    auto fail = [&](const char* what) { return Fail(std::string(what) + " (work dir " + work + " kept)"); };
    if (Spawn({"tar", "--numeric-owner", "-C", root, "-xf", base}) != 0) return fail("cannot unpack the base tree");
    std::string get = "cd '" + debs + "' && (apt-get download python3-sympy python3-mpmath >/dev/null 2>&1 || "
                      "(apt-get update -qq && apt-get download python3-sympy python3-mpmath))";
    if (Spawn({"sh", "-c", get}) != 0) return fail("cannot download python3-sympy and python3-mpmath");
    if (Spawn({"sh", "-c", "for d in '" + debs + "'/*.deb; do dpkg-deb -x \"$d\" '" + unpacked + "' || exit 1; done"}) != 0)
      return fail("cannot unpack the packages");
    if (Spawn({"/usr/bin/python3", "-c", kWheelScript, unpacked, root + "/opt/sbx/wheelhouse",
               "sympy:mpmath>=0.19", "mpmath"}) != 0)
      return fail("cannot build the wheels");
    if (!fs::WriteFile(root + "/etc/pip.conf",
                       "# sbx: offline installs from the image's wheelhouse\n[global]\nno-index = true\n"
                       "find-links = /opt/sbx/wheelhouse\n").ok())
      return fail("cannot write /etc/pip.conf");
    // The unprivileged user that E2B's images and the seed expect: `user`, uid 1000, home
    // /home/user, bash (the default user of the image's sandboxes, see core/layer_files).
    if (Spawn({"useradd", "--root", root, "--create-home", "--uid", "1000", "--user-group", "--shell", "/bin/bash",
               "user"}) != 0)
      return fail("cannot add the user `user` (useradd --root)");
    // debootstrap copied the build host's name and name servers: a sandbox has its own
    // name (set at boot) and no name servers until it has a network.
    if (!fs::WriteFileAtomic(root + "/etc/hostname", "localhost\n").ok() ||
        !fs::WriteFileAtomic(root + "/etc/resolv.conf", "# sbx: no name servers (the sandbox has no network)\n").ok() ||
        !fs::WriteFileAtomic(root + "/etc/hosts", "127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n").ok())
      return fail("cannot write /etc/hostname, /etc/resolv.conf and /etc/hosts");
    if (Spawn({"tar", "--numeric-owner", "-C", root, "-cf", tar + ".tmp", "."}) != 0 ||
        ::rename((tar + ".tmp").c_str(), tar.c_str()) != 0)
      return fail("cannot write the image tarball");
    (void)fs::RemoveTree(work);
  }
  std::fprintf(stderr, "[3/3] importing into sbxd as image \"%s\"\n", name.c_str());
  HttpClient c(g.url, g.api_key);
  Progress progress("uploading " + tar);
  auto r = c.Upload("/v1/images/" + name, tar, [&](uint64_t s, uint64_t t) { progress.Update(s, t); });
  progress.Done();
  if (auto why = FailureOf(r)) return Fail(*why);
  std::printf("%s\n", r->body.c_str());
  return 0;
}

}  // namespace sbx::cli
