#!/bin/bash
# README command two: every test. Unit tests (no root), then integration and security
# tests against real sbxd daemons that the tests start on private ports and data dirs.
source "$(dirname "$0")/lib.sh"
need_root
install_packages
build
build_ts_sdk
# CRIU for the hibernate tests (built once from Debian's source, then cached).
SBX_CRIU=$(bash "$ROOT/scripts/build-criu.sh")
export SBX_CRIU

log "unit tests"
(cd "$BUILD" && ctest --output-on-failure -j2)

# libFuzzer harnesses of the parsers (HTTP, JSON bodies, agent frames), 30 s each.
bash "$ROOT/scripts/fuzz.sh" "${SBX_FUZZ_SECONDS:-30}"

log "integration and security tests"
export SBX_BUILD_DIR="$BUILD"
export PYTHONPATH="$ROOT/sdk/python${PYTHONPATH:+:$PYTHONPATH}"
# Debian's python3 and pytest (the PATH may hold another python).
set +e
/usr/bin/python3 -m pytest -p no:cacheprovider -q -ra "$ROOT/tests/integration" "$ROOT/tests/security" "$@"
rc=$?
set -e
# pytest's "no tests ran" is a failure here too.
exit $rc
