// sbxd: the sandbox daemon. Wiring only: flags and config, state, runtime, API.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <utility>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <climits>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <thread>

#include "api/handlers.h"
#include "api/server.h"
#include "base/crypto.h"
#include "base/fs.h"
#include "base/ids.h"
#include "base/log.h"
#include "base/reaper.h"
#include "base/unique_fd.h"
#include "core/processes.h"
#include "core/sandbox_manager.h"
#include "layers/images.h"
#include "runtime/container/host_setup.h"
#include "net/network.h"
#include "runtime/registry.h"
#include "runtime/runtime.h"
#include "storage/store.h"
#include "walls.h"

namespace {

using namespace sbx;
namespace asio = boost::asio;

struct Flags {
  std::string listen = "127.0.0.1:7070";
  std::string socket = "/run/sbx/sbxd.sock";
  std::string data_dir = "/var/lib/sbx";
  std::string config = "/etc/sbx/sbxd.toml";
  bool config_given = false;
  std::string agent;
  std::string default_image = "default";
  int64_t uid_base = 100000;
  int64_t owner_uid_base = -1;  // -1: just above the sandboxes' uids; 0: root owns every sandbox
  int64_t sandbox_max_open_files = 2048;
  int64_t output_cap = 16 << 20;
  int64_t pool_size = 0;
  int64_t max_sandboxes = 0, max_memory_mb = 0, max_disk_mb = 0;  // quotas (0: none)
  std::map<std::string, double> prices;  // type -> USD per hour (price_<type>)
  double serverless_call_usd = -1;       // -1: the default
  int64_t min_free_mb = 64;
  std::string log_level = "info";
  std::string proxy_domain = "sbx.localhost";  // port proxy by host: PORT-ID.<domain>
  int64_t store_mb = 0;  // > 0: sandboxes, layers and checkpoints on a btrfs store of this size
  double store_overcommit = 0;  // > 0: the sum of sandboxes' disk_mb is held to this times the store
  int64_t keepalive_ms = 15000;  // streamed output: a keep-alive line after this quiet time
  std::string criu;  // CRIU binary for pause mode "hibernate"; "none": refused; empty: found (FindCriu)
  std::string runsc;  // runsc for isolation "gvisor"; "none": refused; empty: found (FindRunsc)
  std::string runsc_platform;  // empty: runsc's own default
  std::string qemu, microvm_kernel, microvm_accel = "auto", microvm_channel = "auto";  // isolation "microvm" (walls.h)
  std::string default_isolation = "container";
  // The HTTP listener's deadlines and caps (docs/API.md, "Limits of the listener").
  int64_t http_header_timeout_ms = 10000, http_idle_timeout_ms = 120000, http_body_idle_timeout_ms = 30000;
  int64_t proxy_idle_timeout_ms = 300000, max_connections = 4096, max_sandbox_connections = 64;
  int64_t max_unauthenticated_connections = 1024, max_unauthenticated_per_source = 256;
  int64_t small_body_limit = 64 << 10, max_body = 64 << 20, token_body_limit = 1 << 20;
  int64_t max_creates_in_flight = 32;  // more at once are refused with 429 (0: no limit)
  // Sandboxes' networking (docs/network.md).
  std::string default_network = "outbound";
  std::string net_subnet = "10.250.0.0/16";
  std::string net_subnet6 = "auto";  // auto: a unique local /64 made from net_subnet; none: IPv4 only
  std::string dns_upstream;  // empty: the first IPv4 nameserver of /etc/resolv.conf
  int64_t net_max_conns = 1024;
  int64_t net_dns_rate = 100;  // DNS queries a second asked upstream per sandbox (0: no limit)
  int64_t net_conn_rate = 100;  // new connections a second per sandbox (0: no limit)
};

// The integer options that are plain limits (0 turns a deadline or a cap off).
std::map<std::string, int64_t*> LimitOptions(Flags* f) {
  return {{"http_header_timeout_ms", &f->http_header_timeout_ms},
          {"http_idle_timeout_ms", &f->http_idle_timeout_ms},
          {"http_body_idle_timeout_ms", &f->http_body_idle_timeout_ms},
          {"proxy_idle_timeout_ms", &f->proxy_idle_timeout_ms},
          {"max_connections", &f->max_connections},
          {"max_sandbox_connections", &f->max_sandbox_connections},
          {"max_creates_in_flight", &f->max_creates_in_flight},
          {"max_unauthenticated_connections", &f->max_unauthenticated_connections},
          {"max_unauthenticated_per_source", &f->max_unauthenticated_per_source},
          {"small_body_limit", &f->small_body_limit},
          {"token_body_limit", &f->token_body_limit},
          {"max_body", &f->max_body}};
}

void Usage() {
  std::fprintf(stderr,
               "usage: sbxd [--listen HOST:PORT] [--socket PATH] [--data-dir DIR] [--config FILE]\n"
               "            [--agent PATH] [--default-image NAME] [--uid-base N] [--owner-uid-base N]\n"
               "            [--sandbox-max-open-files N]\n"
               "            [--output-cap BYTES] [--pool-size N] [--log-level debug|info|warn|error]\n"
               "            [--max-sandboxes N] [--max-memory-mb MB] [--max-disk-mb MB]\n"
               "            [--price-small USD_PER_HOUR] [--price-default ...] [--price-large ...]\n"
               "            [--serverless-call-usd USD] [--min-free-mb MB] [--proxy-domain DOMAIN]\n"
               "            [--keepalive-ms MS] [--store-mb MB] [--store-overcommit RATIO] [--criu PATH|none]\n"
               "            [--runsc PATH|none] [--runsc-platform systrap|ptrace]\n"
               "            [--qemu PATH|none] [--microvm-kernel DIR] [--microvm-accel auto|kvm|tcg]\n"
               "            [--microvm-channel auto|vsock|serial]\n"
               "            [--default-isolation container|gvisor|microvm]\n"
               "            [--http-header-timeout-ms MS] [--http-idle-timeout-ms MS]\n"
               "            [--http-body-idle-timeout-ms MS] [--proxy-idle-timeout-ms MS]\n"
               "            [--max-connections N] [--max-sandbox-connections N] [--max-creates-in-flight N]\n"
               "            [--max-unauthenticated-connections N] [--max-unauthenticated-per-source N]\n"
               "            [--small-body-limit BYTES] [--token-body-limit BYTES] [--max-body BYTES]\n"
               "            [--default-network none|outbound] [--net-subnet CIDR] [--dns-upstream ADDR[:PORT]]\n"
               "            [--net-subnet6 auto|none|CIDR] [--net-max-conns N] [--net-dns-rate N]\n"
               "            [--net-conn-rate N]\n");
}

Result<std::unique_ptr<net::Network>> OpenNetwork(const Flags& f, const std::string& instance,
                                                  const std::string& data_dir) {
  net::NetworkOptions o;
  o.tag = instance.substr(0, 5);
  auto subnet = net::Cidr::Parse(f.net_subnet);
  if (!subnet) return MakeError(Code::kInvalidArgument, "--net-subnet wants an IPv4 CIDR");
  o.subnet = *subnet;
  if (f.net_subnet6 == "auto") {
    o.subnet6 = net::DefaultSubnet6(*subnet);
  } else if (f.net_subnet6 != "none") {
    o.subnet6 = net::Cidr::Parse(f.net_subnet6);
    if (!o.subnet6 || !o.subnet6->base.v6)
      return MakeError(Code::kInvalidArgument, "--net-subnet6 wants auto, none or an IPv6 CIDR (a /64 to a /112)");
  }
  SBX_ASSIGN_OR_RETURN(auto upstream, net::ParseUpstream(f.dns_upstream));
  o.upstream = upstream.first;
  o.upstream_port = upstream.second;
  o.max_conns = static_cast<int>(f.net_max_conns);
  o.dns_rate = static_cast<int>(f.net_dns_rate);
  o.conn_rate = static_cast<int>(f.net_conn_rate);
  o.state_dir = data_dir + "/network";
  // The resolver keeps its ports across restarts: the firewall sends DNS there until the
  // new table replaces the old.
  if (auto port = fs::ReadFile(o.state_dir + "/resolver-port"); port.ok()) o.resolver_port = static_cast<uint16_t>(std::atoi(port->c_str()));
  if (auto port = fs::ReadFile(o.state_dir + "/resolver-tcp-port"); port.ok())
    o.resolver_tcp_port = static_cast<uint16_t>(std::atoi(port->c_str()));
  auto n = net::Network::Open(o);
  if (!n.ok() && (o.resolver_port != 0 || o.resolver_tcp_port != 0)) {
    o.resolver_port = o.resolver_tcp_port = 0;  // taken meanwhile: any ports
    n = net::Network::Open(o);
  }
  if (!n.ok()) return n.error();
  (void)fs::WriteFileAtomic(o.state_dir + "/resolver-port", std::to_string((*n)->resolver_port()) + "\n", 0600);
  (void)fs::WriteFileAtomic(o.state_dir + "/resolver-tcp-port", std::to_string((*n)->resolver_tcp_port()) + "\n", 0600);
  return n;
}

// A small subset of TOML: top-level `key = "string"` and `key = integer` lines.
Status ReadConfig(const std::string& path, std::map<std::string, std::string>* out) {
  std::ifstream in(path);
  if (!in) return MakeError(Code::kNotFound, "cannot read config " + path);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    auto hash = line.find('#');
    if (hash != std::string::npos) line = line.substr(0, hash);
    auto trim = [](const std::string& s) {
      size_t a = s.find_first_not_of(" \t\r"), b = s.find_last_not_of(" \t\r");
      return a == std::string::npos ? std::string() : s.substr(a, b - a + 1);
    };
    line = trim(line);
    if (line.empty()) continue;
    auto eq = line.find('=');
    if (eq == std::string::npos)
      return MakeError(Code::kInvalidArgument, path + ":" + std::to_string(n) + ": expected key = value");
    std::string k = trim(line.substr(0, eq)), v = trim(line.substr(eq + 1));
    if (v.size() >= 2 && v.front() == '"' && v.back() == '"') v = v.substr(1, v.size() - 2);
    (*out)[k] = v;
  }
  return OkStatus();
}

