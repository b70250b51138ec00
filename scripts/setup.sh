#!/bin/bash
# README command one: install what is needed, build, start sbxd with its default image,
# and run a short demo. Idempotent: run it again at any time.
source "$(dirname "$0")/lib.sh"
need_root
install_packages
build
# The CLI's shell completion and manual page, generated from its own command tree.
mkdir -p /usr/share/bash-completion/completions /usr/local/share/zsh/site-functions /usr/local/share/man/man1
"$BUILD/sbx" completion bash > /usr/share/bash-completion/completions/sbx
"$BUILD/sbx" completion zsh > /usr/local/share/zsh/site-functions/_sbx
"$BUILD/sbx" man > /usr/local/share/man/man1/sbx.1
# CRIU, for pause mode "hibernate" (built once from Debian's source, then cached).
CRIU=$(bash "$ROOT/scripts/build-criu.sh")
# gVisor's runsc, for isolation "gvisor" (from Debian's backports, then cached).
RUNSC=$(bash "$ROOT/scripts/install-runsc.sh")
# QEMU and the guest kernel, for isolation "microvm" (Debian's, then cached).
MICROVM_KERNEL=$(bash "$ROOT/scripts/install-microvm.sh")

DATA_DIR="${SBX_DATA_DIR:-/var/lib/sbx}"
PORT="${SBX_PORT:-7070}"
export SBX_URL="http://127.0.0.1:$PORT"
SBX="$BUILD/sbx --data-dir $DATA_DIR"
mkdir -p /run/sbx
# The store (sbxd --store-mb): sandboxes' files on a preallocated btrfs image with a quota
# per sandbox. Made on a new data dir (a quarter of the free space, 1-64 GiB; SBX_STORE_MB
# sets it, 0 turns it off), reused when it exists; a data dir that already holds sandboxes
# without one goes on without it.
mkdir -p "$DATA_DIR"
if [ -f "$DATA_DIR/store.img" ]; then
  STORE_MB=$(( $(stat -c %s "$DATA_DIR/store.img") / 1048576 ))
elif [ -n "${SBX_STORE_MB:-}" ]; then
  STORE_MB=$SBX_STORE_MB
elif [ -z "$(ls -A "$DATA_DIR/sandboxes" 2>/dev/null)" ] && [ -z "$(ls -A "$DATA_DIR/layers" 2>/dev/null)" ]; then
  FREE_MB=$(( $(stat -f -c '%a * %S' "$DATA_DIR") / 1048576 ))
  STORE_MB=$(( FREE_MB / 4 ))
  [ "$STORE_MB" -gt 65536 ] && STORE_MB=65536
  [ "$STORE_MB" -lt 1024 ] && STORE_MB=0 && log "less than 4 GiB free under $DATA_DIR: no store, so disk_mb is not enforced"
else
  STORE_MB=0
  log "$DATA_DIR holds sandboxes made without a store: going on without one (disk_mb is not enforced)"
fi
SBXD_CMD="$BUILD/sbxd --listen 127.0.0.1:$PORT --data-dir $DATA_DIR --store-mb $STORE_MB --criu $CRIU --runsc $RUNSC --microvm-kernel $MICROVM_KERNEL"
# A daemon this script started earlier is restarted on the new build (its sandboxes keep
# running and are re-adopted); a daemon started some other way is left alone.
# The pid file is trusted only while that pid still runs the command line this script
# gave it (a stale file's pid may belong to another process by now).
OLD_PID=$(cat /run/sbx/sbxd.pid 2>/dev/null || true)
if [ -n "$OLD_PID" ] && [ "$(tr '\0' ' ' </proc/"$OLD_PID"/cmdline 2>/dev/null)" = "$SBXD_CMD " ]; then
  log "restarting the sbxd this script started (pid $OLD_PID)"
  kill "$OLD_PID"
  for _ in $(seq 100); do kill -0 "$OLD_PID" 2>/dev/null || break; sleep 0.1; done
fi
if ! $SBX health >/dev/null 2>&1; then
  log "starting sbxd on 127.0.0.1:$PORT (state in $DATA_DIR/sbxd.db, store $STORE_MB MB, log in /var/log/sbxd.log)"
  # shellcheck disable=SC2086 # the command is words
  nohup $SBXD_CMD >>/var/log/sbxd.log 2>&1 &
  echo $! > /run/sbx/sbxd.pid
  # Up to a minute: the first sbxd after a boot tests CRIU (20 s where a dump hangs).
  for _ in $(seq 600); do $SBX health >/dev/null 2>&1 && break; sleep 0.1; done
  $SBX health
fi
if ! $SBX image ls | grep -q '^default '; then
  log "building the default image (Debian bookworm with python3, cached in $SBX_CACHE_DIR)"
  $SBX image build default
fi

