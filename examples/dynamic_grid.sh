#!/usr/bin/env bash
# The engines' dynamic trees on this machine (issue 26, "Choice for the hardware", "Prediction of
# wall-clock time within 10%", "Static Sequoia trees against the engines' dynamic trees";
# docs/benchmarks.md, "Static trees against dynamic trees"; data/dynamic-grid/README.md):
#   1. the planner's first pick (sequoia-plan --engine sglang PICK_OPTS, no --envelope) from the
#      first profile slice, so that the grid holds it; static Sequoia trees of N = 4, 8, 16, 32
#      nodes (STATIC_N; sequoia-plan --budget N --depth DEPTH, the mode's curve: no profile);
#   2. the runs, every configuration in turn for each prompt: for each round (ROUNDS) and each
#      prompt of PROMPTS (default the 8 of data/ladder-large/prompts.txt; sequences separated by
#      empty lines), a short profile slice (the target's with its step section, sequoia-profile
#      --draft, and the draft's; SLICE_REPEAT samples a point) and then, for greedy (curves
#      CURVES_GREEDY, greedy@T0) and target-only sampling at T = 1 (CURVES_T1, topk@T1), every
#      envelope of GRID (and the first pick) by sequoia-run --engine sglang --envelope L,K,N and
#      every static tree by sequoia-run --plan, that prompt alone (batch 1, what the step section
#      prices), NEW tokens; one more slice at the end;
#   3. the slices pooled: sequoia-profile --merge --pool POOL (each point the mean of the slices'
#      medians by default: the time average that the runs' mean rate sees; median: the median)
#      into OUT/profile_target.json and OUT/profile_draft.json, a profile of the whole measured
#      period rather than of its first seconds (the host under a VM drifts: data/dynamic-grid/
#      README.md);
#   4. every prediction priced AFTER the runs from the pooled profiles (predictions depend only on
#      the curves and the profiles, never on the runs): the pick (PICK_OPTS), every envelope, the
#      static trees (their plans' hardware-aware summaries); the same from the first slice alone
#      (OUT/plans/*1_*), the single-profile method of before, kept as extra columns. A pick that
#      the grid did not run is run afterwards, in the same interleaved order;
#   5. examples/dynamic_grid.py: tables (OUT/results.md), OUT/summary.json, OUT/static-vs-dynamic.svg.
#      Measured tokens/s is set against sequoia-run's prediction (the plans' hardware.sequoia_run;
#      docs/planning.md, "Two cost models"), the engine's prediction kept beside it.
#
#   examples/dynamic_grid.sh OUT_DIR
#
# Environment: BUILD (default build), DRAFT and TARGET (the pair: data/models/draft drafting
# data/models/target; the 18M pair is DRAFT=data/models/target TARGET=data/models/large), THREADS (1), NEW (200), PREFIX (the profiles' KV prefix;
# default 64 + NEW / 2, the runs' mean context: the prompts have 64 tokens), SLICE_REPEAT (10:
# profile samples per point in each slice), SLICE_EVERY (1: a slice before every SLICE_EVERY-th
# prompt's round), DEPTH (9: the static trees' depth bound, the root and L <= 8 levels),
# GRID (the envelopes), PROMPTS, CURVES_GREEDY, CURVES_T1 (paths relative to the caller's
# directory or absolute; the curves should come from other prompts than PROMPTS), STATIC_N
# (4 8 16 32), ROUNDS (2: runs of every prompt, interleaved across the configurations),
# PICK_OPTS (--cost-model sequoia-run: how sequoia-plan picks the envelope; set it empty for a
# sequoia-plan without that option), SKIP_PROFILES=1 (no new slices: pool OUT/profiles' as they
# are), PRICE_ONLY=1 (no slices and no runs: pool, price and tabulate what OUT holds again;
# give the NEW, THREADS and ROUNDS it ran with, for a pick it must still run),
# POOL (mean: how the slices are pooled, sequoia-profile --pool), NICE (0). The load average and uptime are logged at every stage (OUT/load.log); the total time
# is printed at the end and kept in OUT/setup.txt.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: examples/dynamic_grid.sh OUT_DIR" >&2; exit 64; }
T_START=$(date +%s)
. "$(dirname "$0")/out_dir.sh"   # OUT: the caller's OUT_DIR
example_out_dir dynamic_grid "$1"
[ -n "${PROMPTS:-}" ] && PROMPTS=$(example_abs "$PROMPTS")
[ -n "${CURVES_GREEDY:-}" ] && CURVES_GREEDY=$(example_abs "$CURVES_GREEDY")
[ -n "${CURVES_T1:-}" ] && CURVES_T1=$(example_abs "$CURVES_T1")
[ -n "${DRAFT:-}" ] && DRAFT=$(example_abs "$DRAFT")
[ -n "${TARGET:-}" ] && TARGET=$(example_abs "$TARGET")
cd "$(dirname "$0")/.."
PROMPTS=${PROMPTS:-data/ladder-large/prompts.txt}
CURVES_GREEDY=${CURVES_GREEDY:-data/dynamic/curves-shipped-greedy.json}
CURVES_T1=${CURVES_T1:-data/dynamic/curves-shipped-T1.json}
BUILD=${BUILD:-build}
THREADS=${THREADS:-1}
NEW=${NEW:-200}
PREFIX=${PREFIX:-$((64 + NEW / 2))}
SLICE_REPEAT=${SLICE_REPEAT:-10}
SLICE_EVERY=${SLICE_EVERY:-1}
DEPTH=${DEPTH:-9}
NICE=${NICE:-0}
POOL=${POOL:-mean}
GRID=${GRID:-"1,1,2 1,2,3 2,1,3 2,2,3 3,1,4 2,2,4 3,2,6 3,2,8 4,2,8 2,4,8 7,1,8 5,2,16 4,4,16 6,4,16 4,4,32 6,4,32 8,4,32"}
STATIC_N=${STATIC_N:-"4 8 16 32"}
ROUNDS=${ROUNDS:-2}
PICK_OPTS=${PICK_OPTS---cost-model sequoia-run}
PRICE_ONLY=${PRICE_ONLY:-0}
SKIP_PROFILES=${SKIP_PROFILES:-0}
[ "$PRICE_ONLY" = 1 ] && SKIP_PROFILES=1
TOKENS=1,2,3,4,5,6,8,10,12,16,24,32,48,64
D=${DRAFT:-data/models/draft}
T=${TARGET:-data/models/target}
PLAN=$BUILD/planner/sequoia-plan
PROFILE=$BUILD/profiler/sequoia-profile
RUN=$BUILD/runtime/sequoia-run
N="nice -n $NICE"
for tool in "$PLAN" "$PROFILE" "$RUN"; do
    [ -x "$tool" ] || { echo "dynamic_grid.sh: $tool is missing: build first" >&2; exit 66; }
