#!/bin/bash
# README command two: every test. Unit tests (no root), then integration and security
# tests against real sbxd daemons that the tests start on private ports and data dirs.
source "$(dirname "$0")/lib.sh"
need_root
install_packages
build
build_ts_sdk
install_test_clients
# CRIU for the hibernate tests (built once from Debian's source, then cached).
SBX_CRIU=$(bash "$ROOT/scripts/build-criu.sh")
export SBX_CRIU
# gVisor's runsc for the gVisor wall's tests (from Debian's backports, then cached).
SBX_RUNSC=$(bash "$ROOT/scripts/install-runsc.sh")
export SBX_RUNSC
# QEMU and the guest kernel for the microVM wall's tests (Debian's, then cached).
SBX_MICROVM_KERNEL=$(bash "$ROOT/scripts/install-microvm.sh")
export SBX_MICROVM_KERNEL
# Python's own tests (Debian's libpython3.11-testsuite), run inside a sandbox and on the
# host by tests/integration/test_root_inside.py.
SBX_PY_TESTSUITE_DEB=$(fetch_deb libpython3.11-testsuite)
export SBX_PY_TESTSUITE_DEB

# The fresh-host path: a machine that never ran sbx has no cache folder and no data dir.
# CRIU's build runs once more into a cache folder that does not exist yet (the cached
# build above does not exercise it), and test_fresh_host.py starts a daemon on a data dir
# whose parents do not exist.
log "fresh-host rehearsal: CRIU's build into a cache folder that does not exist yet"
FRESH=$(mktemp -d /var/tmp/sbx-fresh.XXXXXX)
SBX_CACHE_DIR="$FRESH/cache/sbx" bash "$ROOT/scripts/build-criu.sh" >/dev/null
"$FRESH/cache/sbx/criu/criu" --version >/dev/null
rm -rf "$FRESH"

bash "$ROOT/scripts/check_threads.sh"
# clang-tidy with the checks in .clang-tidy over the project's sources (about 4 minutes).
bash "$ROOT/scripts/lint.sh" "$BUILD"

log "unit tests"
(cd "$BUILD" && ctest --output-on-failure -j2)

# libFuzzer harnesses of the parsers (HTTP, JSON bodies, agent frames), 30 s each.
bash "$ROOT/scripts/fuzz.sh" "${SBX_FUZZ_SECONDS:-30}"

# cgroup v2 hosts: sbxd's smoke suite (tests/vm/) in a Debian guest booted under QEMU
# with cgroup_no_v1=all, since this host may mount v1 (about 50 s once the kernel and the
# guest's root filesystem are cached in $SBX_CACHE_DIR/vm; about 2 minutes more cold).
bash "$ROOT/scripts/vm/cgroup-v2-smoke.sh" "$BUILD"

# The gVisor leg's files: each operation of the API once (files, processes, the code
# interpreter, templates and forks, lifecycle, users, disks, ports, the network,
# hibernate) and the hostile probes.
# Tests of the container wall's own mechanics are left out there by their mark
# (container_wall, which says what gVisor does instead).
GVISOR_LEG=(
  tests/integration/test_lifecycle.py tests/integration/test_files.py tests/integration/test_processes.py
  tests/integration/test_code.py tests/integration/test_templates.py tests/integration/test_exec_stdin.py
  tests/integration/test_users.py tests/integration/test_disks.py tests/integration/test_ports.py
  tests/security/test_code_walls.py tests/security/test_user_walls.py tests/security/test_hostile.py
  tests/security/test_resources.py tests/security/test_host_traces.py tests/security/test_network_walls.py
  tests/integration/test_network.py tests/integration/test_network_v6.py tests/integration/test_network_dns.py
  tests/integration/test_hibernate.py
)
# The microVM leg's files (under TCG here): each operation the wall has (exec, files,
# processes, users, ports, lifecycle, the network) and the hostile probes. Tests that need
# what the wall lacks are left out by their mark (not_on("microvm", why)).
MICROVM_LEG=(
  tests/integration/test_lifecycle.py tests/integration/test_files.py tests/integration/test_processes.py
  tests/integration/test_exec_stdin.py tests/integration/test_users.py tests/integration/test_ports.py
  tests/integration/test_hibernate.py tests/integration/test_disks.py tests/security/test_hostile.py
)
log "integration and security tests"
export SBX_BUILD_DIR="$BUILD"
export PYTHONPATH="$ROOT/sdk/python${PYTHONPATH:+:$PYTHONPATH}"
# Debian's python3 and pytest (the PATH may hold another python).
set +e
/usr/bin/python3 -m pytest -p no:cacheprovider -q -ra "$ROOT/tests/integration" "$ROOT/tests/security" "$@"
rc=$?
# The gVisor wall's leg: a reduced set of the same tests with every daemon's sandboxes on
# gVisor (about 7 minutes; docs/design.md says which files and why the rest are left out).
if [ -z "$*" ]; then
  log "integration and security tests again, on the gVisor wall (a reduced set)"
  SBX_TEST_ISOLATION=gvisor /usr/bin/python3 -m pytest -p no:cacheprovider -q -ra \
    "${GVISOR_LEG[@]/#/$ROOT/}"
  rc_gv=$?
  [ "$rc" -eq 0 ] && rc=$rc_gv
  # The microVM wall's leg: a reduced set with every daemon's sandboxes in VMs under TCG
  # (about 5 minutes).
  log "integration and security tests again, on the microVM wall (a reduced set, TCG)"
  SBX_TEST_ISOLATION=microvm /usr/bin/python3 -m pytest -p no:cacheprovider -q -ra \
    "${MICROVM_LEG[@]/#/$ROOT/}"
  rc_vm=$?
  [ "$rc" -eq 0 ] && rc=$rc_vm
fi
set -e
# pytest's "no tests ran" is a failure here too.
exit $rc