log "demo: create, exec, files, the code interpreter, a background process, pause/resume, snapshot, create from it, fork, the gVisor wall and its hibernate, a microVM, its memory as a template and a fork, hibernate, rm, serverless calls on a disk, usage"
# `sbx exec` sends piped input as the command's stdin: none of this script's (it may come
# through a pipe) goes to the demo's commands.
exec </dev/null
set -x
ID=$($SBX create --type small --ttl 600 --name demo-$$)
$SBX exec "$ID" -- python3 -c 'print(1+1)'
$SBX exec "$ID" -- sh -c 'echo "hello from $(hostname) as $(id -un) (uid $(id -u)) in $PWD, caps $(grep CapEff /proc/self/status | cut -f2)"'
$SBX exec -u root "$ID" -- sh -c 'echo "and as $(id -un) (uid $(id -u)), caps $(grep CapEff /proc/self/status | cut -f2)"'
$SBX exec "$ID" -- sh -c 'echo "state kept in the template" > /home/user/note'
echo "print('run from a copied file')" > "/tmp/sbx-demo-$$.py"
$SBX cp "/tmp/sbx-demo-$$.py" "$ID:/home/user/demo.py"
rm -f "/tmp/sbx-demo-$$.py"
$SBX exec "$ID" -- python3 /home/user/demo.py
$SBX run "$ID" -c 'import math; radius = 2'        # the code interpreter: state lasts between calls
$SBX run "$ID" -c 'round(math.pi * radius ** 2, 3)'
PID=$($SBX spawn "$ID" -- sh -c 'for i in 1 2 3; do echo "tick $i"; sleep 0.2; done')
$SBX logs -f "$ID" "$PID"
$SBX pause "$ID"                      # frozen: not billed, memory kept
$SBX resume "$ID"
COUNTER=$($SBX spawn "$ID" -- sh -c 'n=0; while true; do n=$((n+1)); echo "counter at $n"; sleep 0.2; done')
sleep 0.5
if $SBX health | grep -q 'hibernate ([^)]*container'; then  # the walls that can hibernate
  $SBX pause "$ID" --mode hibernate   # checkpointed to disk (CRIU), the background process too: memory freed
  $SBX resume "$ID"                   # restored: the same process goes on counting, sbxd follows it again
else
  : "hibernate is off: CRIU cannot checkpoint on this kernel (sbxd's log says why)"
fi
sleep 1
$SBX logs "$ID" "$COUNTER" | tail -n 2   # its output went on, with no gap
$SBX ps "$ID"
$SBX snapshot "$ID" demo-template-$$
FROM=$($SBX create --from demo-template-$$ --ttl 600)
$SBX exec "$FROM" -- cat /home/user/note
FORK=$($SBX fork "$ID")
$SBX exec "$FORK" -- cat /home/user/note
# The same template on the gVisor wall: the code's system calls meet a user-space kernel.
GV=$($SBX create --from demo-template-$$ --isolation gvisor --ttl 600)
$SBX exec "$GV" -- sh -c 'cat /home/user/note; dmesg | head -n 1; echo "kernel as the sandbox sees it: $(uname -r)"'
# It hibernates too (runsc checkpoint: gVisor's kernel and its processes saved to disk).
$SBX exec "$GV" -- sh -c 'echo "kept in memory only" > /dev/shm/kept'
$SBX pause "$GV" --mode hibernate && $SBX resume "$GV"
$SBX exec "$GV" -- cat /dev/shm/kept
# The microVM wall: the default image on a kernel of its own (QEMU; TCG where this host's
# KVM cannot run a guest, as health's microvm_accel says).
VM=$($SBX create --isolation microvm --ttl 600)
$SBX exec "$VM" -- sh -c 'echo "kernel as the microVM sees it: $(uname -r), host: '"$(uname -r)"'"; python3 -c "print(6*7)"'
# Its memory as a template: a copy starts with the source's processes running (here a
# ticker and a code context), under its own name, without a boot; then the copy
# hibernates and comes back.
$SBX exec "$VM" -- sh -c '(n=0; while true; do n=$((n+1)); echo $n > /tmp/ticks; sleep 1; done) >/dev/null 2>&1 &'
$SBX run "$VM" -c 'answer = 6 * 7'
$SBX exec "$VM" -- sh -c 'until [ -s /tmp/ticks ]; do sleep 0.2; done; echo "the source ticks: $(cat /tmp/ticks)"'
$SBX snapshot "$VM" demo-memory-$$ --memory
VM2=$($SBX create --from demo-memory-$$ --isolation microvm --ttl 600)
$SBX exec "$VM2" -- sh -c 'echo "$(hostname), a copy of a memory template: its ticker is at $(cat /tmp/ticks)"'
$SBX run "$VM2" -c 'print("its code context is warm: answer =", answer)'
VM3=$($SBX fork "$VM" --memory)        # the same from the running VM, in one call
$SBX exec "$VM3" -- sh -c 'echo "$(hostname), a fork with memory: its ticker is at $(cat /tmp/ticks)"'
$SBX pause "$VM2" --mode hibernate && $SBX resume "$VM2"
$SBX exec "$VM2" -- sh -c 'sleep 1; echo "hibernated and resumed: its ticker goes on, at $(cat /tmp/ticks)"'
# Networking: an allow list; a name outside it gets no answer from the sandbox's resolver
# (which refuses it without asking anyone: no packet leaves this machine).
NET=$($SBX create --ttl 600 --allow deb.debian.org)
$SBX network "$NET"
$SBX exec "$NET" -- sh -c 'getent hosts example.com || echo "example.com: refused (not in the allow list)"'
$SBX ls
$SBX rm "$ID" "$FROM" "$FORK" "$GV" "$VM" "$VM2" "$VM3" "$NET"
$SBX template rm demo-template-$$ demo-memory-$$
DISK=$($SBX disk create --size-mb 256)
$SBX disk exec "$DISK" -- 'echo "written by call one in $SBX_SANDBOX_ID" > notes.txt'
$SBX disk exec "$DISK" -- 'cat notes.txt; echo "read by call two in $SBX_SANDBOX_ID"'
$SBX disk rm "$DISK"
$SBX usage
set +x
log "sbxd is running (pid $(cat /run/sbx/sbxd.pid 2>/dev/null || echo '?')); try: $BUILD/sbx create"
