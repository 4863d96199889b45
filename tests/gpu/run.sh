#!/usr/bin/env bash
# One prepared run on a lent GPU machine (issues 7 and 15). That machine has no network and
# none of our build dependencies, so nothing is built there: tests/gpu/bundle.sh builds the
# programs here and packs them with the shared libraries they load into
# .gpu-bundle/sequoia-gpu-bundle.tar.gz, carried with the working tree. This script unpacks it,
# finds the machine's cuBLAS, runs the CUDA suites, the benchmarks and the profile sweeps, and
# leaves exactly two files in $OUT:
#   summary.txt           readable on its own: machine, every figure, every pass/fail, the two
#                         H200 targets met or not
#   gpu-results.tar.gz    every log, TAP file, profile, SVG and bench JSON, and summary.txt
# It never runs meson or ninja on a carried build folder (its absolute paths would make ninja
# rebuild, and the machine cannot). Every step has a time limit and the whole run ends within
# SQ_GPU_BUDGET_S seconds (default 330, under 6 minutes on an H200); a failed step is recorded
# and the next one still runs.
#
#   OUT=/some/dir tests/gpu/run.sh [BUNDLE.tar.gz]          from the repository root
#
# Steps: machine (free -g, nvidia-smi first), cuBLAS lookup, tests (test-cuda, test-cli-cuda,
# test-kernels), bench-cuda (f16 and bf16 on the device, f16 offload: copy bandwidth, one-token
# decode, 128-node verify), sequoia-profile --backend cuda sweeps (--no-refine --repeat 5; f16,
# bf16, f16 offload), the batched profile (--batch 1..64, f16, issue 18), bench-run
# (speculative decoding on the CUDA backend), sequoia-run --batch 4 --validate (greedy and
# stochastic, the shipped pair).
#
# Environment (the CUDA-emulation rehearsal, tests/cuda-emu/rehearse.sh, shrinks the work):
#   SQ_GPU_CONFIG       model shape (default examples/configs/llama2-7b.json)
#   SQ_GPU_PREFIX       committed prefix before each measurement (default 512)
#   SQ_GPU_MAX_TOKENS   largest profiled token count (default 1024)
#   SQ_GPU_TREE         verify tree size of bench-cuda (default 128)
#   SQ_GPU_REPS         bench-cuda repetitions (default 20)
#   SQ_GPU_COPY_MB      bench-cuda copy size (default 2048)
#   SQ_GPU_BENCH_RUN_NEW  tokens per bench-run prompt (default 64)
#   SQ_GPU_BATCHES      batch sizes of the batched profile (default 1,2,4,8,16,32,64)
#   SQ_GPU_BATCH_TOKENS token counts of the batched profile (default 1,2,4,8,16,32,64,128)
#   SQ_GPU_BUDGET_S     whole-run budget in seconds (default 330)
#   SQ_GPU_TIME_SCALE   multiplies every step's time limit (default 1; the emulation is slow)
set -u

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$ROOT/build-gpu-out}
BUNDLE=${1:-${SQ_GPU_BUNDLE:-$ROOT/.gpu-bundle/sequoia-gpu-bundle.tar.gz}}
CFG=${SQ_GPU_CONFIG:-$ROOT/examples/configs/llama2-7b.json}
PREFIX=${SQ_GPU_PREFIX:-512}
MAXTOK=${SQ_GPU_MAX_TOKENS:-1024}
TREE=${SQ_GPU_TREE:-128}
REPS=${SQ_GPU_REPS:-20}
COPY_MB=${SQ_GPU_COPY_MB:-2048}
RUN_NEW=${SQ_GPU_BENCH_RUN_NEW:-64}
START=$(date +%s)
DEADLINE=$((START + ${SQ_GPU_BUDGET_S:-330}))

mkdir -p "$OUT"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/sq-gpu.XXXXXX")
RES=$WORK/results
mkdir -p "$RES"
SUMMARY=$RES/summary.txt
: > "$SUMMARY"

note() { echo "$*" | tee -a "$SUMMARY"; }

