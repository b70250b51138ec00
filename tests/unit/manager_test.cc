// SandboxManager over the fake runtime: the real sbx-agent as a plain child process, an
// in-memory SQLite and a driven clock. No root needed.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <utility>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/detached.hpp>
#include <atomic>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "base/fs.h"
#include "core/sandbox_manager.h"

namespace sbx::core {
namespace {

namespace asio = boost::asio;

class ManagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sbx-unit-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    ASSERT_TRUE(fs::MkdirAll(dir_ + "/sandboxes").ok());
    ASSERT_TRUE(fs::MkdirAll(dir_ + "/images/fake/rootfs").ok());
    auto st = storage::Store::Open(":memory:");
    ASSERT_TRUE(st.ok());
    store_ = std::move(*st);
    ASSERT_TRUE(store_->PutImage({"default", dir_ + "/images/fake/rootfs", 0, 1}).ok());
    images_ = std::make_unique<layers::ImageStore>(dir_, store_.get(), 0);
    runtime_ = runtime::NewFakeRuntime(SBX_AGENT_PATH);
    NewManager();
  }
  void TearDown() override {
    if (manager_) {
      auto list = manager_->List({});
      if (list.ok())
        for (const auto& v : *list) (void)manager_->Delete(v.rec.id);
      manager_->DrainTeardowns();
      manager_.reset();
    }
    std::filesystem::remove_all(dir_);
  }
  void NewManager(uint64_t cap = 16 << 20) {
    ManagerOptions o;
    o.data_dir = dir_;
    o.output_cap = cap;
    o.default_cwd = "";  // the fake agent runs in the sandbox's upper dir
    o.now_ms = [this] { return now_.load(); };
    manager_ = std::make_unique<SandboxManager>(o, store_.get(), images_.get(), runtime_.get());
  }
  Result<ExecResult> Exec(const std::string& id, ExecRequest req, std::string* out = nullptr,
                          std::string* err = nullptr) {
    asio::io_context io;
    std::string o, e;
    std::optional<Result<ExecResult>> result;
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
          agent::OutputFn collect = [&](agent::FrameType t, std::string_view d) -> asio::awaitable<void> {
            if (t == agent::FrameType::kStdout) o.append(d);
            if (t == agent::FrameType::kStderr) e.append(d);
            co_return;
          };
          auto r = co_await manager_->Exec(io.get_executor(), id, std::move(req), collect);
          result.emplace(std::move(r));
        },
        asio::detached);
    io.run();
    if (out) *out = o;
    if (err) *err = e;
    return std::move(*result);
  }
  ExecRequest Sh(const std::string& cmd, int64_t timeout = 30) {
    ExecRequest r;
    r.argv = {"/bin/sh", "-c", cmd};
    r.timeout_seconds = timeout;
    return r;
  }
  std::string dir_;
  std::atomic<int64_t> now_{1'000'000};
  std::unique_ptr<storage::Store> store_;
  std::unique_ptr<layers::ImageStore> images_;
  std::unique_ptr<runtime::Runtime> runtime_;
  std::unique_ptr<SandboxManager> manager_;
};

TEST_F(ManagerTest, CreateExecDelete) {
  CreateRequest c;
  c.env = {{"GREETING", "hi"}};
  auto v = manager_->Create(c);
  ASSERT_TRUE(v.ok()) << v.error().message;
  EXPECT_EQ(v->rec.state, "running");
  EXPECT_EQ(v->rec.expires_ms, now_ + 3600 * 1000);
  std::string out, err;
  auto r = Exec(v->rec.id, Sh("echo $GREETING $SBX_SANDBOX_ID; echo oops >&2; exit 3"), &out, &err);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->exit.exit_code, 3);
  EXPECT_EQ(out, "hi " + v->rec.id + "\n");
  EXPECT_EQ(err, "oops\n");
  ASSERT_TRUE(manager_->Delete(v->rec.id).ok());
  EXPECT_EQ(manager_->Get(v->rec.id).error().code, Code::kNotFound);
  manager_->DrainTeardowns();
  EXPECT_FALSE(store_->GetSandbox(v->rec.id)->has_value());
  EXPECT_FALSE(fs::Exists(dir_ + "/sandboxes/" + v->rec.id));
}

TEST_F(ManagerTest, ArgvStdinAndMissingCommand) {
  auto v = manager_->Create({});
  ASSERT_TRUE(v.ok());
  ExecRequest r;
  r.argv = {"cat"};
  r.stdin_data = std::string("line one\nline two\n");
  std::string out, err;
  auto res = Exec(v->rec.id, r, &out);
  ASSERT_TRUE(res.ok());
  EXPECT_EQ(out, "line one\nline two\n");
  r.argv = {"no-such-command-xyz"};
  r.stdin_data.reset();
  res = Exec(v->rec.id, r, &out, &err);
  ASSERT_TRUE(res.ok());
  EXPECT_EQ(res->exit.exit_code, 127);
  EXPECT_NE(err.find("no-such-command-xyz"), std::string::npos);
}

