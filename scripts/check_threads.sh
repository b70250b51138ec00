#!/bin/bash
# The lock rules, checked by the compiler: core's and net's files compiled by clang with
# -Wthread-safety as errors (base/sync.h: a field SBX_GUARDED_BY a mutex is touched only
# with it held, a function SBX_REQUIRES it only called so). Syntax only, two at a time.
source "$(dirname "$0")/lib.sh"
log "thread-safety analysis of src/core and src/net (clang)"
cd "$ROOT"
ls src/core/*.cc src/net/*.cc | xargs -P2 -I{} clang++-14 -std=c++20 -fsyntax-only \
  -DBOOST_ASIO_HAS_CO_AWAIT -DBOOST_ASIO_HAS_STD_COROUTINE \
  -Wthread-safety -Werror=thread-safety -Isrc {}
