# Shared by setup.sh and test.sh. Sourced, not run.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="$ROOT/build"
# Slow artefacts (the debootstrap root filesystem of the default image) are cached here.
export SBX_CACHE_DIR="${SBX_CACHE_DIR:-/var/cache/sbx}"

PACKAGES=(
  build-essential cmake pkg-config
  libboost-dev libboost-system-dev nlohmann-json3-dev libsqlite3-dev libseccomp-dev libssl-dev
  libcli11-dev libgtest-dev googletest
  python3 python3-pytest
  debootstrap busybox-static tar iproute2 procps
  bubblewrap crun
)

log() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }

need_root() {
  if [ "$(id -u)" != 0 ]; then
    echo "sbx: run as root (sbxd creates namespaces and cgroups)" >&2
    exit 1
  fi
}

install_packages() {
  local missing=()
  for p in "${PACKAGES[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
  done
  # Node.js for the TypeScript SDK: Debian's (18 in bookworm) unless one is installed.
  if ! command -v node >/dev/null 2>&1; then missing+=(nodejs npm); fi
  if [ "${#missing[@]}" -gt 0 ]; then
    log "installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
}

build() {
  log "building (build/)"
  cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build "$BUILD" -j"$(nproc)"
}

# CRIU, for hibernate (checkpoint to disk, restore). Debian 12's 3.17 cannot dump on
# newer kernels (its vDSO parser fails), so 4.1.1 is built from Debian trixie's source
# package, once, into $SBX_CACHE_DIR/criu-4.1.1/criu and reused. sbxd finds it there.
CRIU_VERSION=4.1.1
CRIU_BIN="$SBX_CACHE_DIR/criu-$CRIU_VERSION/criu"
CRIU_BUILD_DEPS=(
  libprotobuf-c-dev protobuf-c-compiler libprotobuf-dev protobuf-compiler python3-protobuf
  libnl-3-dev libnet1-dev libcap-dev libbsd-dev libgnutls28-dev libnftables-dev uuid-dev pkgconf
  iptables xz-utils
)
build_criu() {
  if [ -x "$CRIU_BIN" ] && "$CRIU_BIN" --version >/dev/null 2>&1; then return 0; fi
  log "building CRIU $CRIU_VERSION from Debian trixie's source (once; cached in $SBX_CACHE_DIR)"
  local missing=()
  for p in "${CRIU_BUILD_DEPS[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  local src=/etc/apt/sources.list.d/sbx-trixie-src.sources
  if [ ! -f "$src" ]; then
    local mirror
    mirror=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
    [ -n "$mirror" ] || mirror=$(awk '/^deb /{print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
    [ -n "$mirror" ] || mirror=http://deb.debian.org/debian
    # Source packages only: nothing from trixie is ever installed.
    printf 'Types: deb-src\nURIs: %s\nSuites: trixie\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
      "$mirror" >"$src"
  fi
  apt-get update -qq
  if [ "${#missing[@]}" -gt 0 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
  local work
  work=$(mktemp -d /var/tmp/sbx-criu-XXXXXX)
  (
    cd "$work"
    apt-get source --download-only -qq "criu/trixie" >/dev/null 2>&1 || true
    tar xf criu_"$CRIU_VERSION".orig.tar.xz
    make -s -C criu-"$CRIU_VERSION" -j"$(nproc)" criu >/dev/null
    mkdir -p "$(dirname "$CRIU_BIN")"
    install -m 0755 criu-"$CRIU_VERSION"/criu/criu "$CRIU_BIN.tmp"
    mv "$CRIU_BIN.tmp" "$CRIU_BIN"
  )
  rm -rf "$work"
  "$CRIU_BIN" --version >/dev/null
}

build_ts_sdk() {
  log "building the TypeScript SDK (sdk/ts)"
  (cd "$ROOT/sdk/ts" && npm ci --no-audit --no-fund --loglevel=error && npm run --silent build)
}
