#!/bin/bash
# Builds the libFuzzer harnesses (fuzz/) with clang and runs each on its corpus: a fixed
# seed and a fixed number of runs (reproducible: CI explores the same inputs every time),
# capped at SECONDS_EACH. Usage: scripts/fuzz.sh [SECONDS_EACH] (default 30)
# [random] (a random seed and no run limit: for hunting, not for CI). New inputs go to a
# scratch corpus; fuzz/corpus/<name> (in the repository) is only read. A crash fails.
source "$(dirname "$0")/lib.sh"
SECONDS_EACH="${1:-30}"
MODE="${2:-fixed}"
declare -A RUNS=([http]=800000 [json]=300000 [agent_frames]=600000 [tar]=400000 [multipart]=400000)
FUZZ_BUILD="$ROOT/build-fuzz"
log "building the fuzz harnesses (build-fuzz/, clang)"
cmake -S "$ROOT/fuzz" -B "$FUZZ_BUILD" -DCMAKE_CXX_COMPILER=clang++-14 -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$FUZZ_BUILD" -j"$(nproc)" >/dev/null
scratch=$(mktemp -d /var/tmp/sbx-fuzz-XXXXXX)
trap 'rm -rf "$scratch"' EXIT
rc=0
for name in http json agent_frames tar multipart; do
  mkdir -p "$scratch/$name"
  log "fuzzing $name for ${SECONDS_EACH} s"
  set +e
  limits=(-max_total_time="$SECONDS_EACH")
  [ "$MODE" = random ] || limits+=(-seed=1 -runs="${RUNS[$name]}")
  "$FUZZ_BUILD/fuzz_$name" "${limits[@]}" -print_final_stats=1 -max_len=65536 \
    -artifact_prefix="$scratch/$name-" "$scratch/$name" "$ROOT/fuzz/corpus/$name" >"$scratch/$name.log" 2>&1
  r=$?
  set -e
  execs=$(awk '/stat::number_of_executed_units/{print $2}' "$scratch/$name.log")
  echo "fuzz_$name: ${execs:-?} executions, $(ls "$scratch/$name" | wc -l) new corpus inputs, exit $r"
  if [ "$r" != 0 ]; then
    tail -40 "$scratch/$name.log" >&2
    ls "$scratch"/"$name"-* 2>/dev/null | while read -r f; do echo "crash input: $(base64 -w0 "$f")" >&2; done
    rc=1
  fi
done
exit $rc