# Packs the results into $OUT (also on an early exit or a TERM from a timeout around us).
PACKED=0
pack() {
    [ "$PACKED" -eq 1 ] && return
    PACKED=1
    note ""
    note "run: $FAILED failed step(s), $(( $(date +%s) - START ))s in all"
    cp "$SUMMARY" "$OUT/summary.txt"
    tar -C "$WORK" -czf "$OUT/gpu-results.tar.gz.tmp" results \
        && mv -f "$OUT/gpu-results.tar.gz.tmp" "$OUT/gpu-results.tar.gz"
    cp "$SUMMARY" "$OUT/summary.txt"
    rm -rf "$WORK"
}
FAILED=0
trap 'note "run: interrupted"; pack; exit 1' TERM INT
trap pack EXIT

# step NAME LIMIT_S COMMAND...: log in results/NAME.log, status line in the summary
step() {
    local name=$1 limit=$(( $2 * ${SQ_GPU_TIME_SCALE:-1} ))
    shift 2
    local t0 rc left dt
    t0=$(date +%s)
    left=$((DEADLINE - t0))
    if [ "$left" -lt 10 ]; then
        note "step $name: SKIPPED (the run's time budget is spent)"
        FAILED=$((FAILED + 1))
        return 124
    fi
    [ "$limit" -gt "$left" ] && limit=$left
    echo "== $name (limit ${limit}s): $*" >> "$RES/steps.log"
    timeout --kill-after=5 "$limit" "$@" > "$RES/$name.log" 2>&1
    rc=$?
    dt=$(( $(date +%s) - t0 ))
    if [ "$rc" -eq 0 ]; then
        note "step $name: ok (${dt}s)"
    elif [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
        note "step $name: TIMEOUT after ${dt}s (limit ${limit}s)"
        FAILED=$((FAILED + 1))
    else
        note "step $name: FAILED with exit $rc (${dt}s); last lines of $name.log:"
        tail -n 6 "$RES/$name.log" | sed 's/^/    /' | tee -a "$SUMMARY"
        FAILED=$((FAILED + 1))
    fi
    return "$rc"
}

note "tests/gpu/run.sh at $(date -u +%FT%TZ) on $(hostname), $(nproc) CPUs"
note "repository: $(git -C "$ROOT" rev-parse --short HEAD 2> /dev/null || echo '?')"

# ---- 1. machine: memory and GPU first ------------------------------------------------------
note ""
note "== machine"
free -g 2>&1 | tee -a "$SUMMARY"
if command -v nvidia-smi > /dev/null; then
    timeout 30 nvidia-smi 2>&1 | tee -a "$SUMMARY"
    timeout 30 nvidia-smi -q > "$RES/nvidia-smi-q.txt" 2>&1
    note "GPU: $(timeout 30 nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.memory --format=csv,noheader 2>&1 | head -1)"
else
    note "nvidia-smi: not on PATH"
fi

# ---- 2. the bundle and cuBLAS ----------------------------------------------------------------
note ""
note "== bundle"
if [ ! -f "$BUNDLE" ]; then
    note "no bundle at $BUNDLE: build it with tests/gpu/bundle.sh on a machine with the build"
    note "dependencies and carry .gpu-bundle/ (see docs/cuda.md)"
    FAILED=$((FAILED + 1))
    exit 1
fi
B=$WORK/bundle
mkdir -p "$B"
tar -C "$B" -xzf "$BUNDLE" || { note "cannot unpack $BUNDLE"; FAILED=$((FAILED + 1)); exit 1; }
sed -n '1,6p' "$B/MANIFEST.txt" | sed 's/^/    /' | tee -a "$SUMMARY"
cp "$B/MANIFEST.txt" "$RES/bundle-MANIFEST.txt"

# cuBLAS: the sonames the programs need (bundle.sh recorded them), looked up where a machine
# may have them: the dynamic loader's cache, CUDA toolkits, pip wheels of torch (nvidia/*/lib).
find_lib() {
    local name=$1 d sp
    local p
    p=$(ldconfig -p 2> /dev/null | awk -v n="$name" '$1 == n { print $NF; exit }')
    [ -n "$p" ] && [ -f "$p" ] && { dirname "$p"; return 0; }
    for d in /usr/local/cuda/lib64 /usr/local/cuda*/lib64 /usr/local/cuda*/targets/*/lib \
             /usr/lib/x86_64-linux-gnu /usr/lib64 /opt/cuda*/lib64; do
        [ -e "$d/$name" ] && { echo "$d"; return 0; }
    done
    for sp in $(python3 -c 'import site, sys
print("\n".join(site.getsitepackages() + [site.getusersitepackages()] + sys.path))' 2> /dev/null); do
        [ -d "$sp/nvidia" ] || continue
        p=$(find "$sp/nvidia" -maxdepth 4 -name "$name" 2> /dev/null | head -1)
        [ -n "$p" ] && { dirname "$p"; return 0; }
    done
    p=$(timeout 30 find / -xdev \( -path /proc -o -path /sys \) -prune -o -name "$name" -print \
        2> /dev/null | head -1)
    [ -n "$p" ] && { dirname "$p"; return 0; }
    return 1
}
LIBPATH=$B/lib
for so in $(cat "$B/NEEDS_CUBLAS"); do
    if d=$(find_lib "$so"); then
        note "cuBLAS: $so in $d"
        case ":$LIBPATH:" in *":$d:"*) ;; *) LIBPATH=$LIBPATH:$d ;; esac
    else
        note "cuBLAS: $so NOT FOUND on this machine (ldconfig, /usr/local/cuda*, site-packages"
        note "        nvidia/*/lib, find /); the CUDA programs cannot start"
        others=$(timeout 20 find / -xdev -name 'libcublas.so*' 2> /dev/null | head -5 | tr '\n' ' ')
        note "        other cuBLAS builds here: ${others:-none}"
        FAILED=$((FAILED + 1))
    fi
