#include <gtest/gtest.h>

#include "storage/store.h"

namespace sbx::storage {
namespace {

SandboxRecord Rec(const std::string& id, const std::string& name) {
  SandboxRecord r;
  r.id = id;
  r.name = name;
  r.state = "running";
  r.type = "small";
  r.isolation = "container";
  r.image = "busybox";
  r.created_ms = 1;
  return r;
}

TEST(Store, SandboxCrud) {
  auto s = Store::Open(":memory:");
  ASSERT_TRUE(s.ok()) << s.error().message;
  ASSERT_TRUE((*s)->InsertSandbox(Rec("sb-1", "a")).ok());
  auto got = (*s)->GetSandbox("sb-1");
  ASSERT_TRUE(got.ok());
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ((*got)->name, "a");
  EXPECT_EQ((*got)->user, "");  // root, as for rows from before the column
  SandboxRecord r = **got;
  r.state = "stopped";
  r.billed_ms = 1234;
  r.user = "user";
  ASSERT_TRUE((*s)->UpdateSandbox(r).ok());
  EXPECT_EQ((*(*s)->GetSandbox("sb-1"))->billed_ms, 1234);
  EXPECT_EQ((*(*s)->GetSandbox("sb-1"))->user, "user");
  EXPECT_EQ((*s)->ListSandboxes()->size(), 1u);
  ASSERT_TRUE((*s)->DeleteSandbox("sb-1").ok());
  EXPECT_FALSE((*s)->GetSandbox("sb-1")->has_value());
}

TEST(Store, NamesAreUniqueExceptWhileDeleting) {
  auto s = Store::Open(":memory:");
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE((*s)->InsertSandbox(Rec("sb-1", "same")).ok());
  auto dup = (*s)->InsertSandbox(Rec("sb-2", "same"));
  ASSERT_FALSE(dup.ok());
  EXPECT_EQ(dup.error().code, Code::kAlreadyExists);
  // Unnamed sandboxes never clash.
  ASSERT_TRUE((*s)->InsertSandbox(Rec("sb-3", "")).ok());
  ASSERT_TRUE((*s)->InsertSandbox(Rec("sb-4", "")).ok());
  auto r = *(*s)->GetSandbox("sb-1");
  r->state = "deleting";
  ASSERT_TRUE((*s)->UpdateSandbox(*r).ok());
  EXPECT_TRUE((*s)->InsertSandbox(Rec("sb-5", "same")).ok());
}

TEST(Store, SettingsAndImages) {
  auto s = Store::Open(":memory:");
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE((*s)->SetSetting("k", "v1").ok());
  ASSERT_TRUE((*s)->SetSetting("k", "v2").ok());
  EXPECT_EQ(**(*s)->GetSetting("k"), "v2");
  EXPECT_FALSE((*s)->GetSetting("missing")->has_value());
  ASSERT_TRUE((*s)->PutImage({"busybox", "/x", 10, 1}).ok());
  EXPECT_EQ((*(*s)->GetImage("busybox"))->path, "/x");
  EXPECT_EQ((*s)->ListImages()->size(), 1u);
}

TEST(Store, SnapshotsKeepTheirUser) {
  auto s = Store::Open(":memory:");
  ASSERT_TRUE(s.ok());
  SnapshotRecord a{"a", "[\"/l\"]", "default", "", "sb-1", "user", 5, 1};
  SnapshotRecord b{"b", "[\"/l\"]", "default", "a", "sb-2", "", 6, 2};
  ASSERT_TRUE((*s)->InsertSnapshot(a).ok());
  ASSERT_TRUE((*s)->InsertSnapshot(b).ok());
  EXPECT_EQ((*(*s)->GetSnapshot("a"))->user, "user");
  EXPECT_EQ((*(*s)->GetSnapshot("a"))->size_bytes, 5);
  EXPECT_EQ((*(*s)->GetSnapshot("b"))->user, "");  // root, as for rows from before the column
  EXPECT_EQ((*(*s)->GetSnapshot("b"))->parent, "a");
  EXPECT_EQ((*s)->ListSnapshots()->size(), 2u);
  EXPECT_FALSE((*s)->InsertSnapshot(a).ok());
}

}  // namespace
}  // namespace sbx::storage
