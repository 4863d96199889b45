#!/usr/bin/env bash
# One prepared run on a lent GPU machine (issue 7). Finishes in under 8 minutes; every step has
# its own timeout, a failed step is recorded and the next one still runs. Everything it makes
# goes under $OUT (default ./build-gpu-out): logs, TAP, profiles, SVGs, bench JSON, summary.txt.
#
#   OUT=/some/dir tests/gpu/run.sh            from the repository root
#
# Steps:
#   1. machine: nvidia-smi, nvcc --version
#   2. build:   meson setup + ninja into a fresh directory with -Dcuda=enabled (or, when
#               SQ_GPU_BUILD names an existing build directory, e.g. one carried from a machine
#               that has the build dependencies, that one)
#   3. tests:   the 'cuda' suite (CUDA vs CPU logits, tree vs path, offload, greedy exactness,
#               sampling kernels), then 'kernels' and 'model'
#   4. profile: a Llama-2-7B-shaped model (examples/configs/llama2-7b.json, random weights),
#               F16, 1..1024 new tokens over a 512-token prefix, on the device and in offload mode
#   5. targets: bench-cuda measures a device-to-device copy, one-token decode and a 128-node
#               verify in the same process, and prints the two H200 targets:
#                 decode weight streaming >= 70% of the copy bandwidth; verify-128 <= 1.5x verify-1
#               (the same ratio is also read off the on-device profile)
#   6. specdec: bench-run (speculative vs target-only decoding over DP plans) on the CUDA backend
set -u

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$ROOT/build-gpu-out}   # build-*/ is git-ignored
mkdir -p "$OUT"
SUMMARY=$OUT/summary.txt
START=$(date +%s)
DEADLINE=$((START + ${SQ_GPU_BUDGET_S:-470}))   # every step ends before this
: > "$SUMMARY"
export PATH="$PATH:/usr/local/cuda/bin"

note() { echo "$*" | tee -a "$SUMMARY"; }

