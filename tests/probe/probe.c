// sbx-probe: run inside a sandbox, reports what it sees as one JSON object on stdout.
// Each "*_errno" is the errno of an attempt that a sandbox must refuse (0: it succeeded).
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <linux/perf_event.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mount.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

static void str(const char* k, const char* v, int last) {
  printf("\"%s\":\"", k);
  for (const char* p = v; *p; ++p) {
    if (*p == '"' || *p == '\\') printf("\\%c", *p);
    else if (*p == '\n') printf("\\n");
    else if (*p == '\t') printf("\\t");
    else if ((unsigned char)*p < 0x20) printf("\\u%04x", *p);
    else putchar(*p);
  }
  printf("\"%s", last ? "" : ",");
}
static void num(const char* k, long v) { printf("\"%s\":%ld,", k, v); }

static void file(const char* k, const char* path) {
  char buf[16384] = "";
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    ssize_t n = read(fd, buf, sizeof buf - 1);
    if (n > 0) buf[n] = 0;
    close(fd);
  }
  str(k, buf, 0);
}

static int err(long rc) { return rc < 0 ? errno : 0; }

// Runs fn in a child; returns the signal that ended it (0 if it exited).
static int child_signal(void (*fn)(void)) {
  pid_t p = fork();
  if (p == 0) {
    fn();
    _exit(0);
  }
  int st = 0;
  if (p < 0 || waitpid(p, &st, 0) < 0) return -1;
  return WIFSIGNALED(st) ? WTERMSIG(st) : 0;
}
// getpid through the x32 ABI (the syscall number with bit 30 set).
static void x32_getpid(void) { syscall(39 | 0x40000000); }
// getpid through the i386 entry point (int 0x80, eax 20).
static void int80_getpid(void) {
  long ret = 20;
  __asm__ volatile("int $0x80" : "+a"(ret) : : "memory");
}

int main(int argc, char** argv) {
  // `sbx-probe int80`: only the i386 entry test, so that the tests can run it on the host
  // too (a kernel without that entry kills the caller with SIGSEGV, filter or not).
  if (argc > 1 && strcmp(argv[1], "int80") == 0) {
    printf("%d\n", child_signal(int80_getpid));
    return 0;
  }
  printf("{");
  num("uid", getuid());
  num("gid", getgid());
  num("pid", getpid());
  file("uid_map", "/proc/self/uid_map");
  file("status", "/proc/self/status");
  file("mounts", "/proc/self/mounts");
  char host[256] = "";
  gethostname(host, sizeof host);
  str("hostname", host, 0);

  int visible = 0;
  DIR* d = opendir("/proc");
  struct dirent* e;
  while (d && (e = readdir(d)))
    if (e->d_name[0] >= '0' && e->d_name[0] <= '9') ++visible;
  if (d) closedir(d);
  num("visible_pids", visible);

  char fds[512] = "";
  d = opendir("/proc/self/fd");
  while (d && (e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    if (atoi(e->d_name) == dirfd(d)) continue;
    strncat(fds, e->d_name, sizeof fds - strlen(fds) - 2);
    strcat(fds, " ");
  }
  if (d) closedir(d);
  str("fds", fds, 0);

  mkdir("/tmp/probe-mnt", 0700);
  num("mount_errno", err(mount("none", "/tmp/probe-mnt", "tmpfs", 0, NULL)));
  num("unshare_user_errno", err(unshare(CLONE_NEWUSER)));
  num("unshare_mount_errno", err(unshare(CLONE_NEWNS)));
  num("unshare_net_errno", err(unshare(CLONE_NEWNET)));
  long params[32] = {0};
  num("io_uring_errno", err(syscall(425 /*io_uring_setup*/, 1, params)));
  long cl[11] = {0};
  num("clone3_errno", err(syscall(435 /*clone3*/, cl, sizeof cl)));
  num("bpf_errno", err(syscall(SYS_bpf, 0, NULL, 0)));
  struct perf_event_attr pa;
  memset(&pa, 0, sizeof pa);
  pa.size = sizeof pa;
  pa.type = PERF_TYPE_SOFTWARE;
  pa.config = PERF_COUNT_SW_CPU_CLOCK;
  num("perf_event_open_errno", err(syscall(SYS_perf_event_open, &pa, 0, -1, -1, 0)));
  num("userfaultfd_errno", err(syscall(SYS_userfaultfd, 0)));
  num("keyctl_errno", err(syscall(SYS_keyctl, 0 /*GET_KEYRING_ID*/, -3, 0)));
  num("af_alg_errno", err(socket(38, SOCK_SEQPACKET, 0)));
  num("af_packet_errno", err(socket(17, SOCK_RAW, 0)));
  num("af_vsock_errno", err(socket(40, SOCK_STREAM, 0)));
  num("personality_errno", err(personality(ADDR_NO_RANDOMIZE)));
  num("mknod_errno", err(mknod("/tmp/probe-null", S_IFCHR | 0666, makedev(1, 3))));
  num("ptrace_init_errno", err(ptrace(PTRACE_ATTACH, 1, 0, 0)));
  num("open_init_mem_errno", err(open("/proc/1/mem", O_RDONLY)));
  num("sysrq_errno", err(open("/proc/sysrq-trigger", O_WRONLY)));
  num("core_pattern_errno", err(open("/proc/sys/kernel/core_pattern", O_WRONLY)));
  num("sys_write_errno", err(open("/sys/kernel/uevent_helper", O_WRONLY)));
  // Root inside holds the sandbox's capabilities (no NET_RAW, MKNOD, SYS_ADMIN, SYS_TIME,
  // SYS_MODULE, SYS_PTRACE): none of these may work.
  num("raw_inet_errno", err(socket(AF_INET, SOCK_RAW, 1 /*ICMP*/)));
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  num("clock_settime_errno", err(clock_settime(CLOCK_REALTIME, &now)));
  num("finit_module_errno", err(syscall(SYS_finit_module, 0, "", 0)));
  num("ambient_sys_admin_errno", err(prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, 21 /*SYS_ADMIN*/, 0, 0)));
  num("chown_run_sbx_errno", err(chown("/run/sbx", 0, 0)));
  struct stat st;
  num("kcore_size", stat("/proc/kcore", &st) == 0 ? (long)st.st_size : -1);
  num("sethostname_errno", err(sethostname("x", 1)));
  num("kexec_errno", err(syscall(SYS_kexec_load, 0, 0, NULL, 0)));
  // The runc-style escape: overwrite the binary of a process sbxd started (the agent).
  num("write_init_exe_errno", err(open("/proc/1/exe", O_WRONLY)));
  num("write_self_exe_errno", err(open("/proc/self/exe", O_WRONLY)));
  num("x32_signal", child_signal(x32_getpid));
  num("int80_signal", child_signal(int80_getpid));
  str("end", "", 1);
  printf("}\n");
  return 0;
}