TEST_F(ManagerTest, SignalExitCodes) {
  auto v = manager_->Create({});
  ASSERT_TRUE(v.ok());
  auto r = Exec(v->rec.id, Sh("kill -9 $$"));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit.exit_code, 137);
  EXPECT_EQ(r->exit.signal, 9);
  EXPECT_FALSE(r->exit.timed_out);
}

TEST_F(ManagerTest, TimeoutKillsTheWholeTreeAndKeepsPartialOutput) {
  auto v = manager_->Create({});
  ASSERT_TRUE(v.ok());
  std::string out;
  // A grandchild in its own session (setsid) still dies: the agent walks the tree.
  auto r = Exec(v->rec.id, Sh("echo started; setsid sh -c 'echo $$ > pid; exec sleep 300' & sleep 300", 1), &out);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_TRUE(r->exit.timed_out);
  EXPECT_EQ(r->exit.exit_code, 124);
  EXPECT_EQ(out, "started\n");
  auto pid = fs::ReadFile(dir_ + "/sandboxes/" + v->rec.id + "/upper/pid");
  ASSERT_TRUE(pid.ok());
  pid_t p = std::stoi(*pid);
  usleep(100000);
  EXPECT_NE(::kill(p, 0), 0) << "descendant " << p << " survived the timeout";
}

TEST_F(ManagerTest, OutputIsCappedButTheCommandRunsToItsEnd) {
  NewManager(1024);
  auto v = manager_->Create({});
  ASSERT_TRUE(v.ok());
  std::string out, err;
  auto r = Exec(v->rec.id, Sh("head -c 100000 /dev/zero | tr '\\0' a; echo done >&2"), &out, &err);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(out.size(), 1024u);
  EXPECT_TRUE(r->exit.stdout_truncated);
  EXPECT_FALSE(r->exit.stderr_truncated);
  EXPECT_EQ(err, "done\n");
  EXPECT_EQ(r->exit.exit_code, 0);
}

TEST_F(ManagerTest, BadInputChangesNothing) {
  ASSERT_TRUE(manager_->Create({.name = "keep"}).ok());
  auto before = manager_->List({})->size();
  auto code = [&](CreateRequest c) {
    auto r = manager_->Create(c);
    return r.ok() ? Code::kOk : r.error().code;
  };
  EXPECT_EQ(code({.type = "huge"}), Code::kInvalidArgument);
  EXPECT_EQ(code({.isolation = "vm"}), Code::kInvalidArgument);
  EXPECT_EQ(code({.name = "Bad/Name"}), Code::kInvalidArgument);
  EXPECT_EQ(code({.name = "keep"}), Code::kAlreadyExists);
  EXPECT_EQ(code({.image = "nope"}), Code::kNotFound);
  EXPECT_EQ(code({.from = "no-such-snapshot"}), Code::kNotFound);
  EXPECT_EQ(code({.ttl_seconds = 0}), Code::kInvalidArgument);
  EXPECT_EQ(code({.ttl_seconds = INT64_MAX}), Code::kInvalidArgument);
  CreateRequest env;
  env.env = {{"A=B", "x"}};
  EXPECT_EQ(code(env), Code::kInvalidArgument);
  EXPECT_EQ(manager_->List({})->size(), before);
  EXPECT_EQ(store_->ListSandboxes()->size(), before);
  EXPECT_EQ(manager_->Delete("no-such").error().code, Code::kNotFound);
  EXPECT_EQ(manager_->Delete("../etc").error().code, Code::kInvalidArgument);
}

TEST_F(ManagerTest, StopKeepsFilesAndStartBootsThemAgain) {
  auto v = manager_->Create({});
  ASSERT_TRUE(v.ok());
  ASSERT_TRUE(Exec(v->rec.id, Sh("echo kept > f")).ok());
  now_ += 10'000;
  auto s = manager_->Stop(v->rec.id);
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(s->rec.state, "stopped");
  EXPECT_DOUBLE_EQ(s->billed_seconds, 10.0);
  EXPECT_EQ(Exec(v->rec.id, Sh("true")).error().code, Code::kFailedPrecondition);
  now_ += 5'000;  // stopped time is not billed
  auto g = manager_->Start(v->rec.id);
  ASSERT_TRUE(g.ok()) << g.error().message;
  EXPECT_EQ(g->rec.state, "running");
  std::string out;
  ASSERT_TRUE(Exec(v->rec.id, Sh("cat f"), &out).ok());
  EXPECT_EQ(out, "kept\n");
  now_ += 2'000;
  EXPECT_DOUBLE_EQ(manager_->Get(v->rec.id)->billed_seconds, 12.0);
}

