# Shared by setup.sh and test.sh. Sourced, not run.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="$ROOT/build"
# Slow artefacts (the debootstrap root filesystem of the default image) are cached here.
export SBX_CACHE_DIR="${SBX_CACHE_DIR:-/var/cache/sbx}"
# Every script makes the folders it writes to (a fresh host has none of them).
mkdir -p "$SBX_CACHE_DIR"

PACKAGES=(
  build-essential cmake pkg-config
  libboost-dev libboost-system-dev nlohmann-json3-dev libsqlite3-dev libseccomp-dev libssl-dev
  libcli11-dev libgtest-dev googletest zlib1g-dev
  python3 python3-pytest
  debootstrap busybox-static tar iproute2 procps btrfs-progs
  nftables libnftables-dev
  bubblewrap crun
  clang-14 libclang-rt-14-dev clang-tidy-14
)

log() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }

need_root() {
  if [ "$(id -u)" != 0 ]; then
    echo "sbx: run as root (sbxd creates namespaces and cgroups)" >&2
    exit 1
  fi
}

# Installs those of the Debian packages "$@" that are missing; APT_OPTS (an array) adds
# options to apt-get install.
install_missing() {
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  [ "${#missing[@]}" -eq 0 ] && return 0
  log "installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ${APT_OPTS[@]+"${APT_OPTS[@]}"} "${missing[@]}" >/dev/null
}

install_packages() {
  local extra=()
  # Node.js for the TypeScript SDK: Debian's (18 in bookworm) unless one is installed.
  if ! command -v node >/dev/null 2>&1; then extra=(nodejs npm); fi
  install_missing "${PACKAGES[@]}" ${extra[@]+"${extra[@]}"}
}

# Downloads Debian's package NAME (not installed) into $SBX_CACHE_DIR/debs once; prints
# the .deb's path. For tests that need a package's files inside a sandbox.
fetch_deb() {
  local dir="$SBX_CACHE_DIR/debs" f
  mkdir -p "$dir"
  f=$(ls "$dir/$1"_*.deb 2>/dev/null | head -1 || true)
  if [ -z "$f" ]; then
    # apt's download user cannot write a root-only folder: download as root, quietly.
    (cd "$dir" && { apt-get download -qq "$1" 2>/dev/null || { apt-get update -qq && apt-get download -qq "$1" 2>/dev/null; }; })
    f=$(ls "$dir/$1"_*.deb | head -1)
  fi
  echo "$f"
}

build() {
  log "building (build/)"
  cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build "$BUILD" -j"$(nproc)"
}

build_ts_sdk() {
  log "building the TypeScript SDK (sdk/ts)"
  (cd "$ROOT/sdk/ts" && npm ci --no-audit --no-fund --loglevel=error && npm run --silent build)
}

# The third-party clients the integration tests drive (tests/node/package.json, pinned by
# its lock file): the Model Context Protocol's TypeScript client and E2B's SDK. E2B's
# needs Node.js 20.18.1 or newer (Debian 12 has 18): when the machine's is older, the npm
# registry's `node` package, cached in $SBX_CACHE_DIR/node, goes first on the PATH.
install_test_clients() {
  if ! node -e 'const [a, b] = process.versions.node.split(".").map(Number); process.exit(a >= 22 || (a === 20 && b >= 18) ? 0 : 1)' 2>/dev/null; then
    local dir="$SBX_CACHE_DIR/node"
    if [ ! -x "$dir/node_modules/.bin/node" ]; then
      log "installing Node.js 20 from the npm registry into $dir"
      mkdir -p "$dir"
      npm install --prefix "$dir" --no-audit --no-fund --loglevel=error node@20.19.5 >/dev/null
    fi
    export PATH="$dir/node_modules/.bin:$PATH"
  fi
  log "installing the test clients (tests/node, with Node.js $(node --version))"
  (cd "$ROOT/tests/node" && npm ci --no-audit --no-fund --loglevel=error)
}
