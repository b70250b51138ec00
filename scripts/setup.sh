#!/bin/bash
# README command one: install what is needed, build, start sbxd with its default image,
# and run a short demo. Idempotent: run it again at any time.
source "$(dirname "$0")/lib.sh"
need_root
install_packages
build

DATA_DIR="${SBX_DATA_DIR:-/var/lib/sbx}"
PORT="${SBX_PORT:-7070}"
export SBX_URL="http://127.0.0.1:$PORT"
SBX="$BUILD/sbx --data-dir $DATA_DIR"
mkdir -p /run/sbx
# A daemon this script started earlier is restarted on the new build (its sandboxes keep
# running and are re-adopted); a daemon started some other way is left alone.
# The pid file is trusted only while that pid still runs the command line this script
# gave it (a stale file's pid may belong to another process by now).
OLD_PID=$(cat /run/sbx/sbxd.pid 2>/dev/null || true)
if [ -n "$OLD_PID" ] && [ "$(tr '\0' ' ' </proc/"$OLD_PID"/cmdline 2>/dev/null)" = \
     "$BUILD/sbxd --listen 127.0.0.1:$PORT --data-dir $DATA_DIR " ]; then
  log "restarting the sbxd this script started (pid $OLD_PID)"
  kill "$OLD_PID"
  for _ in $(seq 100); do kill -0 "$OLD_PID" 2>/dev/null || break; sleep 0.1; done
fi
if ! $SBX health >/dev/null 2>&1; then
  log "starting sbxd on 127.0.0.1:$PORT (state in $DATA_DIR/sbxd.db, log in /var/log/sbxd.log)"
  nohup "$BUILD/sbxd" --listen "127.0.0.1:$PORT" --data-dir "$DATA_DIR" >>/var/log/sbxd.log 2>&1 &
  echo $! > /run/sbx/sbxd.pid
  for _ in $(seq 100); do $SBX health >/dev/null 2>&1 && break; sleep 0.1; done
  $SBX health
fi
if ! $SBX image ls | grep -q '^default '; then
  log "building the default image (Debian bookworm with python3, cached in $SBX_CACHE_DIR)"
  $SBX image build default
fi

log "demo: create, exec, pause/resume, snapshot, create from it, fork, rm, serverless calls on a disk, usage"
set -x
ID=$($SBX create --type small --ttl 600 --name demo-$$)
$SBX exec "$ID" -- python3 -c 'print(1+1)'
$SBX exec "$ID" -- sh -c 'echo "hello from $(hostname), uid $(id -u), caps $(grep CapEff /proc/self/status | cut -f2)"'
$SBX exec "$ID" -- sh -c 'echo "state kept in the template" > /root/note'
$SBX pause "$ID"                      # frozen: not billed, memory kept
$SBX resume "$ID"
$SBX snapshot "$ID" demo-template-$$
FROM=$($SBX create --from demo-template-$$ --ttl 600)
$SBX exec "$FROM" -- cat /root/note
FORK=$($SBX fork "$ID")
$SBX exec "$FORK" -- cat /root/note
$SBX ls
$SBX rm "$ID" "$FROM" "$FORK"
$SBX template rm demo-template-$$
DISK=$($SBX disk create --size-mb 256)
$SBX disk exec "$DISK" -- 'echo "written by call one in $SBX_SANDBOX_ID" > notes.txt'
$SBX disk exec "$DISK" -- 'cat notes.txt; echo "read by call two in $SBX_SANDBOX_ID"'
$SBX disk rm "$DISK"
$SBX usage
set +x
log "sbxd is running (pid $(cat /run/sbx/sbxd.pid 2>/dev/null || echo '?')); try: $BUILD/sbx create"