done
export LD_LIBRARY_PATH=$LIBPATH${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# the CUDA backend, loaded by the programs at run time (docs/cuda.md)
export SQ_CUDA_MODULE=$B/lib/libsequoia-cuda.so
BIN=$B/bin
for p in "$BIN"/* "$SQ_CUDA_MODULE"; do
    missing=$(ldd "$p" 2> /dev/null | grep 'not found' | awk '{print $1}' | tr '\n' ' ')
    [ -n "$missing" ] && note "$(basename "$p"): missing libraries: $missing"
done
ldd "$BIN/test-cuda" "$SQ_CUDA_MODULE" > "$RES/ldd-test-cuda.txt" 2>&1

export SQ_SOURCE_ROOT=$ROOT SQ_PROFILE_BIN=$BIN/sequoia-profile SQ_RUN_BIN=$BIN/sequoia-run
export SQ_PLAN_BIN=$BIN/sequoia-plan
export TMPDIR=$WORK

# ---- 3. tests --------------------------------------------------------------------------------
note ""
note "== tests"
run_tap() {   # NAME LIMIT: criterion TAP into results, counts and failures into the summary
    local suite=$1 limit=$2
    step "test-$suite" "$limit" "$BIN/test-$suite" --tap="$RES/test-$suite.tap" -j1 --verbose
    local tap=$RES/test-$suite.tap ok skip bad
    ok=$(grep -c '^ok' "$tap" 2> /dev/null)
    skip=$(grep -c '^ok.*# SKIP' "$tap" 2> /dev/null)
    bad=$(grep -c '^not ok' "$tap" 2> /dev/null)
    note "tests $suite: $(( ${ok:-0} - ${skip:-0} )) passed, ${bad:-0} failed, ${skip:-0} skipped"
    grep '^not ok' "$tap" 2> /dev/null | sed 's/^/    /' | tee -a "$SUMMARY"
    grep -A3 '^not ok' "$tap" 2> /dev/null | grep -v '^not ok' | head -20 | sed 's/^/      /' \
        >> "$SUMMARY"
    grep '^ok.*# SKIP' "$tap" 2> /dev/null | sed 's/^ok - [^#]*# SKIP/    skipped:/' | sort -u \
        | head -5 | tee -a "$SUMMARY"
    if [ "$suite" = cuda ] && [ "${skip:-0}" -gt 0 ]; then
        note "    on a GPU machine no 'cuda' test may skip: counted as a failed step"
        FAILED=$((FAILED + 1))
    fi
}
run_tap cuda 150
grep -h 'near tie' "$RES/test-cuda.log" "$RES/test-cuda.tap" 2> /dev/null | sort -u \
    | sed 's/^/    greedy mismatch reported: /' | tee -a "$SUMMARY"
run_tap cli-cuda 60
run_tap kernels 60

# ---- 4. benchmarks: the two H200 targets -----------------------------------------------------
note ""
note "== bench-cuda (median of $REPS; prefix $PREFIX; $(basename "$CFG"))"
bench() {   # NAME ARGS...
    local name=$1
    shift
    step "$name" 90 "$BIN/bench-cuda" --config "$CFG" --prefix "$PREFIX" --tree "$TREE" \
        --copy-mb "$COPY_MB" --json "$RES/$name.json" "$@"
    grep -E '^(device-to-device|decode|verify)|parameters' "$RES/$name.log" 2> /dev/null \
        | sed 's/^/    /' | tee -a "$SUMMARY"
}
bench bench-cuda-f16 --dtype f16 --reps "$REPS"
bench bench-cuda-bf16 --dtype bf16 --reps "$REPS"
bench bench-cuda-f16-offload --dtype f16 --offload --reps 5

# ---- 5. profile sweeps -------------------------------------------------------------------------
note ""
note "== sequoia-profile --backend cuda (1..$MAXTOK tokens after $PREFIX, --no-refine --repeat 5)"
profile() {   # NAME LIMIT ARGS...
    local name=$1 limit=$2
    shift 2
    step "$name" "$limit" "$BIN/sequoia-profile" --model "$CFG" --backend cuda \
        --max-tokens "$MAXTOK" --prefix "$PREFIX" --no-refine --repeat 5 --quiet \
        -o "$RES/$name.json" --svg "$RES/$name.svg" "$@"
}
profile profile-f16 90 --dtype f16 --warmup 2
profile profile-bf16 90 --dtype bf16 --warmup 2
profile profile-f16-offload 120 --dtype f16 --offload --warmup 1

# ---- 5b. batched forwards (issue 18): b sequences x n tokens, each on its own prefix, the b
# contexts sharing one copy of the weights --------------------------------------------------------
BATCHES=${SQ_GPU_BATCHES:-1,2,4,8,16,32,64}
BTOKENS=${SQ_GPU_BATCH_TOKENS:-1,2,4,8,16,32,64,128}
note ""
note "== sequoia-profile --backend cuda --batch $BATCHES (tokens $BTOKENS after $PREFIX, f16)"
step profile-f16-batch 150 "$BIN/sequoia-profile" --model "$CFG" --backend cuda --dtype f16 \
    --batch "$BATCHES" --tokens "$BTOKENS" --prefix "$PREFIX" --no-refine --repeat 3 --warmup 1 \
    --quiet -o "$RES/profile-f16-batch.json" --svg "$RES/profile-f16-batch.svg"

# ---- 6. speculative decoding on the CUDA backend ----------------------------------------------
note ""
note "== bench-run on the CUDA backend"
step bench-run 60 env SQ_BENCH_BACKEND=cuda "$BIN/bench-run" "$RUN_NEW"
sed -n '/^target:/,$p' "$RES/bench-run.log" 2> /dev/null | head -30 | sed 's/^/    /' \
    | tee -a "$SUMMARY"

# ---- 6b. sequoia-run --batch on the CUDA backend (issue 18): the shipped pair, the ladder's
# batch-1 plan, 4 prompts of different lengths; --validate: greedy output equal to the target's
# and to every sequence's run alone, and the chi-square test drawn inside the batch --------------
note ""
note "== sequoia-run --backend cuda --batch 4 --validate (shipped pair)"
step run-batch-greedy 60 "$BIN/sequoia-run" --backend cuda --draft "$ROOT/data/models/draft" \
    --target "$ROOT/data/models/target" --plan "$ROOT/data/ladder/plans/plan-b1.json" \
    --prompt "$ROOT/data/ladder/prompts.txt" --batch 4 -n 32 --mode greedy --validate \
    -o "$RES/run-batch-greedy.txt" --report "$RES/run-batch-greedy.json" -q
step run-batch-stochastic 90 "$BIN/sequoia-run" --backend cuda --draft "$ROOT/data/models/draft" \
    --target "$ROOT/data/models/target" --plan "$ROOT/data/ladder/plans/plan-b1.json" \
    --prompt "$ROOT/data/ladder/prompts.txt" --batch 4 -n 8 --mode stochastic -t 0.8 \
    --validate --validate-samples 400 --no-baseline -o "$RES/run-batch-stochastic.txt" \
    --report "$RES/run-batch-stochastic.json" -q
grep -hE 'batch 4:|validate:' "$RES/run-batch-greedy.log" "$RES/run-batch-stochastic.log" \
    2> /dev/null | sed 's/^/    /' | tee -a "$SUMMARY"

# ---- 7. figures and targets ---------------------------------------------------------------------
note ""
note "== figures"
if command -v python3 > /dev/null; then
    python3 - "$RES" <<'PY' 2>&1 | tee -a "$SUMMARY"
import json, os, sys
res = sys.argv[1]
def load(name):
    try:
        with open(os.path.join(res, name)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None
for name in ("bench-cuda-f16", "bench-cuda-bf16", "bench-cuda-f16-offload"):
    b = load(name + ".json")
    if not b:
        print("%s: no result" % name)
        continue
    print("%s: %s, %s%s, %.2fB parameters, prefix %d" % (name, b["device"], b["dtype"],
          " offload" if b["offload"] else "", b["params"] / 1e9, b["prefix"]))
    print("  copy bandwidth %.1f GB/s; decode 1 token %.3f ms = %.1f GB/s of weights = %.1f%% of "
          "copy (target >= 70%%: %s)" % (b["copy_gb_per_s"], b["decode_ms"], b["decode_gb_per_s"],
          100 * b["decode_fraction_of_copy"], "MET" if b["decode_target_met"] else "NOT met"))
    print("  verify %d tokens %.3f ms = %.2fx one token (target <= 1.5x: %s)" % (b["tree"],
          b["verify_ms"], b["verify_ratio"], "MET" if b["verify_target_met"] else "NOT met"))
for name in ("profile-f16", "profile-bf16", "profile-f16-offload"):
    p = load(name + ".json")
    if not p:
        print("%s: no result" % name)
        continue
    pts = sorted((q["tokens"], q["median_ms"], q.get("p10_ms", 0), q.get("p90_ms", 0))
                 for q in p["points"])
    print("%s (%s, backend %s):" % (name, p.get("device", "?"), p.get("backend", "?")))
    print("  tokens  median_ms  p10_ms  p90_ms")
    for t, m, lo, hi in pts:
        print("  %6d  %9.3f  %6.3f  %6.3f" % (t, m, lo, hi))
    d = dict((t, m) for t, m, _, _ in pts)
    if 1 in d and 128 in d:
        r = d[128] / d[1]
        print("  128 tokens / 1 token = %.2f (target <= 1.5: %s)" % (r, "MET" if r <= 1.5 else
              "NOT met"))
p = load("profile-f16-batch.json")
if not p:
    print("profile-f16-batch: no result")
else:
    pts = {}
    for q in p["points"]:
        pts.setdefault(q.get("batch", 1), {})[q["tokens"]] = q["median_ms"]
    print("profile-f16-batch (%s): median ms of b sequences x n tokens" % p.get("device", "?"))
    toks = sorted(set(t for row in pts.values() for t in row))
    print("  batch " + "".join("%9d" % t for t in toks) + "   t(b,1)/t(1,1)")
    t11 = pts.get(1, {}).get(1)
    for b in sorted(pts):
        row = pts[b]
        r = row.get(1, float("nan")) / t11 if t11 else float("nan")
        print("  %5d " % b + "".join("%9.3f" % row.get(t, float("nan")) for t in toks) +
              "   %.2f" % r)
PY
else
    note "no python3: the figures are in the bench and profile logs of the tarball"
fi
note ""
note "H200 targets (bench-cuda, f16 on the device):"
if [ -f "$RES/bench-cuda-f16.json" ]; then
    grep -E '"(decode_fraction_of_copy|decode_target_met|verify_ratio|verify_target_met)"' \
        "$RES/bench-cuda-f16.json" | sed 's/^ */    /' | tee -a "$SUMMARY"
else
    note "    not measured (bench-cuda-f16 failed)"
fi
exit $((FAILED > 0))
