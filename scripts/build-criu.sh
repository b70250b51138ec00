#!/bin/bash
# Builds CRIU (checkpoint/restore, for `pause` with mode hibernate) from Debian trixie's
# source package: bookworm's CRIU 3.17 cannot read newer kernels' vDSO layout. The build
# is cached in $SBX_CACHE_DIR/criu and reused; prints the binary's path. Run as root.
source "$(dirname "$0")/lib.sh"
need_root
OUT="$SBX_CACHE_DIR/criu"
# Our fixes to CRIU's source (scripts/criu-*.patch); a cached build made with other
# patches is built again.
PATCHES=("$ROOT"/scripts/criu-*.patch)
STAMP=$(cat "${PATCHES[@]}" | sha256sum | cut -c1-16)
if [ -x "$OUT/criu" ] && [ "$(cat "$OUT/stamp" 2>/dev/null)" = "$STAMP" ] && "$OUT/criu" --version >/dev/null 2>&1; then
  echo "$OUT/criu"
  exit 0
fi
CRIU_PACKAGES=(
  libbsd-dev libcap-dev libgnutls28-dev libnet1-dev libnftables-dev libnl-3-dev
  libprotobuf-c-dev libprotobuf-dev protobuf-c-compiler protobuf-compiler python3-protobuf
  uuid-dev pkgconf iptables patch
)
missing=()
for p in "${CRIU_PACKAGES[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
# trixie as a source-only suite: apt never installs binaries from it.
SRC=/etc/apt/sources.list.d/sbx-trixie-src.sources
if [ ! -f "$SRC" ]; then
  MIRROR=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
  [ -n "$MIRROR" ] || MIRROR=$(awk '/^deb /{print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
  [ -n "$MIRROR" ] || MIRROR=http://deb.debian.org/debian
  cat > "$SRC" <<SRCEOF
Types: deb-src
URIs: $MIRROR
Suites: trixie
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRCEOF
fi
log "building CRIU from Debian trixie's source (cached in $OUT)"
apt-get update -qq
if [ "${#missing[@]}" -gt 0 ]; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
mkdir -p "$SBX_CACHE_DIR" "$OUT"
WORK=$(mktemp -d "$SBX_CACHE_DIR/criu-build.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
# Only the upstream tarball is needed.
apt-get source --download-only -qq criu/trixie >/dev/null 2>&1 || true
TARBALL=$(ls criu_*.orig.tar.* 2>/dev/null | head -1)
[ -n "$TARBALL" ] || { echo "sbx: could not download CRIU's source from trixie" >&2; exit 1; }
tar xf "$TARBALL"
DIR=$(find . -maxdepth 1 -type d -name 'criu-*' | head -1)
for p in "${PATCHES[@]}"; do patch -s -d "$DIR" -p1 < "$p"; done
make -s -C "$DIR" -j"$(nproc)" criu >"$WORK/build.log" 2>&1 || { tail -40 "$WORK/build.log" >&2; exit 1; }
install -m 0755 "$DIR/criu/criu" "$OUT/criu.new"
mv "$OUT/criu.new" "$OUT/criu"
echo "$STAMP" > "$OUT/stamp"
echo "$OUT/criu"
