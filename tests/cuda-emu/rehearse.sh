#!/usr/bin/env bash
# Rehearses the one-shot GPU run end to end on a machine without a GPU (issue 15): the CUDA
# programs of the bundle are their emulated builds (tests/cuda-emu), nvidia-smi is a stub, and
# tests/gpu/run.sh runs from a copy of the tree as the GPU machine gets it (tracked and
# untracked-but-not-ignored files plus the carried .gpu-bundle/, no build folder), with a small
# model shape so that the emulation finishes in minutes. It then checks what comes back: exactly
# summary.txt and gpu-results.tar.gz in $OUT (at most 8 files of at most 16 MiB), a summary that
# has every section, and a tarball that holds the logs, TAP files, profiles and bench JSON.
#
#   tests/cuda-emu/rehearse.sh [BUILD_DIR]      from the repository root (default build)
#
# BUILD_DIR must have the emulated programs (-Demulate_cuda=true, the default).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
BUILD=${1:-build}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/sq-rehearse.XXXXXX")
TREE=$WORK/tree
OUT=$WORK/out
mkdir -p "$TREE" "$OUT" "$WORK/stub"

# 1. the bundle, with the emulated CUDA programs under the names run.sh runs
SQ_BUNDLE_MAP="tests/cuda-emu/sequoia-profile-emu=sequoia-profile tests/cuda-emu/sequoia-run-emu=sequoia-run
 planner/sequoia-plan tests/cuda-emu/test-emu-cuda=test-cuda tests/test-cli-cuda
 tests/test-kernels tests/test-model tests/cuda-emu/bench-cuda-emu=bench-cuda
 tests/cuda-emu/bench-run-emu=bench-run tests/bench/bench-forward" \
SQ_BUNDLE_MODULE=tests/cuda-emu/libsequoia-cuda-emu.so \
SQ_BUNDLE_OUT=$TREE/.gpu-bundle/sequoia-gpu-bundle.tar.gz \
    tests/gpu/bundle.sh "$BUILD"

# 2. the tree as the GPU machine receives it
git ls-files -co --exclude-standard -z | tar --null -T - -cf - | tar -C "$TREE" -xf -
if [ -n "$(find "$TREE" -maxdepth 1 -name "build*")" ]; then
    echo "rehearse.sh: a build folder would travel with the tree" >&2
    exit 1
fi

# 3. a stand-in nvidia-smi, and the run
cat > "$WORK/stub/nvidia-smi" <<'EOF'
#!/bin/sh
# rehearsal stand-in (tests/cuda-emu/rehearse.sh): no GPU here
case "$1" in
--query-gpu=*) echo "CUDA emulator (rehearsal), 4096 MiB, none, 0 MHz" ;;
*) echo "nvidia-smi stand-in: the rehearsal runs the CUDA emulation (tests/cuda-emu)" ;;
esac
EOF
chmod +x "$WORK/stub/nvidia-smi"
echo "rehearse.sh: running tests/gpu/run.sh from $TREE"
set +e
(cd "$TREE" && PATH="$WORK/stub:$PATH" OUT="$OUT" ASAN_OPTIONS=detect_leaks=0 \
    SQ_CUDA_EMU_SCHEDULE=random:1 \
    SQ_GPU_CONFIG=tests/cuda-emu/rehearse-config.json SQ_GPU_PREFIX=16 SQ_GPU_MAX_TOKENS=16 \
    SQ_GPU_TREE=16 SQ_GPU_REPS=3 SQ_GPU_TIME_SCALE=${SQ_REHEARSE_TIME_SCALE:-8} SQ_GPU_COPY_MB=4 SQ_GPU_BENCH_RUN_NEW=4 \
    SQ_GPU_BATCHES=1,2 SQ_GPU_BATCH_TOKENS=1,4 \
    SQ_GPU_BUDGET_S=${SQ_REHEARSE_BUDGET_S:-1500} bash tests/gpu/run.sh) > "$WORK/run.log" 2>&1
rc=$?
set -e
echo "rehearse.sh: run.sh exited $rc (log $WORK/run.log)"

# 4. what comes back
fail=0
check() { if ! eval "$2"; then echo "rehearse.sh: FAILED: $1"; fail=1; else echo "rehearse.sh: ok: $1"; fi; }
n=$(find "$OUT" -type f | wc -l)
check "exactly 2 files in \$OUT (got $n)" '[ "$n" -eq 2 ]'
check "summary.txt and gpu-results.tar.gz" '[ -s "$OUT/summary.txt" ] && [ -s "$OUT/gpu-results.tar.gz" ]'
big=$(find "$OUT" -type f -size +16M | wc -l)
check "no file over 16 MiB" '[ "$big" -eq 0 ]'
for section in '== machine' 'Mem:' '== bundle' '== tests' 'tests cuda:' 'tests cli-cuda:' \
               '== bench-cuda' 'copy bandwidth' 'decode 1 token' 'verify 16 tokens' \
               '== sequoia-profile' 'profile-f16 (' 'profile-f16-offload (' \
               'profile-f16-batch (' '== sequoia-run --backend cuda --batch' \
               '== bench-run' 'H200 targets' 'decode_target_met' 'verify_target_met' \
               'failed step'; do
    check "summary has '$section'" 'grep -qF -- "$section" "$OUT/summary.txt"'
done
listing=$(tar -tzf "$OUT/gpu-results.tar.gz")
for f in summary.txt test-cuda.tap test-cuda.log bench-cuda-f16.json bench-cuda-bf16.json \
         bench-cuda-f16-offload.json profile-f16.json profile-f16.svg profile-bf16.json \
         profile-f16-offload.json profile-f16-batch.json bench-run.log bundle-MANIFEST.txt; do
    check "tarball has results/$f" 'grep -qx "results/$f" <<< "$listing"'
done
echo
echo "---- summary.txt ----"
cat "$OUT/summary.txt"
echo "---- end ----"
echo "rehearse.sh: $( [ $fail -eq 0 ] && echo 'the run produced the tarball and a complete summary' || echo 'FAILED' ) (files in $WORK)"
exit $fail