Status ParseFlags(int argc, char** argv, Flags* f) {
  std::map<std::string, std::string> given;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      Usage();
      std::exit(0);
    }
    if (a == "--version") {
      std::printf("sbxd %s\n", SBX_VERSION);
      std::exit(0);
    }
    std::string key, val;
    auto eq = a.find('=');
    if (a.rfind("--", 0) != 0) return MakeError(Code::kInvalidArgument, "unexpected argument " + a);
    if (eq != std::string::npos) {
      key = a.substr(2, eq - 2);
      val = a.substr(eq + 1);
    } else {
      key = a.substr(2);
      if (i + 1 >= argc) return MakeError(Code::kInvalidArgument, "--" + key + " needs a value");
      val = argv[++i];
    }
    given[key] = val;
  }
  if (given.count("config")) {
    f->config = given["config"];
    f->config_given = true;
  }
  std::map<std::string, std::string> cfg;
  if (f->config_given || fs::Exists(f->config)) SBX_RETURN_IF_ERROR(ReadConfig(f->config, &cfg));
  for (auto& [k, v] : given) {
    std::string key = k;
    std::replace(key.begin(), key.end(), '-', '_');  // --data-dir is data_dir in the file
    cfg[key] = v;
  }
  auto limits = LimitOptions(f);
  for (auto& [k, v] : cfg) {
    try {
      if (auto lim = limits.find(k); lim != limits.end()) {
        *lim->second = std::stoll(v);
        if (*lim->second < 0 || *lim->second > (int64_t{1} << 40)) return MakeError(Code::kInvalidArgument, k + " must be 0 or more");
      } else if (k == "listen") f->listen = v;
      else if (k == "socket") f->socket = v;
      else if (k == "data_dir") f->data_dir = v;
      else if (k == "agent") f->agent = v;
      else if (k == "default_image") f->default_image = v;
      else if (k == "proxy_domain") f->proxy_domain = v;
      else if (k == "store_mb") f->store_mb = std::stoll(v);
      else if (k == "store_overcommit") {
        f->store_overcommit = std::stod(v);
        if (!(f->store_overcommit >= 0 && f->store_overcommit <= 1000))
          return MakeError(Code::kInvalidArgument, "store_overcommit must be 0 (off) or a ratio up to 1000");
      }
      else if (k == "keepalive_ms") f->keepalive_ms = std::stoll(v);
      else if (k == "criu") f->criu = v;
      else if (k == "runsc") f->runsc = v;
      else if (k == "runsc_platform") f->runsc_platform = v;
      else if (k == "qemu") f->qemu = v;
      else if (k == "microvm_kernel") f->microvm_kernel = v;
      else if (k == "microvm_accel") f->microvm_accel = v;
      else if (k == "microvm_channel") f->microvm_channel = v;
      else if (k == "default_isolation") f->default_isolation = v;
      else if (k == "default_network") f->default_network = v;
      else if (k == "net_subnet") f->net_subnet = v;
      else if (k == "net_subnet6") f->net_subnet6 = v;
      else if (k == "dns_upstream") f->dns_upstream = v;
      else if (k == "net_max_conns") f->net_max_conns = std::stoll(v);
      else if (k == "net_dns_rate") f->net_dns_rate = std::stoll(v);
      else if (k == "net_conn_rate") f->net_conn_rate = std::stoll(v);
      else if (k == "uid_base") f->uid_base = std::stoll(v);
      else if (k == "owner_uid_base") f->owner_uid_base = std::stoll(v);
      else if (k == "sandbox_max_open_files") f->sandbox_max_open_files = std::stoll(v);
      else if (k == "output_cap") f->output_cap = std::stoll(v);
      else if (k == "log_level") f->log_level = v;
      else if (k == "pool_size") f->pool_size = std::stoll(v);
      else if (k == "max_sandboxes") f->max_sandboxes = std::stoll(v);
      else if (k == "max_memory_mb") f->max_memory_mb = std::stoll(v);
      else if (k == "max_disk_mb") f->max_disk_mb = std::stoll(v);
      else if (k == "min_free_mb") f->min_free_mb = std::stoll(v);
      else if (k == "price_small" || k == "price_default" || k == "price_large") {
        double usd = std::stod(v);
        if (!(usd >= 0 && usd < 1e6)) return MakeError(Code::kInvalidArgument, k + " must be between 0 and 1e6");
        f->prices[k.substr(6)] = usd;
      } else if (k == "serverless_call_usd") {
        f->serverless_call_usd = std::stod(v);
        if (!(f->serverless_call_usd >= 0 && f->serverless_call_usd < 1e6))
          return MakeError(Code::kInvalidArgument, "serverless_call_usd must be between 0 and 1e6");
      }
      else if (k == "config") continue;
      else return MakeError(Code::kInvalidArgument, "unknown option " + k);
    } catch (const std::exception&) {
      return MakeError(Code::kInvalidArgument, "bad value for " + k + ": " + v);
    }
  }
  if (f->uid_base < 1 || f->uid_base > (int64_t{1} << 31))
    return MakeError(Code::kInvalidArgument, "uid_base out of range");
  if (f->owner_uid_base == -1) f->owner_uid_base = f->uid_base + 65536;
  if (f->owner_uid_base != 0 &&
      (f->owner_uid_base < 1 || f->owner_uid_base > (int64_t{1} << 31) ||
       (f->owner_uid_base < f->uid_base + 65536 && f->owner_uid_base + 65536 > f->uid_base)))
    return MakeError(Code::kInvalidArgument, "owner_uid_base must be 0 or a range of 65536 uids apart from uid_base's");
  if (f->sandbox_max_open_files < 64 || f->sandbox_max_open_files > (1 << 20))
    return MakeError(Code::kInvalidArgument, "sandbox_max_open_files must be between 64 and 1048576");
  if (f->output_cap < 1024) return MakeError(Code::kInvalidArgument, "output_cap must be at least 1024");
  if (f->pool_size < 0 || f->pool_size > 64) return MakeError(Code::kInvalidArgument, "pool_size must be between 0 and 64");
  if (f->min_free_mb < 0) return MakeError(Code::kInvalidArgument, "min_free_mb must be 0 or more");
  if (f->default_network != "none" && f->default_network != "outbound")
    return MakeError(Code::kInvalidArgument, "default_network must be none or outbound");
  if (f->net_max_conns < 0 || f->net_max_conns > 1000000)
    return MakeError(Code::kInvalidArgument, "net_max_conns must be 0 (no cap) to 1000000");
  if (f->net_dns_rate < 0 || f->net_dns_rate > 1000000)
    return MakeError(Code::kInvalidArgument, "net_dns_rate must be 0 (no limit) to 1000000");
  if (f->net_conn_rate < 0 || f->net_conn_rate > 1000000)
    return MakeError(Code::kInvalidArgument, "net_conn_rate must be 0 (no limit) to 1000000");
  if (f->max_sandboxes < 0 || f->max_sandboxes > 1000000 || f->max_memory_mb < 0 || f->max_disk_mb < 0)
    return MakeError(Code::kInvalidArgument, "quotas must be 0 (none) or positive");
  return OkStatus();
}

