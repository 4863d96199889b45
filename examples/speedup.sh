#!/usr/bin/env bash
# A measured wall-clock speedup on this CPU, as the planner predicts it (issue 16):
#   corpus from held-out text -> acceptance curves -> latency profiles of both models ->
#   hardware-aware plans (--target-profile/--draft-profile) at T = 0 and T = 0.6 ->
#   for each of PROMPTS held-out prompts, NEW_TOKENS tokens with the plan and then with the
#   target alone, back to back in one sequoia-run process; the same for the best chain and the
#   best k x L tree of at most BUDGET nodes (each the fastest of its family under the same cost
#   model); a sweep of optimal trees by size for the
#   picture -> predicted against measured ms/token and speedup with 95% CIs over prompts (a
#   prediction is tested against the CI from 5 prompts on; with fewer the means are compared).
#
#   examples/speedup.sh [OUT_DIR]                   (default: a fresh folder under $TMPDIR)
#
# Environment: BUILD (default build), TARGET (default data/models/large), DRAFT (default
# data/models/target: the 2.2M model drafts for the 18M one), THREADS (default 2), PROMPTS
# (default 16), NEW_TOKENS (default 256), BUDGET (tree size bound, default 64), DEPTH (default
# 12), PREFIX (KV prefix under the profiles' forwards, default 192: the mean context of the runs,
# 64 prompt bytes + 256 new tokens), SIZES (tree sizes of the sweep, default "1 2 4 8 16 32 64"),
# SWEEP_PROMPTS (prompts per size in the sweep, default 8), REUSE (1: keep the corpus and the
# profiles already in OUT_DIR).
set -euo pipefail
. "$(dirname "$0")/out_dir.sh"   # OUT: the caller's OUT_DIR, else a fresh folder
example_out_dir speedup "${1:-}"
cd "$(dirname "$0")/.."

BUILD=${BUILD:-build}
TARGET=${TARGET:-data/models/large}
DRAFT=${DRAFT:-data/models/target}
THREADS=${THREADS:-2}
PROMPTS=${PROMPTS:-16}
NEW_TOKENS=${NEW_TOKENS:-256}
BUDGET=${BUDGET:-64}
DEPTH=${DEPTH:-12}
PREFIX=${PREFIX:-192}
SIZES=${SIZES:-"1 2 4 8 16 32 64"}
SWEEP_PROMPTS=${SWEEP_PROMPTS:-8}
HELDOUT=data/heldout.txt
export PLAN=$BUILD/planner/sequoia-plan
ACCEPT=$BUILD/planner/accept/sequoia-accept
[ -x "$ACCEPT" ] || ACCEPT=$BUILD/planner/sequoia-accept
PROFILE=$BUILD/profiler/sequoia-profile
RUN=$BUILD/runtime/sequoia-run
PY="python3 examples/speedup.py"

for tool in "$PLAN" "$ACCEPT" "$PROFILE" "$RUN"; do
    if [ ! -x "$tool" ]; then
        echo "speedup.sh: $tool is missing: build first (meson setup $BUILD && ninja -C $BUILD)" >&2
        exit 66
    fi
done
for m in "$TARGET" "$DRAFT"; do
    if [ ! -f "$m/config.json" ]; then
        echo "speedup.sh: $m/config.json is missing (TARGET/DRAFT)" >&2
        exit 66
    fi
done
mkdir -p "$OUT/runs" "$OUT/sweep"
say() { printf '\n== %s\n' "$*" >&2; }
bytes_to_ids() { od -An -v -tu1 | tr -s ' \n' '\n' | sed '/^$/d'; }

{
    echo "command: BUILD=$BUILD TARGET=$TARGET DRAFT=$DRAFT THREADS=$THREADS PROMPTS=$PROMPTS" \
         "NEW_TOKENS=$NEW_TOKENS BUDGET=$BUDGET DEPTH=$DEPTH PREFIX=$PREFIX SIZES=\"$SIZES\" SWEEP_PROMPTS=$SWEEP_PROMPTS" \
         "examples/speedup.sh $OUT"
    echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (modified)')"
    echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores"
    echo "start: $(date -u +%FT%TZ), load average $(cut -d' ' -f1-3 /proc/loadavg)"
} > "$OUT/results.txt"
cat "$OUT/results.txt" >&2

say "1. token files from the held-out text ($HELDOUT)"
# corpus: the first 64 KiB, one sequence per 256 bytes (the models' training window)
head -c 65536 "$HELDOUT" | bytes_to_ids |
    awk '{ printf "%s%s", $1, (NR % 256 == 0 ? "\n\n" : " ") } END { print "" }' > "$OUT/corpus_tokens.txt"
# prompts: 64-byte pieces from later in the held-out text, disjoint from the corpus
for i in $(seq 0 $((PROMPTS - 1))); do
    head -c $((131072 + i * 4096 + 64)) "$HELDOUT" | tail -c 64 | bytes_to_ids | tr '\n' ' ' > "$OUT/prompt$i.txt"
    echo >> "$OUT/prompt$i.txt"
done

say "2. corpus: teacher-forced logits of both models (sequoia-run dump)"
[ "${REUSE:-0}" = 1 ] && [ -f "$OUT/corpus.h5" ] ||
    "$RUN" dump --draft "$DRAFT" --target "$TARGET" --tokens "$OUT/corpus_tokens.txt" \
        -o "$OUT/corpus.h5" --context 256 --threads "$THREADS"

