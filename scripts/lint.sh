#!/bin/bash
# clang-tidy (the checks in .clang-tidy) over the project's own sources: the translation
# units of src/, cli/, daemon/ and agent/ in the build's compile_commands.json (generated
# sources and tests are left out). Any finding fails. Two files at a time.
# Usage: scripts/lint.sh [BUILD_DIR [FILE...]]: BUILD_DIR defaults to build/ (configured by
# cmake); FILEs, if given, are linted instead of all, with the same compile commands.
source "$(dirname "$0")/lib.sh"
LINT_BUILD="$(cd "${1:-$BUILD}" && pwd)"
TIDY=clang-tidy-14
if [ ! -f "$LINT_BUILD/compile_commands.json" ]; then
  echo "lint: no compile_commands.json in $LINT_BUILD (configure it with cmake first)" >&2
  exit 1
fi
command -v "$TIDY" >/dev/null || { echo "lint: $TIDY is missing (scripts/setup.sh installs it)" >&2; exit 1; }

shift || true
if [ "$#" -gt 0 ]; then
  files=("$@")
else
  mapfile -t files < <(python3 - "$ROOT" "$LINT_BUILD/compile_commands.json" <<'PY'
import json, os, sys
root, db = sys.argv[1], sys.argv[2]
seen = set()
for entry in json.load(open(db)):
    path = os.path.normpath(os.path.join(entry["directory"], entry["file"]))
    rel = os.path.relpath(path, root)
    if rel.split(os.sep)[0] in ("src", "cli", "daemon", "agent") and rel not in seen:
        seen.add(rel)
        print(path)
PY
  )
fi
log "clang-tidy over ${#files[@]} files (${LINT_BUILD#"$ROOT"/})"

# One file: quiet when clean; its findings, in one piece, when not. The compile commands are
# g++'s: clang is told to ignore g++-only warning flags, and that libstdc++'s <coroutine>
# serves it (Boost 1.74 enables co_await for clang only with libc++'s experimental header).
tidy_one() {
  local out
  if out=$("$TIDY" -p "$LINT_BUILD" --quiet --warnings-as-errors='*' \
      --extra-arg=-Wno-unknown-warning-option --extra-arg=-DBOOST_ASIO_HAS_CO_AWAIT=1 "$1" 2>&1); then
    return 0
  fi
  printf '%s\n' "$out"
  return 1
}
export -f tidy_one
export TIDY LINT_BUILD
start=$SECONDS
if printf '%s\0' "${files[@]}" | xargs -0 -n 1 -P 2 bash -c 'tidy_one "$1"' _; then
  log "lint: clean ($((SECONDS - start)) s)"
else
  log "lint: findings above ($((SECONDS - start)) s)"
  exit 1
fi