done
MODES="greedy topk"
declare -A CURVES=([greedy]=$CURVES_GREEDY [topk]=$CURVES_T1)
declare -A CFG=([greedy]=greedy@T0 [topk]=topk@T1)
mkdir -p "$OUT/runs" "$OUT/plans" "$OUT/prompts" "$OUT/profiles"
load() { cut -d' ' -f1-3 /proc/loadavg; }
say() { printf '== %s (load %s)\n' "$*" "$(load)" >&2; echo "$(date -u +%TZ) $* | uptime: $(uptime)" >> "$OUT/load.log"; }
if [ "$PRICE_ONLY" != 1 ]; then
    {
        echo "command: DRAFT=$D TARGET=$T BUILD=$BUILD THREADS=$THREADS NEW=$NEW PREFIX=$PREFIX SLICE_REPEAT=$SLICE_REPEAT SLICE_EVERY=$SLICE_EVERY DEPTH=$DEPTH ROUNDS=$ROUNDS PICK_OPTS='$PICK_OPTS' POOL=$POOL NICE=$NICE examples/dynamic_grid.sh $OUT"
        echo "grid: $GRID"
        echo "prompts: $PROMPTS; curves: $CURVES_GREEDY, $CURVES_T1"
        echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (modified)')"
        echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores, $(grep -o -w 'avx2\|avx512f' /proc/cpuinfo | sort -u | tr '\n' ' ')"
        echo "start: $(date -u +%FT%TZ), uptime: $(uptime)"
    } > "$OUT/setup.txt"
    lscpu > "$OUT/lscpu.txt" 2>/dev/null || true