// Sandboxes' root (an unprivileged host uid) must be able to walk to the data dir.
Status CheckTraversable(const std::string& dir) {
  char real[PATH_MAX];
  if (!::realpath(dir.c_str(), real)) return ErrnoError("realpath " + dir);
  std::string p = real;
  while (!p.empty()) {
    struct stat st;
    if (::stat(p.c_str(), &st) != 0) return ErrnoError("stat " + p);
    if (!(st.st_mode & S_IXOTH))
      return MakeError(Code::kFailedPrecondition,
                       "the data dir must be reachable by the sandboxes' unprivileged uid: " + p +
                           " lacks the execute bit for others (chmod o+x " + p + ")");
    auto slash = p.rfind('/');
    if (slash == 0 || slash == std::string::npos) break;
    p = p.substr(0, slash);
  }
  return OkStatus();
}

// The one line of a 0600 key file, made by `make` when the file is missing or empty.
Result<std::string> ReadOrCreateKeyFile(const std::string& path, const std::function<std::string()>& make) {
  std::string key;
  auto existing = fs::ReadFile(path, 4096);
  if (existing.ok()) {
    key = *existing;
    while (!key.empty() && (key.back() == '\n' || key.back() == '\r')) key.pop_back();
  }
  if (key.empty()) {
    key = make();
    SBX_RETURN_IF_ERROR(fs::WriteFileAtomic(path, key + "\n", 0600));
  }
  ::chmod(path.c_str(), 0600);
  return key;
}

