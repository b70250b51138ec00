// The microVM wall's host-side pieces that need no guest: the agent's channel (vsock where
// the host has vhost-vsock, which this project's own machines lack, so its QEMU and relay
// are checked here as far as a host without it allows), and a memory template copy's disk.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "agent/vm_config.h"
#include "agent/vm_relay.h"
#include "base/fs.h"
#include "runtime/microvm/qemu.h"
#include "runtime/microvm/vm_host.h"
#include "runtime/microvm/vm_memory.h"

namespace sbx {
namespace {

using runtime::microvm::VmSpec;

bool Has(const std::vector<std::string>& v, const std::string& s) { return std::find(v.begin(), v.end(), s) != v.end(); }
bool HasPart(const std::vector<std::string>& v, const std::string& s) {
  return std::any_of(v.begin(), v.end(), [&](const std::string& a) { return a.find(s) != std::string::npos; });
}

VmSpec Spec() {
  VmSpec s;
  s.qemu = "qemu-system-x86_64";
  s.accel = "tcg";
  s.kernel = "/k/vmlinux";
  s.initrd = "/k/initrd";
  s.config = "{}";
  s.own_disk = "/sb/disk.ext4";
  s.layer_images = {"/img/a.ext4"};
  return s;
}

TEST(VmConfig, VsockGoesThroughAndIsOffByDefault) {
  agent::VmConfig c;
  c.vsock = true;
  auto back = agent::VmConfig::FromJson(c.ToJson());
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(back->vsock);
  agent::VmConfig none;
  EXPECT_EQ(none.ToJson().find("vsock"), std::string::npos);
  EXPECT_FALSE(agent::VmConfig::FromJson(none.ToJson())->vsock);
}

// Any host user can connect to a guest's vsock port: the guest's agent takes only the
// host (CID 2) from a port below 1024, which only root can bind.
TEST(VmConfig, OnlyTheHostsRootReachesTheAgentOverVsock) {
  EXPECT_TRUE(agent::VsockPeerIsHostRoot(2, 1023));
  EXPECT_TRUE(agent::VsockPeerIsHostRoot(2, 512));
  EXPECT_FALSE(agent::VsockPeerIsHostRoot(2, 1024));
  EXPECT_FALSE(agent::VsockPeerIsHostRoot(2, 0xffffffffu));  // VMADDR_PORT_ANY's
  EXPECT_FALSE(agent::VsockPeerIsHostRoot(1, 100));           // the guest itself (loopback)
  EXPECT_FALSE(agent::VsockPeerIsHostRoot(3, 100));           // another guest
}

TEST(Qemu, AVsockDeviceReplacesTheAgentsSerialPort) {
  VmSpec s = Spec();
  auto serial = runtime::microvm::QemuArgv(s);
  EXPECT_TRUE(HasPart(serial, "virtserialport,chardev=agent,name=sbx.agent"));
  EXPECT_FALSE(HasPart(serial, "vsock"));
  s.vsock_cid = 231077;
  auto vsock = runtime::microvm::QemuArgv(s);
  EXPECT_TRUE(Has(vsock, "vhost-vsock-device,guest-cid=231077,vhostfd=" + std::to_string(agent::kVsockFd)));
  EXPECT_FALSE(HasPart(vsock, "virtserialport"));
  EXPECT_FALSE(HasPart(vsock, "agent.sock"));
  EXPECT_TRUE(HasPart(vsock, "console.sock"));  // the console stays a serial line
}

// sbxd's launch line for a vsock VM asks the launcher (root) to open /dev/vhost-vsock for
// QEMU, and parses back to what QEMU is to run.
TEST(Qemu, TheLaunchOpensVhostVsockForQemu) {
  VmSpec s = Spec();
  s.vsock_cid = 231077;
  s.tap = "sbxt1";
  runtime::microvm::Launch how;
  how.agent = "/bin/sbx-agent";
  how.vm = "/sb/vm";
  how.uid = 231077;
  auto argv = runtime::microvm::LaunchArgv(how, s);
  ASSERT_GE(argv.size(), 3u);
  EXPECT_EQ(argv[1], "--vm-launch");
  auto o = agent::ParseLaunch(std::vector<std::string>(argv.begin() + 2, argv.end()));
  ASSERT_TRUE(o.ok()) << o.error().message;
  EXPECT_TRUE(o->vsock);
  EXPECT_EQ(o->tap, "sbxt1");
  EXPECT_EQ(o->uid, 231077u);
  EXPECT_EQ(o->read_write, std::vector<std::string>{"/sb/disk.ext4"});
  EXPECT_EQ(o->argv, runtime::microvm::QemuArgv(s));
  s.vsock_cid = 0;
  auto plain_argv = runtime::microvm::LaunchArgv(how, s);
  auto plain = agent::ParseLaunch(std::vector<std::string>(plain_argv.begin() + 2, plain_argv.end()));
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->vsock);
  EXPECT_FALSE(agent::ParseLaunch({"/d", "1", "1", "/d/log", "--tap"}).ok());  // an option without its value
}

TEST(VmRelay, AVsockLinkNamesAGuestsCid) {
  EXPECT_EQ(agent::VsockLinkCid("vsock:231077"), 231077u);
  EXPECT_EQ(agent::VsockLinkCid("vsock:3"), 3u);
  for (const char* bad : {"agent.sock", "vsock:", "vsock:2", "vsock:0", "vsock:12a", "vsock:-5", "vsock:4294967295",
                          "vsock:99999999999"})
    EXPECT_EQ(agent::VsockLinkCid(bad), 0u) << bad;
}

TEST(VmHost, TheChannelFollowsTheHostsVhostVsock) {
  // /dev/null stands for a device that opens, a missing path for a host without one.
  const std::string present = "/dev/null", absent = "/nonexistent/vhost-vsock";
  EXPECT_TRUE(*runtime::microvm::UseVsock("auto", present));
  EXPECT_FALSE(*runtime::microvm::UseVsock("auto", absent));
  EXPECT_FALSE(*runtime::microvm::UseVsock("serial", present));
  EXPECT_TRUE(*runtime::microvm::UseVsock("vsock", present));
  auto missing = runtime::microvm::UseVsock("vsock", absent);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, Code::kFailedPrecondition);
  EXPECT_NE(missing.error().message.find("no vhost-vsock"), std::string::npos);
  EXPECT_FALSE(runtime::microvm::UseVsock("fast", present).ok());
}