say "3. acceptance curves (sequoia-accept)"
"$ACCEPT" "$OUT/corpus.h5" --mode greedy,stochastic --temperature 0.6 --width 16 --seed 1 \
    -o "$OUT/curves.json" --svg "$OUT/curves.svg"

say "4. latency profiles of both models on this machine (sequoia-profile, $THREADS threads)"
# REUSE=1 keeps the profiles (and the corpus) of an earlier run in OUT_DIR
[ "${REUSE:-0}" = 1 ] && [ -f "$OUT/profile_target.json" ] && [ -f "$OUT/profile_draft.json" ] || {
# --draft: the step section, the cost of a step as decoding runs it (docs/planning.md)
"$PROFILE" --model "$TARGET" --draft "$DRAFT" --max-tokens 128 --prefix "$PREFIX" --warmup 3 --repeat 21 \
    --threads "$THREADS" -o "$OUT/profile_target.json" --svg "$OUT/profile_target.svg" --quiet
"$PROFILE" --model "$DRAFT" --max-tokens 128 --prefix "$PREFIX" --warmup 3 --repeat 21 \
    --threads "$THREADS" -o "$OUT/profile_draft.json" --svg "$OUT/profile_draft.svg" --quiet
}

say "4b. the target's forward against the machine's floor (bench-forward)"
BENCH=$BUILD/tests/bench/bench-forward
if [ -x "$BENCH" ]; then
    "$BENCH" --model "$TARGET" --threads "$THREADS" --context "$PREFIX" --reps 21 > "$OUT/bench_forward.txt"
    cat "$OUT/bench_forward.txt" >&2
else
    echo "speedup.sh: $BENCH is missing (built with -Dtests=true): no roofline table" >&2
fi

say "5. plans: the fastest tree per setting, the best chain and k x L of at most $BUDGET nodes, the sweep"
declare -A MODE=([T0]=greedy [T0.6]=stochastic) TEMP=([T0]=0 [T0.6]=0.6) CURVE=([T0]=greedy@T0 [T0.6]=stochastic@T0.6)
for s in T0 T0.6; do
    "$PLAN" -a "$OUT/curves.json" -c "${CURVE[$s]}" --budget "$BUDGET" --depth "$DEPTH" \
        --target-profile "$OUT/profile_target.json" --draft-profile "$OUT/profile_draft.json" \
        -o "$OUT/plan_$s.json" --svg "$OUT/plan_$s.svg" > "$OUT/plan_$s.txt"
    cat "$OUT/plan_$s.txt" >&2
    $PY baselines "$OUT" "$s" "$BUDGET" | tee -a "$OUT/results.txt" >&2
    for m in $(seq 1 "$BUDGET"); do   # the optimal tree of every size: the picture's line
        "$PLAN" -a "$OUT/curves.json" -c "${CURVE[$s]}" --budget "$m" --depth "$DEPTH" \
            -o "$OUT/sweep/plan_${s}_n$m.json" > /dev/null
    done
done

run() { # tag plan setting prompt [extra args]
    local tag=$1 plan=$2 s=$3 i=$4
    shift 4
    "$RUN" --draft "$DRAFT" --target "$TARGET" --plan "$plan" --prompt "$OUT/prompt$i.txt" \
        -n "$NEW_TOKENS" --mode "${MODE[$s]}" --temperature "${TEMP[$s]}" --seed $((1000 + i)) \
        --threads "$THREADS" -o "$OUT/runs/out_${tag}_$i.txt" --report "$OUT/runs/report_${tag}_$i.json" \
        "$@" 2> "$OUT/runs/run_${tag}_$i.log" ||
        { echo "speedup.sh: sequoia-run failed for $tag prompt $i (see $OUT/runs/run_${tag}_$i.log)" >&2; exit 1; }
}

say "6. runs: $PROMPTS prompts x $NEW_TOKENS tokens: the plan, then the target alone (same process),
then the best chain and the best k x L (their speedups divide by the same prompt's target-alone time)"
for s in T0 T0.6; do
    for i in $(seq 0 $((PROMPTS - 1))); do
        echo "speedup.sh: T = ${s#T}, prompt $((i + 1)) of $PROMPTS" >&2
        run "${s}_optimal" "$OUT/plan_$s.json" "$s" "$i"
        run "${s}_chain" "$OUT/plan_${s}_chain.json" "$s" "$i" --no-baseline
        run "${s}_kxl" "$OUT/plan_${s}_kxl.json" "$s" "$i" --no-baseline
    done
done

say "7. the sweep: optimal trees of sizes $SIZES, $SWEEP_PROMPTS prompts (speculative decoding only)"
for s in T0 T0.6; do
    for i in $(seq 0 $((SWEEP_PROMPTS - 1))); do
        echo "speedup.sh: sweep, T = ${s#T}, prompt $((i + 1)) of $SWEEP_PROMPTS" >&2
        for m in $SIZES; do
            run "${s}_n$m" "$OUT/sweep/plan_${s}_n$m.json" "$s" "$i" --no-baseline
        done
    done
done

say "8. predicted against measured"
echo "end: $(date -u +%FT%TZ), load average $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/results.txt"
$PY report "$OUT" "$PROMPTS" "$SIZES" "$SWEEP_PROMPTS"
echo "all outputs in $OUT/ (results.txt, summary.json, speedup.svg, plans, profiles, runs/)" >&2