Result<std::string> EnsureAdminKey(const std::string& data_dir, storage::Store* store) {
  SBX_ASSIGN_OR_RETURN(std::string key,
                       ReadOrCreateKeyFile(data_dir + "/api-key", [] { return "sbx_" + RandomHex(24); }));
  std::string hash = Sha256Hex(key);
  SBX_RETURN_IF_ERROR(store->SetSetting("admin_key_sha256", hash));
  return hash;
}

// 32 random bytes (hex in <data-dir>/secret-key, 0600): seals daemon secrets at rest and
// signs sandbox tokens. Never leaves the host; losing it makes stored secrets unreadable.
Result<std::string> EnsureSecretKey(const std::string& data_dir) {
  std::string path = data_dir + "/secret-key";
  SBX_ASSIGN_OR_RETURN(std::string hex, ReadOrCreateKeyFile(path, [] { return RandomHex(32); }));
  std::string key = FromHex(hex);
  if (key.size() != 32) return MakeError(Code::kFailedPrecondition, path + " is not 64 hex digits");
  return key;
}

int Run(int argc, char** argv) {
  Flags f;
  if (auto st = ParseFlags(argc, argv, &f); !st.ok()) {
    std::fprintf(stderr, "sbxd: %s\n", st.error().message.c_str());
    Usage();
    return 2;
  }
  log::SetLevel(f.log_level == "debug" ? log::Level::kDebug : f.log_level == "warn" ? log::Level::kWarn
                : f.log_level == "error" ? log::Level::kError : log::Level::kInfo);
  if (::geteuid() != 0) {
    std::fprintf(stderr, "sbxd: must run as root (it creates namespaces and cgroups)\n");
    return 1;
  }
  ::signal(SIGPIPE, SIG_IGN);
  // SIGCHLD is blocked in every thread and handled by the reaper: start it before others.
  if (auto st = Reaper::Get().Start(); !st.ok()) {
    std::fprintf(stderr, "sbxd: %s\n", st.error().message.c_str());
    return 1;
  }
  auto fail = [](const Error& e) {
    SBX_LOG(kError) << e.message;
    std::fprintf(stderr, "sbxd: %s\n", e.message.c_str());
    return 1;
  };
  if (auto st = fs::MkdirAll(f.data_dir, 0711); !st.ok()) return fail(st.error());
  ::chmod(f.data_dir.c_str(), 0711);
  for (const char* d : {"sandboxes", "images", "tmp", "disks"}) {
    std::string p = f.data_dir + "/" + d;
    if (auto st = fs::MkdirAll(p, 0711); !st.ok()) return fail(st.error());
    ::chmod(p.c_str(), d[0] == 't' ? 0700 : 0711);
  }
  if (auto st = CheckTraversable(f.data_dir); !st.ok()) return fail(st.error());
  char real[PATH_MAX];
  std::string data_dir = ::realpath(f.data_dir.c_str(), real) ? real : f.data_dir;
  if (f.store_mb < 0 || (f.store_mb > 0 && f.store_mb < 512))
    return fail(MakeError(Code::kInvalidArgument, "--store-mb must be 0 (no store) or at least 512"));
  if (auto st = runtime::SetUpContainerHost(data_dir, f.store_mb); !st.ok()) return fail(st.error());
  if (f.agent.empty()) {
    char self[PATH_MAX];
    ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0) {
      self[n] = 0;
      std::string dir = self;
      f.agent = dir.substr(0, dir.rfind('/')) + "/sbx-agent";
    }
  }
  if (::access(f.agent.c_str(), X_OK) != 0)
    return fail(MakeError(Code::kFailedPrecondition, "sbx-agent not found at " + f.agent + " (use --agent)"));

  auto store = storage::Store::Open(data_dir + "/sbxd.db");
  if (!store.ok()) return fail(store.error());
  auto key_hash = EnsureAdminKey(data_dir, store->get());
  if (!key_hash.ok()) return fail(key_hash.error());

  runtime::ContainerOptions co;
  co.agent_path = f.agent;
  co.instance = Sha256Hex(data_dir).substr(0, 8);
  co.uid_base = static_cast<uid_t>(f.uid_base);
  co.owner_base = static_cast<uid_t>(f.owner_uid_base);
  co.max_open_files = static_cast<uint64_t>(f.sandbox_max_open_files);
  co.disk_quotas = f.store_mb > 0;
  auto criu = FindCriu(f.criu);
  if (!criu.ok()) return fail(criu.error());
  co.criu = *criu;
  SBX_LOG(kInfo) << (co.criu.empty() ? std::string("hibernate: off on the container wall (no CRIU that passes `criu check` and checkpoints a test process here)")
                                     : "hibernate: CRIU at " + co.criu);
  // The in-sandbox API socket (/run/sbx/api.sock inside every sandbox).
  co.api_dir = data_dir + "/sandbox-api";
  if (auto st = fs::MkdirAll(co.api_dir, 0755); !st.ok()) return fail(st.error());
  ::chmod(co.api_dir.c_str(), 0755);
  // The agent's binary, copied where every sandbox sees it (/run/sbx): each sandbox's init
  // re-executes from there. The name holds the content's hash, so a sandbox that was
  // hibernated keeps finding the exact binary it ran, whatever sbxd runs today.
  {
    auto bin = fs::ReadFile(f.agent, 256 << 20);
    if (!bin.ok()) return fail(bin.error().Wrap("read the agent " + f.agent));
    co.agent_copy = "sbx-agent-" + Sha256Hex(*bin).substr(0, 16);
    std::string dst = co.api_dir + "/" + co.agent_copy;
    if (!fs::Exists(dst))
      if (auto st = fs::WriteFileAtomic(dst, *bin, 0555); !st.ok()) return fail(st.error());
  }
  auto rt = runtime::NewContainerRuntime(co);
  layers::ImageStore images(data_dir, store->get(), co.uid_base);
  {
    auto bb = images.Get("busybox");
    if (!bb.ok()) {
      auto built = images.BuildBusybox();
      if (!built.ok()) SBX_LOG(kWarn) << "cannot build the busybox image: " << built.error().message;
    }
  }
  std::unique_ptr<net::Network> network;
  if (auto n = OpenNetwork(f, co.instance, data_dir); n.ok()) {
    network = std::move(*n);
    SBX_LOG(kInfo) << "network: sandboxes in " << f.net_subnet
                   << (network->subnet6() ? " and " + network->subnet6()->ToString() : std::string(", IPv4 only"))
                   << ", resolver on port " << network->resolver_port()
                   << ", default mode " << f.default_network;
  } else if (n.error().code == Code::kInvalidArgument) {
    return fail(n.error());  // a flag's value (--net-subnet, --dns-upstream) is wrong
  } else {
    SBX_LOG(kError) << "network: off, every sandbox has loopback only: " << n.error().message;
  }
  core::ManagerOptions mo;
  mo.data_dir = data_dir;
  mo.default_network = network ? f.default_network : "none";
  mo.default_image = f.default_image;
  if (f.keepalive_ms < 10 || f.keepalive_ms > 3600000)
    return fail(MakeError(Code::kInvalidArgument, "--keepalive-ms must be between 10 and 3600000"));
  mo.keepalive_ms = f.keepalive_ms;
  mo.max_creates_in_flight = static_cast<int>(std::min<int64_t>(f.max_creates_in_flight, 1 << 20));
  mo.output_cap = static_cast<uint64_t>(f.output_cap);
  mo.pool_size = static_cast<int>(f.pool_size);
  mo.quotas.max_sandboxes = static_cast<int>(f.max_sandboxes);
  mo.quotas.max_memory_mb = f.max_memory_mb;
  mo.quotas.max_disk_mb = f.max_disk_mb;
  mo.min_free_mb = f.min_free_mb;
  if (f.store_mb > 0) {
    mo.store_dir = data_dir + "/store";
    // The store as it is (an image made earlier keeps its size, whatever --store-mb says now).
    struct statvfs v;
    mo.store_mb = ::statvfs(mo.store_dir.c_str(), &v) == 0
                      ? static_cast<int64_t>((static_cast<unsigned __int128>(v.f_blocks) * v.f_frsize) >> 20)
                      : f.store_mb;
    mo.store_overcommit = f.store_overcommit;
  }
  auto secret_key = EnsureSecretKey(data_dir);
  if (!secret_key.ok()) return fail(secret_key.error());
  mo.secret_key = *secret_key;
  if (f.serverless_call_usd >= 0) mo.serverless_call_usd = f.serverless_call_usd;
  core::TypeTable types = core::TypeTable::Defaults();
  for (const auto& [name, usd] : f.prices) {
    auto t = types.Find(name);
    if (!t.ok()) return fail(t.error());
    t->usd_per_hour = usd;
    types.Put(*t);
  }
  runtime::Registry runtimes;
  runtimes.Add("container", rt.get());
  // The gVisor wall, where runsc is found (the set-up installs it).
  runtime::GvisorOptions go;
  go.runsc = FindRunsc(f.runsc);
  std::unique_ptr<runtime::Runtime> gvisor;
  if (!go.runsc.empty()) {
    go.platform = f.runsc_platform;
    go.state_dir = data_dir + "/runsc";
    go.sandboxes_dir = data_dir + "/sandboxes";
    go.instance = co.instance;
    go.uid_base = co.uid_base;
    go.api_dir = co.api_dir;
    go.agent_copy = co.agent_copy;
    go.disk_quotas = co.disk_quotas;
    go.max_open_files = co.max_open_files;
    gvisor = runtime::NewGvisorRuntime(go);
    runtimes.Add("gvisor", gvisor.get());
  }
  runtime::MicrovmOptions mvo;
  mvo.accel = f.microvm_accel;
  mvo.channel = f.microvm_channel;
  mvo.state_dir = data_dir + "/microvm";
  mvo.agent_path = co.agent_path;
  mvo.instance = co.instance;
  mvo.uid_base = co.uid_base;
  mvo.uid_count = co.uid_count;
  mvo.vm_uid_base = std::max(co.uid_base, co.owner_base) + 65536;  // apart from both ranges
  auto microvm = OpenMicrovm(f.qemu, f.microvm_kernel, mvo);
  if (!microvm.ok()) return fail(microvm.error());
  if (*microvm) runtimes.Add("microvm", microvm->get());
  if (!runtimes.Find(f.default_isolation))
    return fail(MakeError(Code::kInvalidArgument, "--default-isolation " + f.default_isolation +
                                                      " is not available on this sbxd (container, gvisor with runsc, "
                                                      "microvm with QEMU)"));
  mo.default_isolation = f.default_isolation;
  core::SandboxManager manager(mo, store->get(), &images, &runtimes, types);
  disks::DiskStore disk_store(data_dir, store->get(), co.uid_base);
  if (auto st = disk_store.MountAll(); !st.ok()) return fail(st.error().Wrap("mounting disks"));
  manager.AttachDisks(&disk_store);
  manager.set_network(network.get());
  if (auto st = manager.Recover(); !st.ok()) return fail(st.error().Wrap("recovering state"));
  // Every sandbox's rules at once, replacing the table an earlier sbxd left.
  if (auto st = manager.InstallNetwork(); !st.ok()) SBX_LOG(kError) << "network rules: " << st.error().message;
  if (auto st = manager.secrets().Load(); !st.ok()) return fail(st.error().Wrap("loading secrets"));

  asio::io_context io;
  asio::thread_pool pool(8);
  api::Api api(&manager, &images, &disk_store, *key_hash, &pool, data_dir + "/tmp");
  api.set_proxy_domain(f.proxy_domain);
  api::ServerOptions so;
  auto colon = f.listen.rfind(':');
  if (colon == std::string::npos) return fail(MakeError(Code::kInvalidArgument, "--listen wants HOST:PORT"));
  so.listen_host = f.listen.substr(0, colon);
  try {
    so.listen_port = std::stoi(f.listen.substr(colon + 1));
  } catch (...) {
    return fail(MakeError(Code::kInvalidArgument, "--listen wants HOST:PORT"));
  }
  so.socket_path = f.socket;
  so.sandbox_socket_path = co.api_dir + "/api.sock";
  so.limits.header_timeout_ms = f.http_header_timeout_ms;
  so.limits.keepalive_timeout_ms = f.http_idle_timeout_ms;
  so.limits.body_idle_timeout_ms = f.http_body_idle_timeout_ms;
  so.limits.proxy_idle_timeout_ms = f.proxy_idle_timeout_ms;
  so.limits.max_connections = static_cast<int>(f.max_connections);
  so.limits.max_sandbox_connections = static_cast<int>(f.max_sandbox_connections);
  so.limits.max_unknown_connections = static_cast<int>(f.max_unauthenticated_connections);
  so.limits.max_unknown_per_source = static_cast<int>(f.max_unauthenticated_per_source);
  so.limits.small_body_bytes = static_cast<uint64_t>(f.small_body_limit);
  so.limits.token_body_bytes = static_cast<uint64_t>(f.token_body_limit);
  so.limits.max_body_bytes = static_cast<uint64_t>(f.max_body);
  if (!so.socket_path.empty()) {
    auto slash = so.socket_path.rfind('/');
    if (slash != std::string::npos && slash > 0) (void)fs::MkdirAll(so.socket_path.substr(0, slash), 0755);
  }
  // The background processes that agents kept while sbxd was away are followed again
  // before sbxd serves (io runs on a helper thread meanwhile; their readers stay queued).
  manager.set_processes(api.processes());
  {
    auto work = asio::make_work_guard(io);
    std::thread helper([&] { io.run(); });
    api.processes()->ReattachAll(io.get_executor());
    work.reset();
    io.stop();
    helper.join();
    io.restart();
  }
  api::Server server(so, &api, &io);
  if (auto st = server.Start(); !st.ok()) return fail(st.error());
  SBX_LOG(kInfo) << "sbxd " << SBX_VERSION << " listening on " << so.listen_host << ":"
                 << server.bound_port() << (so.socket_path.empty() ? "" : " and " + so.socket_path)
                 << ", data in " << data_dir;

  // TTLs: a tick a second, on the blocking pool (stopping a sandbox waits for it).
  asio::steady_timer ticker(io);
  std::function<void()> arm = [&] {
    ticker.expires_after(std::chrono::seconds(1));
    ticker.async_wait([&](const boost::system::error_code& ec) {
      if (ec) return;
      asio::post(pool, [&] { manager.Tick(); });
      arm();
    });
  };
  arm();

  asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](const boost::system::error_code&, int sig) {
    SBX_LOG(kInfo) << "signal " << sig << ": stopping (sandboxes keep running and are re-adopted)";
    io.stop();
  });
  std::vector<std::thread> threads;
  unsigned n = std::max(2u, std::thread::hardware_concurrency());
  for (unsigned i = 1; i < n; ++i) threads.emplace_back([&] { io.run(); });
  io.run();
  for (auto& t : threads) t.join();
  pool.join();
  manager.DrainTeardowns();
  return 0;
}

}  // namespace

// No catch: an exception that gets this far is a bug, and std::terminate (the exception's
// type and message, then a core dump) tells more than a caught one would. Once Run's worker
// threads have started, unwinding past them would end the process that way anyway.
int main(int argc, char** argv) { return Run(argc, argv); }  // NOLINT(bugprone-exception-escape)
