#!/usr/bin/env bash
# Builds the bundle that tests/gpu/run.sh runs on a lent GPU machine (issue 15). That machine
# has no network, no package manager and none of our build dependencies (no pkg-config, cJSON,
# GSL, HDF5, criterion or OpenBLAS dev packages), so everything it runs is built here: the tools,
# the CUDA test suites and the benchmarks, plus every shared library they load except the C
# library itself (glibc and its loader), the NVIDIA driver (libcuda) and cuBLAS (hundreds of MB:
# run.sh finds the machine's own). One tarball under .gpu-bundle/ (git-ignored), carried with
# the working tree to the GPU machine.
#
#   tests/gpu/bundle.sh [BUILD_DIR]     from the repository root
#
# BUILD_DIR (default build-gpu-bundle) is configured with -Dcuda=enabled -Dsm_arch=90 (the
# H100/H200 architecture; PTX of it too) when it does not exist yet, then built with ninja here.
# SQ_BUNDLE_ARCH=80,90 builds for A100 as well. SQ_BUNDLE_OUT overrides the output path (the
# CUDA-emulation rehearsal, tests/cuda-emu/rehearse.sh, bundles its emulated build that way).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
BUILD=${1:-build-gpu-bundle}
OUTFILE=${SQ_BUNDLE_OUT:-$ROOT/.gpu-bundle/sequoia-gpu-bundle.tar.gz}
ARCH=${SQ_BUNDLE_ARCH:-90}
export PATH="$PATH:/usr/local/cuda/bin"

if [ ! -f "$BUILD/build.ninja" ]; then
    meson setup "$BUILD" -Dcuda=enabled -Dsm_arch="$ARCH" -Dbuildtype=release -Db_ndebug=false
fi

# What run.sh runs: path in the build [=name in bin/] (SQ_BUNDLE_MAP replaces the list: the
# emulation rehearsal maps its emulated programs onto the same names)
if [ -n "${SQ_BUNDLE_MAP:-}" ]; then
    # shellcheck disable=SC2206
    BINS=($SQ_BUNDLE_MAP)
else
    BINS=(
        profiler/sequoia-profile
        runtime/sequoia-run
        planner/sequoia-plan
        tests/test-cuda
        tests/test-cli-cuda
        tests/test-kernels
        tests/test-model
        tests/bench/bench-cuda
        tests/bench/bench-run
        tests/bench/bench-forward
    )
fi
# The CUDA backend is a module the programs load at run time (docs/cuda.md); it travels as
# lib/libsequoia-cuda.so, which run.sh names in SQ_CUDA_MODULE (SQ_BUNDLE_MODULE: its path in
# the build; the rehearsal bundles the emulated one)
MODULE=${SQ_BUNDLE_MODULE:-runtime/libsequoia-cuda.so}
TARGETS=("$MODULE")
for b in "${BINS[@]}"; do TARGETS+=("${b%%=*}"); done
ninja -C "$BUILD" "${TARGETS[@]}"

STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
mkdir -p "$STAGE/bin" "$STAGE/lib"
for b in "${BINS[@]}"; do
    path=${b%%=*}
    name=$(basename "$path")
    [ "$b" != "$path" ] && name=${b#*=}
    [ -x "$BUILD/$path" ] || { echo "bundle.sh: $BUILD/$path is missing" >&2; exit 1; }
    cp "$BUILD/$path" "$STAGE/bin/$name"
    strip --strip-debug "$STAGE/bin/$name" 2> /dev/null || true
done

cp "$BUILD/$MODULE" "$STAGE/lib/libsequoia-cuda.so"

# Shared libraries: everything ldd resolves, except glibc (libc, libm, libdl, libpthread, librt,
# libresolv, libutil and the loader, which must match the machine's own libc), the driver's
# libcuda and cuBLAS/cuBLASLt (the machine has them; run.sh finds them).
skip_re='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libresolv\.so|libutil\.so|libcuda\.so|libcublas\.so|libcublasLt\.so)'
needs_cublas=""
for b in "$STAGE"/bin/* "$STAGE/lib/libsequoia-cuda.so"; do
    while read -r name _ path _; do
        [ -n "${name:-}" ] || continue
        if [[ "$name" =~ ^libcublas ]]; then
            needs_cublas="$needs_cublas $name"
        fi
        [[ "$name" =~ $skip_re ]] && continue
        if [ "${path:-}" = "not" ] || [ ! -f "${path:-}" ]; then
            echo "bundle.sh: $(basename "$b"): $name not found here" >&2
            exit 1
        fi
        [ -f "$STAGE/lib/$name" ] || cp -L "$path" "$STAGE/lib/$name"
    done < <(ldd "$b" | sed -n 's/^\s*\(\S*\) => \(\S*\).*/\1 x \2 y/p')
done
strip --strip-unneeded "$STAGE"/lib/*.so* 2> /dev/null || true

{
    echo "sequoia GPU bundle"
    echo "commit: $(git rev-parse HEAD)$(git diff --quiet HEAD -- . ':!.gpu-bundle' || echo ' (with uncommitted changes)')"
    echo "built: $(date -u +%FT%TZ) on $(hostname) ($(uname -m))"
    echo "build dir: $BUILD, sm_arch $ARCH, $(nvcc --version 2> /dev/null | tail -1 || echo 'no nvcc')"
    echo "glibc here: $(ldd --version | head -1)"
    echo "needs from the machine: libc, libcuda (driver),$(echo "$needs_cublas" | tr ' ' '\n' | sort -u | tr '\n' ' ')"
    echo "binaries:"
    (cd "$STAGE" && sha256sum bin/*)
    echo "libraries:"
    (cd "$STAGE" && sha256sum lib/*)
} > "$STAGE/MANIFEST.txt"
echo "$needs_cublas" | tr ' ' '\n' | sort -u | sed '/^$/d' > "$STAGE/NEEDS_CUBLAS"

mkdir -p "$(dirname "$OUTFILE")"
tmp="$OUTFILE.tmp.$$"
tar -C "$STAGE" -czf "$tmp" MANIFEST.txt NEEDS_CUBLAS bin lib
mv -f "$tmp" "$OUTFILE"
size=$(stat -c %s "$OUTFILE")
echo "bundle.sh: $OUTFILE: $((size / 1024 / 1024)) MiB, $(ls "$STAGE/bin" | wc -l) programs, $(ls "$STAGE/lib" | wc -l) libraries"
if [ "$size" -gt $((50 * 1024 * 1024)) ]; then
    echo "bundle.sh: over 50 MiB: the carried tree must stay under 64 MiB" >&2
    exit 1
fi
