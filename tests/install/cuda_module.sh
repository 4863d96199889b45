#!/bin/sh
# Test 'install-cuda-module' (suite docs): after `meson install` into a scratch DESTDIR, the
# installed sequoia-run finds the installed CUDA module (LIBDIR/sequoia/libsequoia-cuda.so,
# relative to its own directory; docs/cuda.md) when --backend cuda asks for it, and a CPU run
# loads no CUDA library. The installed tree lies outside the build tree, so the build tree's
# module cannot stand in for it.
#
#   cuda_module.sh BUILD_ROOT SOURCE_ROOT HAVE_CUDA
set -eu
build=$1 src=$2 have_cuda=$3

if [ "$have_cuda" != "true" ]; then
    echo "this build has no CUDA backend: no module to install"
    exit 77
fi
scratch=$(mktemp -d "${TMPDIR:-/tmp}/sq-install-cuda.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
root=$scratch/root
meson install -C "$build" --destdir "$root" --no-rebuild --quiet

module=$(find "$root" -name libsequoia-cuda.so)
[ -n "$module" ] || { echo "FAIL: no libsequoia-cuda.so installed under $root"; exit 1; }
case "$module" in
    */sequoia/libsequoia-cuda.so) ;;
    *) echo "FAIL: the module is not in LIBDIR/sequoia/: $module"; exit 1 ;;
esac
run=$(find "$root" -path '*/bin/sequoia-run')
plan=$(find "$root" -path '*/bin/sequoia-plan')
echo "installed: $run, $module"

"$plan" -a "$src/data/pipeline/curves.json" -c greedy@T0 -n 1 -d 1 -o "$scratch/root.json" \
    > "$scratch/plan.txt"
echo "10 20 30 40" > "$scratch/prompt.txt"
set -- --draft "$src/data/models/draft" --target "$src/data/models/target" \
    --plan "$scratch/root.json" --prompt "$scratch/prompt.txt" -n 2 --no-baseline --mode greedy \
    -q -o "$scratch/out.txt"
status=0
env -u SQ_CUDA_MODULE LD_DEBUG=files "$run" "$@" 2> "$scratch/cpu.log" \
    || { echo "FAIL: the installed sequoia-run on the CPU: exit $?"; status=1; }
if grep -E 'libcudart|libcublas|libsequoia-cuda' "$scratch/cpu.log" | grep -q 'file='; then
    echo "FAIL: a CPU run loaded a CUDA library:"
    grep -E 'libcudart|libcublas|libsequoia-cuda' "$scratch/cpu.log" | head -5
    status=1
fi
rc=0
env -u SQ_CUDA_MODULE LD_DEBUG=files "$run" "$@" --backend cuda 2> "$scratch/cuda.log" || rc=$?
# the installed module is the one loaded (then: 0 on a GPU, 64 without a device)
loaded=$(sed -n 's/.*file=\([^ ]*libsequoia-cuda\.so\) .*/\1/p' "$scratch/cuda.log" | head -1)
if [ -z "$loaded" ] || [ "$(realpath "$loaded")" != "$(realpath "$module")" ]; then
    echo "FAIL: --backend cuda (exit $rc) did not load $module but '${loaded:-nothing}':"
    grep -v '^ *[0-9]*:' "$scratch/cuda.log" | head -5
    status=1
fi
case $rc in
    0|64) echo "--backend cuda with the installed module: exit $rc" ;;
    *) echo "FAIL: --backend cuda with the installed module: exit $rc"; status=1 ;;
esac
exit $status
