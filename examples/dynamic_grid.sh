#!/usr/bin/env bash
# The engines' dynamic trees on this machine (issue 26, "Choice for the hardware", "Prediction of
# wall-clock time within 10%", "Static Sequoia trees against the engines' dynamic trees";
# docs/benchmarks.md, "Static trees against dynamic trees"; data/dynamic-grid/README.md):
#   1. the target's profile with its step section (sequoia-profile --draft) and the draft's
#      profile, shipped pair (data/models/draft drafting data/models/target), THREADS threads;
#   2. for greedy (curves CURVES_GREEDY, default data/dynamic/curves-shipped-greedy.json, greedy@T0)
#      and target-only sampling at T = 1 (CURVES_T1, default data/dynamic/curves-shipped-T1.json,
#      topk@T1): the planner's pick
#      (sequoia-plan --engine sglang with both profiles, no --envelope) and its prediction
#      (tokens/step, tokens/s) of every envelope of GRID and of the pick;
#   3. each envelope run by sequoia-run --engine sglang --envelope L,K,N, each prompt of PROMPTS
#      (default the 8 of data/ladder-large/prompts.txt; sequences separated by empty lines) alone (batch 1, what the step section prices), NEW tokens,
#      ROUNDS times, every configuration in turn for each prompt;
#   4. static Sequoia trees of N = 4, 8, 16, 32 nodes (STATIC_N) (sequoia-plan --budget N --depth DEPTH, the
#      mode's curve) run with sequoia-run --plan on the same prompts;
#   5. examples/dynamic_grid.py: tables (OUT/results.md), OUT/summary.json, OUT/static-vs-dynamic.svg.
#      Measured tokens/s is set against sequoia-run's prediction (the plans' hardware.sequoia_run,
#      the static summaries' second table; docs/planning.md, "Two cost models"), the engine's
#      prediction kept beside it.
#
#   examples/dynamic_grid.sh OUT_DIR
#
# Environment: BUILD (default build), THREADS (1), NEW (200), PREFIX (the profiles' KV prefix;
# default 64 + NEW / 2, the runs' mean context: the prompts have 64 tokens), REPEAT (21: profile
# samples per point), DEPTH (9: the static trees' depth bound, the root and L <= 8 levels),
# GRID (the envelopes), PROMPTS, CURVES_GREEDY, CURVES_T1 (paths relative to the caller's
# directory or absolute; the curves should come from other prompts than PROMPTS), STATIC_N
# (4 8 16 32), ROUNDS (2: runs of every prompt, interleaved
# across the configurations), SKIP_PROFILES=1 (keep OUT's profiles), NICE (0). The load
# average and uptime are logged at every stage (OUT/load.log).
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: examples/dynamic_grid.sh OUT_DIR" >&2; exit 64; }
abs() { case $1 in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
OUT=$(abs "$1")
[ -n "${PROMPTS:-}" ] && PROMPTS=$(abs "$PROMPTS")
[ -n "${CURVES_GREEDY:-}" ] && CURVES_GREEDY=$(abs "$CURVES_GREEDY")
[ -n "${CURVES_T1:-}" ] && CURVES_T1=$(abs "$CURVES_T1")
cd "$(dirname "$0")/.."
PROMPTS=${PROMPTS:-data/ladder-large/prompts.txt}
CURVES_GREEDY=${CURVES_GREEDY:-data/dynamic/curves-shipped-greedy.json}
CURVES_T1=${CURVES_T1:-data/dynamic/curves-shipped-T1.json}
BUILD=${BUILD:-build}
THREADS=${THREADS:-1}
NEW=${NEW:-200}
PREFIX=${PREFIX:-$((64 + NEW / 2))}
REPEAT=${REPEAT:-21}
DEPTH=${DEPTH:-9}
NICE=${NICE:-0}
GRID=${GRID:-"1,1,2 1,2,3 2,1,3 2,2,3 3,1,4 2,2,4 3,2,6 3,2,8 4,2,8 2,4,8 7,1,8 5,2,16 4,4,16 6,4,16 4,4,32 6,4,32 8,4,32"}
STATIC_N=${STATIC_N:-"4 8 16 32"}
ROUNDS=${ROUNDS:-2}
D=data/models/draft
T=data/models/target
PLAN=$BUILD/planner/sequoia-plan
PROFILE=$BUILD/profiler/sequoia-profile
RUN=$BUILD/runtime/sequoia-run
N="nice -n $NICE"
for tool in "$PLAN" "$PROFILE" "$RUN"; do
    [ -x "$tool" ] || { echo "dynamic_grid.sh: $tool is missing: build first" >&2; exit 66; }
done
declare -A CURVES=([greedy]=$CURVES_GREEDY [topk]=$CURVES_T1)
declare -A CFG=([greedy]=greedy@T0 [topk]=topk@T1)
mkdir -p "$OUT/runs" "$OUT/plans" "$OUT/prompts"
load() { cut -d' ' -f1-3 /proc/loadavg; }
say() { printf '== %s (load %s)\n' "$*" "$(load)" >&2; echo "$(date -u +%TZ) $* | uptime: $(uptime)" >> "$OUT/load.log"; }
{
    echo "command: BUILD=$BUILD THREADS=$THREADS NEW=$NEW PREFIX=$PREFIX REPEAT=$REPEAT DEPTH=$DEPTH NICE=$NICE examples/dynamic_grid.sh $OUT"
    echo "grid: $GRID"
    echo "prompts: $PROMPTS; curves: $CURVES_GREEDY, $CURVES_T1"
    echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (modified)')"
    echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores, $(grep -o -w 'avx2\|avx512f' /proc/cpuinfo | sort -u | tr '\n' ' ')"
    echo "start: $(date -u +%FT%TZ), uptime: $(uptime)"
} > "$OUT/setup.txt"
lscpu > "$OUT/lscpu.txt" 2>/dev/null || true
# the prompts (blank-line separated token ids), one file each
python3 - "$OUT/prompts" "$PROMPTS" <<'PY'
import sys
text = open(sys.argv[2]).read()
ps = [p.strip() for p in text.split("\n\n") if p.strip()]
for i, p in enumerate(ps):
    open("%s/p%d.txt" % (sys.argv[1], i), "w").write(p + "\n")
print(len(ps))
PY
NP=$(ls "$OUT/prompts" | wc -l)

if [ "${SKIP_PROFILES:-0}" != 1 ]; then
    say "profiles, $THREADS thread(s)"
    $N "$PROFILE" --model "$T" --draft "$D" --tokens 1,2,3,4,5,6,8,10,12,16,24,32,48,64 \
        --prefix "$PREFIX" --warmup 3 --repeat "$REPEAT" --threads "$THREADS" --quiet --force \
        -o "$OUT/profile_target.json" > "$OUT/profile_target.txt" 2> "$OUT/profile_target.log"
    $N "$PROFILE" --model "$D" --tokens 1,2,3,4,5,6,8,10,12,16,24,32,48,64 \
        --prefix "$PREFIX" --warmup 3 --repeat "$REPEAT" --threads "$THREADS" --quiet --force \
        -o "$OUT/profile_draft.json" > "$OUT/profile_draft.txt" 2> "$OUT/profile_draft.log"
fi
PROF="--target-profile $OUT/profile_target.json --draft-profile $OUT/profile_draft.json --trust-profiles"

run1() {   # tag mode prompt-index round plan-args...
    local tag=$1 mode=$2 i=$3 r=$4; shift 4
    local extra="--no-baseline"
    [ "$mode" = topk ] && extra="$extra --temperature 1"
    $N "$RUN" --draft "$D" --target "$T" "$@" --prompt "$OUT/prompts/p$i.txt" -n "$NEW" \
        --mode "$mode" $extra --seed $((1000 + i)) --threads "$THREADS" -q \
        -o "$OUT/runs/out_${tag}_$i.txt" --report "$OUT/runs/report_${tag}_r${r}_$i.json" \
        2> "$OUT/runs/run_${tag}_$i.log" ||
        { echo "dynamic_grid.sh: sequoia-run failed: $OUT/runs/run_${tag}_$i.log" >&2; exit 1; }
}

for mode in greedy topk; do
    C=${CURVES[$mode]}
    say "$mode: the planner's pick and its predictions"
    "$PLAN" -a "$C" --curve "${CFG[$mode]}" --engine sglang --path text $PROF -n 64 \
        -o "$OUT/plans/pick_$mode.json" > "$OUT/plans/pick_$mode.txt"
    pick=$(python3 -c 'import json,sys; e=json.load(open(sys.argv[1]))["envelope"]; print("%d,%d,%d" % (e["steps"], e["topk"], e["nodes"]))' "$OUT/plans/pick_$mode.json")
    echo "$pick" > "$OUT/plans/pick_$mode.envelope"
    envs=$GRID
    case " $GRID " in *" $pick "*) ;; *) envs="$GRID $pick" ;; esac
    for env in $envs; do
        "$PLAN" -a "$C" --curve "${CFG[$mode]}" --engine sglang --path text $PROF --envelope "$env" \
            -o "$OUT/plans/env_${mode}_$env.json" > /dev/null
    done
    for n in $STATIC_N; do
        "$PLAN" -a "$C" --curve "${CFG[$mode]}" --budget "$n" --depth "$DEPTH" \
            -o "$OUT/plans/static_${mode}_$n.json" > /dev/null
        # the hardware-aware summary's tables of predicted speedups hold the static tree of
        # (n, DEPTH) priced by the engine's in-step model and by sequoia-run's (2 decimals)
        "$PLAN" -a "$C" --curve "${CFG[$mode]}" --budget "$n" --depth "$DEPTH" $PROF \
            -o "$OUT/plans/static_hw_${mode}_$n.json" > "$OUT/plans/static_hw_${mode}_$n.txt"
    done
    # every configuration once per prompt and round, interleaved, so that a slow spell of the
    # machine falls on all of them alike
    for r in $(seq 1 "$ROUNDS"); do
        say "$mode: round $r of $ROUNDS: envelopes $envs; static trees N = $STATIC_N"
        for i in $(seq 0 $((NP - 1))); do
            for env in $envs; do
                run1 "env_${mode}_$env" "$mode" "$i" "$r" --engine sglang --envelope "$env"
            done
            for n in $STATIC_N; do
                run1 "static_${mode}_$n" "$mode" "$i" "$r" --plan "$OUT/plans/static_${mode}_$n.json"
            done
        done
    done
done
say "done"
echo "end: $(date -u +%FT%TZ), uptime: $(uptime)" >> "$OUT/setup.txt"
DEPTH=$DEPTH python3 examples/dynamic_grid.py "$OUT" | tee "$OUT/results.md"