# step NAME TIMEOUT_S COMMAND...: runs with a timeout, log in $OUT/NAME.log, status in summary
FAILED=0
step() {
    local name=$1 limit=$2
    shift 2
    local t0 rc left
    t0=$(date +%s)
    left=$((DEADLINE - t0))
    if [ "$left" -lt 15 ]; then
        note "step $name: SKIPPED (the run's time budget is spent)"
        FAILED=$((FAILED + 1))
        return 124
    fi
    [ "$limit" -gt "$left" ] && limit=$left
    echo "== $name (limit ${limit}s): $*" | tee -a "$OUT/steps.log"
    timeout --kill-after=10 "$limit" "$@" > "$OUT/$name.log" 2>&1
    rc=$?
    local dt=$(( $(date +%s) - t0 ))
    if [ "$rc" -eq 0 ]; then
        note "step $name: ok (${dt}s)"
    elif [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
        note "step $name: TIMEOUT after ${dt}s (limit ${limit}s)"
        FAILED=$((FAILED + 1))
    else
        note "step $name: FAILED with exit $rc (${dt}s); see $name.log"
        FAILED=$((FAILED + 1))
    fi
    tail -n 5 "$OUT/$name.log" | sed 's/^/    /'
    return "$rc"
}

note "tests/gpu/run.sh at $(date -u +%FT%TZ) on $(hostname)"

# ---- 1. machine ---------------------------------------------------------------------------
step machine 30 bash -c 'nvidia-smi; nvidia-smi -q | head -60; nvcc --version; nproc; free -g'

# ---- 2. build -----------------------------------------------------------------------------
BUILD=${SQ_GPU_BUILD:-}
if [ -n "$BUILD" ] && [ -d "$BUILD" ]; then
    note "build: using the existing build directory $BUILD"
    if command -v ninja > /dev/null; then
        step build 300 ninja -C "$BUILD"
    fi
else
    BUILD=$ROOT/build-gpu-run
    rm -rf "$BUILD"
    step build 300 bash -c "cd '$ROOT' && meson setup '$BUILD' -Dcuda=enabled \
        && ninja -C '$BUILD'"
fi
PROFILE_BIN=$BUILD/profiler/sequoia-profile
if [ ! -x "$PROFILE_BIN" ]; then
    note "no sequoia-profile in $BUILD: nothing else can run"
    note "summary: $FAILED failed step(s), $(( $(date +%s) - START ))s"
    exit 1
fi

# ---- 3. tests -------------------------------------------------------------------------------
run_tap() {   # suite binary -> TAP in $OUT, counts in the summary
    local suite=$1 bin=$BUILD/tests/test-$1
    [ -x "$bin" ] || { note "tests $suite: no binary $bin"; FAILED=$((FAILED + 1)); return; }
    step "test-$suite" 240 "$bin" --tap="$OUT/test-$suite.tap" -j1
    local ok skip bad
    ok=$(grep -c '^ok' "$OUT/test-$suite.tap" 2> /dev/null)
    skip=$(grep -c '^ok.*# SKIP' "$OUT/test-$suite.tap" 2> /dev/null)
    bad=$(grep -c '^not ok' "$OUT/test-$suite.tap" 2> /dev/null)
    note "tests $suite: $(( ${ok:-0} - ${skip:-0} )) passed, ${bad:-0} failed, ${skip:-0} skipped"
}
run_tap cuda
run_tap kernels
run_tap model

# ---- 4. profiles ----------------------------------------------------------------------------
CFG=$ROOT/examples/configs/llama2-7b.json
step profile-device 150 "$PROFILE_BIN" --model "$CFG" --backend cuda --dtype f16 \
    --max-tokens 1024 --prefix 512 --quiet \
    -o "$OUT/profile-7b-f16.json" --svg "$OUT/profile-7b-f16.svg"
step profile-offload 150 "$PROFILE_BIN" --model "$CFG" --backend cuda --dtype f16 --offload \
    --max-tokens 1024 --prefix 512 --warmup 1 --repeat 3 --no-refine --quiet \
    -o "$OUT/profile-7b-f16-offload.json" --svg "$OUT/profile-7b-f16-offload.svg"

# ---- 5. the two H200 targets ----------------------------------------------------------------
BENCH=$BUILD/tests/bench/bench-cuda
if [ -x "$BENCH" ]; then
    step targets 120 "$BENCH" --config "$CFG" --dtype f16 --prefix 512 --tree 128 --reps 20 \
        --json "$OUT/targets.json"
    grep -E 'copy|decode 1 token|verify 128' "$OUT/targets.log" | tee -a "$SUMMARY"
else
    note "targets: no bench-cuda in $BUILD"
    FAILED=$((FAILED + 1))
fi
# verify-128 / verify-1 read off the on-device profile too (interpolated between its points)
if [ -f "$OUT/profile-7b-f16.json" ] && command -v python3 > /dev/null; then
    python3 - "$OUT/profile-7b-f16.json" <<'PY' | tee -a "$SUMMARY"
import json, sys
p = json.load(open(sys.argv[1]))
pts = {q["tokens"]: q["median_ms"] for q in p["points"]}
def at(n):
    ks = sorted(pts)
    if n in pts: return pts[n]
    lo = max(k for k in ks if k < n); hi = min(k for k in ks if k > n)
    return pts[lo] + (pts[hi] - pts[lo]) * (n - lo) / (hi - lo)
r = at(128) / at(1)
print("profile %s: 1 token %.3f ms, 128 tokens %.3f ms, ratio %.2f (target <= 1.5: %s)"
      % (p.get("device", "?"), at(1), at(128), r, "met" if r <= 1.5 else "NOT met"))
print("profile points: " + ", ".join("%d:%.2f" % (k, pts[k]) for k in sorted(pts)))
PY
fi

# ---- 6. speculative decoding ----------------------------------------------------------------
if [ -x "$BUILD/tests/bench/bench-run" ]; then
    step specdec 90 env SQ_BENCH_BACKEND=cuda "$BUILD/tests/bench/bench-run" 64
else
    note "specdec: no bench-run in $BUILD"
    FAILED=$((FAILED + 1))
fi

note "summary: $FAILED failed step(s), $(( $(date +%s) - START ))s in all; files in $OUT"
[ "$FAILED" -eq 0 ]
