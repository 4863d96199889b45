#!/bin/sh
# One-step set-up on a fresh Debian 12 machine: installs the missing Debian packages, configures
# meson into build/ and compiles. Idempotent, and fast when nothing changed.
#   ./setup.sh                 # release-ish build (debugoptimized) in build/
#   SANITIZE=1 ./setup.sh      # AddressSanitizer + UndefinedBehaviorSanitizer build in build-asan/
set -eu
cd "$(dirname "$0")"

PACKAGES="meson ninja-build pkg-config gcc g++ libc6-dev
libgsl-dev libcjson-dev libhdf5-dev libdeflate-dev libcriterion-dev libpcre2-dev libutf8proc-dev
python3 python3-numpy python3-h5py
libopenblas-dev
librsvg2-bin"

missing=""
for p in $PACKAGES; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing="$missing $p"
    fi
done
if [ -n "$missing" ]; then
    echo "setup.sh: installing Debian packages:$missing" >&2
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
    $SUDO apt-get update -qq
    # shellcheck disable=SC2086
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing
fi

if [ "${SANITIZE:-0}" = "1" ]; then
    dir=build-asan
    opts="-Db_sanitize=address,undefined -Db_lundef=false -Dbuildtype=debug"
else
    dir=build
    opts=""
fi
if [ ! -f "$dir/build.ninja" ]; then
    # shellcheck disable=SC2086
    meson setup "$dir" $opts >/dev/null
fi
ninja -C "$dir" >/dev/null