fi
# the prompts (blank-line separated token ids), one file each (PRICE_ONLY: the ones OUT ran)
if [ "$PRICE_ONLY" != 1 ]; then
    rm -f "$OUT"/prompts/p*.txt
    python3 - "$OUT/prompts" "$PROMPTS" > /dev/null <<'PY'
import sys
text = open(sys.argv[2]).read()
ps = [p.strip() for p in text.split("\n\n") if p.strip()]
for i, p in enumerate(ps):
    open("%s/p%d.txt" % (sys.argv[1], i), "w").write(p + "\n")
PY
fi
NP=$(ls "$OUT"/prompts/p*.txt | wc -l)

# One profile slice: the target with its step section and the draft, short (SLICE_REPEAT samples
# a point). Each is written whatever the profiler's verdict (--force): a slice is one sample of
# the host's state, judged again once pooled.
T_SLICES=0
slice() {   # slice-number
    local k t0=$(date +%s)
    k=$(printf %03d "$1")
    $N "$PROFILE" --model "$T" --draft "$D" --tokens "$TOKENS" --prefix "$PREFIX" --warmup 1 \
        --repeat "$SLICE_REPEAT" --threads "$THREADS" --quiet --force \
        -o "$OUT/profiles/slice_${k}_target.json" > "$OUT/profiles/slice_${k}_target.txt" \
        2> "$OUT/profiles/slice_${k}_target.log" ||
        { echo "dynamic_grid.sh: sequoia-profile failed: $OUT/profiles/slice_${k}_target.log" >&2; exit 1; }
    $N "$PROFILE" --model "$D" --tokens "$TOKENS" --prefix "$PREFIX" --warmup 1 \
        --repeat "$SLICE_REPEAT" --threads "$THREADS" --quiet --force \
        -o "$OUT/profiles/slice_${k}_draft.json" > "$OUT/profiles/slice_${k}_draft.txt" \
        2> "$OUT/profiles/slice_${k}_draft.log" ||
        { echo "dynamic_grid.sh: sequoia-profile failed: $OUT/profiles/slice_${k}_draft.log" >&2; exit 1; }
    T_SLICES=$((T_SLICES + $(date +%s) - t0))
}
FIRST_T=$OUT/profiles/slice_000_target.json
FIRST_D=$OUT/profiles/slice_000_draft.json
prof_opts() {   # target draft
    echo "--target-profile $1 --draft-profile $2 --trust-profiles"
}
envelope_of() {   # plan.json -> L,K,N
    python3 -c 'import json,sys; e=json.load(open(sys.argv[1]))["envelope"]; print("%d,%d,%d" % (e["steps"], e["topk"], e["nodes"]))' "$1"
}
pick() {   # mode target draft out-stem
    local mode=$1
    # shellcheck disable=SC2086
    "$PLAN" -a "${CURVES[$mode]}" --curve "${CFG[$mode]}" --engine sglang --path text \
        $(prof_opts "$2" "$3") $PICK_OPTS -n 64 -o "$4.json" > "$4.txt"
    envelope_of "$4.json" > "$4.envelope"
}