TEST_F(ManagerTest, TtlStopsOnTheDrivenClockAndNotBefore) {
  CreateRequest c;
  c.ttl_seconds = 60;
  auto v = manager_->Create(c);
  ASSERT_TRUE(v.ok());
  now_ += 59'999;
  manager_->Tick();
  EXPECT_EQ(manager_->Get(v->rec.id)->rec.state, "running");
  now_ += 1;
  manager_->Tick();
  EXPECT_EQ(manager_->Get(v->rec.id)->rec.state, "stopped");
  EXPECT_DOUBLE_EQ(manager_->Get(v->rec.id)->billed_seconds, 60.0);
}

TEST_F(ManagerTest, RecoverReadoptsLiveSandboxesAndFlagsDeadOnes) {
  auto live = manager_->Create({.name = "live"});
  auto dead = manager_->Create({.name = "dead"});
  ASSERT_TRUE(live.ok() && dead.ok());
  pid_t dead_pid = static_cast<pid_t>(dead->rec.pid);
  // A new manager over the same state, as after a daemon restart.
  manager_.reset();
  ::kill(dead_pid, SIGKILL);
  usleep(50000);
  NewManager();
  ASSERT_TRUE(manager_->Recover().ok());
  EXPECT_EQ(manager_->Get(live->rec.id)->rec.state, "running");
  std::string out;
  auto r = Exec(live->rec.id, Sh("echo still here"), &out);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(out, "still here\n");
  auto d = manager_->Get(dead->rec.id);
  EXPECT_EQ(d->rec.state, "error");
  EXPECT_FALSE(d->rec.error.empty());
  // An errored sandbox with its files can start again.
  EXPECT_TRUE(manager_->Start(dead->rec.id).ok());
}

}  // namespace
}  // namespace sbx::core

namespace sbx::core {
namespace {

TEST_F(ManagerTest, AnInitThatDiesIsMarkedErrorAndCanStartAgain) {
  auto v = manager_->Create({});
  ASSERT_TRUE(v.ok());
  ::kill(static_cast<pid_t>(v->rec.pid), SIGKILL);
  for (int i = 0; i < 200 && manager_->Get(v->rec.id)->rec.state == "running"; ++i) {
    usleep(5000);
    manager_->Tick();
  }
  auto got = manager_->Get(v->rec.id);
  EXPECT_EQ(got->rec.state, "error");
  EXPECT_NE(got->rec.error.find("init exited"), std::string::npos);
  EXPECT_EQ((*store_->GetSandbox(v->rec.id))->state, "error");
  ASSERT_TRUE(manager_->Start(v->rec.id).ok());
  EXPECT_EQ(manager_->Get(v->rec.id)->rec.state, "running");
}

}  // namespace
}  // namespace sbx::core

namespace sbx::core {
namespace {

// A collector running at any moment never takes a fresh snapshot's layer (it is in no
// row until the snapshot is recorded).
TEST_F(ManagerTest, LayerCollectionNeverRacesAFreshSnapshot) {
  auto v = manager_->Create({});
  ASSERT_TRUE(v.ok());
  ASSERT_TRUE(fs::WriteFile(dir_ + "/sandboxes/" + v->rec.id + "/upper/file", "data").ok());
  std::atomic<bool> stop{false};
  std::thread collector([&] {
    while (!stop) manager_->CollectLayers();
  });
  for (int i = 0; i < 30; ++i) {
    std::string name = "race-" + std::to_string(i);
    auto snap = manager_->Snapshot(v->rec.id, name);
    ASSERT_TRUE(snap.ok()) << snap.error().message;
    auto layers = nlohmann::json::parse(snap->layers_json);
    ASSERT_TRUE(fs::IsDir(layers[0].get<std::string>())) << "layer of " << name << " was collected";
    ASSERT_TRUE(fs::Exists(layers[0].get<std::string>() + "/file"));
  }
  stop = true;
  collector.join();
  for (int i = 0; i < 30; ++i) ASSERT_TRUE(manager_->DeleteSnapshot("race-" + std::to_string(i)).ok());
  auto left = fs::ListDir(dir_ + "/layers");
  ASSERT_TRUE(left.ok());
  EXPECT_TRUE(left->empty());
}

}  // namespace
}  // namespace sbx::core