// A memory template's copy loads its template's VM only in the same shape, with the
// same channel to its agent.
TEST(VmMemory, ACopyLoadsOnlyInItsTemplatesShape) {
  runtime::microvm::SavedShape shape;
  shape.cpus = 2;
  shape.memory_mb = 512;
  shape.tap = true;
  using runtime::microvm::WhyNotLoad;
  EXPECT_EQ(WhyNotLoad(shape, 2, 512, true, false), "");
  EXPECT_NE(WhyNotLoad(shape, 1, 512, true, false).find("not its template's (2, 512)"), std::string::npos);
  EXPECT_NE(WhyNotLoad(shape, 2, 1024, true, false), "");
  EXPECT_EQ(WhyNotLoad(shape, 2, 512, false, false), "its template had a network");
  EXPECT_NE(WhyNotLoad(shape, 2, 512, true, true).find("disks"), std::string::npos);
  EXPECT_EQ(WhyNotLoad(MakeError(Code::kInternal, "not whole"), 2, 512, true, false), "not whole");
}

class MicrovmFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    char t[] = "/tmp/sbx-microvm-test-XXXXXX";
    ASSERT_NE(::mkdtemp(t), nullptr);
    dir_ = t;
  }
  void TearDown() override { (void)fs::RemoveTree(dir_); }
  uint64_t SizeOf(const std::string& p) {
    struct stat st;
    return ::stat(p.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
  }
  std::string dir_;
};

TEST_F(MicrovmFiles, ADiskFileGrowsOnlyWhenAskedAndSmaller) {
  const std::string disk = dir_ + "/disk.ext4";
  ASSERT_TRUE(fs::WriteFileAtomic(disk, std::string(4096, 'x'), 0600).ok());
  EXPECT_TRUE(*runtime::microvm::GrowDiskFile(disk, 1 << 20, /*now=*/false));
  EXPECT_EQ(SizeOf(disk), 4096u);
  EXPECT_TRUE(*runtime::microvm::GrowDiskFile(disk, 1 << 20, /*now=*/true));
  EXPECT_EQ(SizeOf(disk), 1u << 20);
  EXPECT_FALSE(*runtime::microvm::GrowDiskFile(disk, 1 << 20, true));
  EXPECT_FALSE(*runtime::microvm::GrowDiskFile(disk, 4096, true));  // never shrunk
  EXPECT_EQ(SizeOf(disk), 1u << 20);
  EXPECT_FALSE(runtime::microvm::GrowDiskFile(dir_ + "/none", 1 << 20, true).ok());
}

TEST_F(MicrovmFiles, ACopyOfATemplatesDiskIsRefusedWhenSmallerThanIt) {
  const std::string from = dir_ + "/template.ext4", to = dir_ + "/copy.ext4";
  ASSERT_TRUE(fs::WriteFileAtomic(from, "", 0600).ok());
  ASSERT_EQ(::truncate(from.c_str(), 8 << 20), 0);
  auto small = runtime::microvm::CopyTemplateDisk(from, to, 4 << 20, "sb-1");
  ASSERT_FALSE(small.ok());
  EXPECT_EQ(small.error().code, Code::kFailedPrecondition);
  EXPECT_NE(small.error().message.find("(4 MiB) is smaller than its memory template's (8 MiB)"), std::string::npos);
  EXPECT_FALSE(fs::Exists(to));
  ASSERT_TRUE(runtime::microvm::CopyTemplateDisk(from, to, 16 << 20, "sb-1").ok());
  EXPECT_EQ(SizeOf(to), 8u << 20);  // grown at its first start, not here
}

}  // namespace
}  // namespace sbx