T_RUNS=0
run1() {   # tag mode prompt-index round plan-args...
    local tag=$1 mode=$2 i=$3 r=$4 t0=$(date +%s%N); shift 4
    local extra="--no-baseline"
    [ "$mode" = topk ] && extra="$extra --temperature 1"
    $N "$RUN" --draft "$D" --target "$T" "$@" --prompt "$OUT/prompts/p$i.txt" -n "$NEW" \
        --mode "$mode" $extra --seed $((1000 + i)) --threads "$THREADS" -q \
        -o "$OUT/runs/out_${tag}_$i.txt" --report "$OUT/runs/report_${tag}_r${r}_$i.json" \
        2> "$OUT/runs/run_${tag}_$i.log" ||
        { echo "dynamic_grid.sh: sequoia-run failed: $OUT/runs/run_${tag}_$i.log" >&2; exit 1; }
    T_RUNS=$((T_RUNS + ($(date +%s%N) - t0) / 1000000))
}
contains() { case " $1 " in *" $2 "*) return 0 ;; esac; return 1; }

declare -A ENVS
if [ "$PRICE_ONLY" != 1 ]; then
    K=0
    if [ "$SKIP_PROFILES" != 1 ]; then
        rm -f "$OUT"/profiles/slice_*
        say "profile slice $K (before the runs), $THREADS thread(s)"
        slice $K
    fi
    [ -f "$FIRST_T" ] && [ -f "$FIRST_D" ] ||
        { echo "dynamic_grid.sh: $FIRST_T or $FIRST_D is missing (SKIP_PROFILES=1 needs them)" >&2; exit 66; }
    for mode in $MODES; do
        # the first pick, from the first slice: the grid runs it
        say "$mode: the first pick (first slice); static plans"
        pick "$mode" "$FIRST_T" "$FIRST_D" "$OUT/plans/pick1_$mode"
        p1=$(cat "$OUT/plans/pick1_$mode.envelope")
        ENVS[$mode]=$GRID
        contains "$GRID" "$p1" || ENVS[$mode]="$GRID $p1"
        for n in $STATIC_N; do
            "$PLAN" -a "${CURVES[$mode]}" --curve "${CFG[$mode]}" --budget "$n" --depth "$DEPTH" \
                -o "$OUT/plans/static_${mode}_$n.json" > /dev/null
        done
    done
    # every configuration once per prompt and round, interleaved, so that a slow spell of the
    # machine falls on all of them alike; a profile slice before each prompt's configurations
    rm -f "$OUT"/runs/*
    for r in $(seq 1 "$ROUNDS"); do
        say "round $r of $ROUNDS: envelopes greedy ${ENVS[greedy]}, topk ${ENVS[topk]}; static trees N = $STATIC_N"
        for i in $(seq 0 $((NP - 1))); do
            if [ "$SKIP_PROFILES" != 1 ] && { [ "$r" != 1 ] || [ "$i" != 0 ]; } &&
               [ $(( ((r - 1) * NP + i) % SLICE_EVERY )) = 0 ]; then
                K=$((K + 1))
                slice $K
            fi
            for mode in $MODES; do
                for env in ${ENVS[$mode]}; do
                    run1 "env_${mode}_$env" "$mode" "$i" "$r" --engine sglang --envelope "$env"
                done
                for n in $STATIC_N; do
                    run1 "static_${mode}_$n" "$mode" "$i" "$r" --plan "$OUT/plans/static_${mode}_$n.json"
                done
            done
        done
    done
    if [ "$SKIP_PROFILES" != 1 ]; then
        K=$((K + 1))
        say "profile slice $K (after the runs)"
        slice $K
    fi
fi

# the slices pooled into the profiles of the whole period
say "pooling $(ls "$OUT"/profiles/slice_*_target.json | wc -l) profile slices"
for who in target draft; do
    "$PROFILE" --merge "$OUT"/profiles/slice_*_"$who".json --pool "$POOL" --force \
        -o "$OUT/profile_$who.json" \
        > "$OUT/profile_$who.txt" 2> "$OUT/profile_$who.log" ||
        { echo "dynamic_grid.sh: sequoia-profile --merge failed: $OUT/profile_$who.log" >&2; exit 1; }
done
PROF=$(prof_opts "$OUT/profile_target.json" "$OUT/profile_draft.json")
PROF1=$(prof_opts "$FIRST_T" "$FIRST_D")

# every prediction, priced after the runs: from the pooled profiles, and from the first slice
for mode in $MODES; do
    C=${CURVES[$mode]}
    say "$mode: the planner's pick and its predictions (pooled profiles; first slice)"
    pick "$mode" "$OUT/profile_target.json" "$OUT/profile_draft.json" "$OUT/plans/pick_$mode"
    pk=$(cat "$OUT/plans/pick_$mode.envelope")
    [ -f "$OUT/plans/pick1_$mode.json" ] || pick "$mode" "$FIRST_T" "$FIRST_D" "$OUT/plans/pick1_$mode"
    envs=$(ls "$OUT"/runs/report_env_"${mode}"_*_r1_0.json | sed 's/.*report_env_[a-z]*_\([0-9,]*\)_r1_0.json/\1/' | sort -t, -n -k3 -k1 -k2 | tr '\n' ' ')
    if ! contains "$envs" "$pk"; then
        # the pooled profiles pick an envelope that the grid did not run: run it now, in the
        # same order (its rate then comes from a later stretch of time than the grid's)
        say "$mode: the pick $pk was not run: running it for every prompt and round"
        for r in $(seq 1 "$ROUNDS"); do
            for i in $(seq 0 $((NP - 1))); do
                run1 "env_${mode}_$pk" "$mode" "$i" "$r" --engine sglang --envelope "$pk"
            done
        done
        echo "$pk" > "$OUT/plans/pick_${mode}.ran_after"
        envs="$envs $pk"
    fi
    for env in $envs; do
        "$PLAN" -a "$C" --curve "${CFG[$mode]}" --engine sglang --path text $PROF --envelope "$env" \
            -o "$OUT/plans/env_${mode}_$env.json" > /dev/null
        "$PLAN" -a "$C" --curve "${CFG[$mode]}" --engine sglang --path text $PROF1 --envelope "$env" \
            -o "$OUT/plans/env1_${mode}_$env.json" > /dev/null
    done
    for n in $STATIC_N; do
        # the static tree run, (n, DEPTH), priced itself (--sizes budget: no choice) by the
        # engine's model and by sequoia-run's: its plan's hardware section
        "$PLAN" -a "$C" --curve "${CFG[$mode]}" --budget "$n" --depth "$DEPTH" $PROF \
            --sizes budget -o "$OUT/plans/static_hw_${mode}_$n.json" \
            > "$OUT/plans/static_hw_${mode}_$n.txt"
        "$PLAN" -a "$C" --curve "${CFG[$mode]}" --budget "$n" --depth "$DEPTH" $PROF1 \
            --sizes budget -o "$OUT/plans/static_hw1_${mode}_$n.json" \
            > "$OUT/plans/static_hw1_${mode}_$n.txt"
    done
done
say "done"
T_END=$(date +%s)
TOTAL="total time $((T_END - T_START)) s (profile slices ${T_SLICES} s, runs $((T_RUNS / 1000)) s)"
[ "$PRICE_ONLY" = 1 ] && TOTAL="$TOTAL; PRICE_ONLY: no slices, no runs"
echo "end: $(date -u +%FT%TZ), uptime: $(uptime); $TOTAL" >> "$OUT/setup.txt"
DEPTH=$DEPTH python3 examples/dynamic_grid.py "$OUT" | tee "$OUT/results.md"
echo "dynamic_grid.sh: $TOTAL" >&2
