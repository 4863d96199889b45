#!/usr/bin/env bash
# Predicted against measured tokens/s of static plans, planned from the cost of a step as
# decoding runs it (issue 26, "Prediction of wall-clock time within 10%"; docs/benchmarks.md,
# "Step cost"):
#   for each pair (the shipped pair: data/models/draft drafting data/models/target; the 18M
#   pair: data/models/target drafting data/models/large), each thread count and each setting
#   (greedy, T = 1 stochastic):
#     corpus and curves (once per pair) -> the target's profile with its step section
#     (sequoia-profile --draft) and the draft's profile -> the hardware-aware plan -> PROMPTS
#     held-out prompts x NEW_TOKENS tokens with the plan and with the target alone, one
#     sequoia-run per prompt -> predicted against measured tokens/s (examples/stepcost.py).
#   The same plan's prediction from the profiles without their step section (the steady-stream
#   model the planner used before) is printed beside it.
#
#   examples/stepcost.sh [OUT_DIR]          (default: a fresh folder under $TMPDIR)
#
# Environment: BUILD (default build), PAIRS (default "shipped 18m"), THREADS_LIST (default
# "1 2"), SETTINGS (default "T0 T1"), PROMPTS (default 8), NEW_TOKENS (default 256), BUDGET
# (default 64), DEPTH (default 12), PREFIX (default 192: the runs' mean context), REPEAT
# (profile samples per point, default 21), NICE (default 0: the niceness the timed commands
# run at; the machine's load is recorded at every stage either way).
set -euo pipefail
. "$(dirname "$0")/out_dir.sh"   # OUT: the caller's OUT_DIR, else a fresh folder
example_out_dir stepcost "${1:-}"
cd "$(dirname "$0")/.."

BUILD=${BUILD:-build}
PAIRS=${PAIRS:-"shipped 18m"}
THREADS_LIST=${THREADS_LIST:-"1 2"}
SETTINGS=${SETTINGS:-"T0 T1"}
PROMPTS=${PROMPTS:-8}
NEW_TOKENS=${NEW_TOKENS:-256}
BUDGET=${BUDGET:-64}
DEPTH=${DEPTH:-12}
PREFIX=${PREFIX:-192}
REPEAT=${REPEAT:-21}
NICE=${NICE:-0}
HELDOUT=data/heldout.txt
PLAN=$BUILD/planner/sequoia-plan
ACCEPT=$BUILD/planner/accept/sequoia-accept
[ -x "$ACCEPT" ] || ACCEPT=$BUILD/planner/sequoia-accept
PROFILE=$BUILD/profiler/sequoia-profile
RUN=$BUILD/runtime/sequoia-run
N="nice -n $NICE"
for tool in "$PLAN" "$ACCEPT" "$PROFILE" "$RUN"; do
    if [ ! -x "$tool" ]; then
        echo "stepcost.sh: $tool is missing: build first (meson setup $BUILD && ninja -C $BUILD)" >&2
        exit 66
    fi
done
declare -A DRAFT=([shipped]=data/models/draft [18m]=data/models/target)
declare -A TARGET=([shipped]=data/models/target [18m]=data/models/large)
declare -A MODE=([T0]=greedy [T1]=stochastic) TEMP=([T0]=0 [T1]=1) CURVE=([T0]=greedy@T0 [T1]=stochastic@T1)
mkdir -p "$OUT"
load() { cut -d' ' -f1-3 /proc/loadavg; }
say() { printf '\n== %s (load %s)\n' "$*" "$(load)" >&2; echo "$(date -u +%TZ) $* | load $(load)" >> "$OUT/load.log"; }
bytes_to_ids() { od -An -v -tu1 | tr -s ' \n' '\n' | sed '/^$/d'; }
{
    echo "command: BUILD=$BUILD PAIRS=\"$PAIRS\" THREADS_LIST=\"$THREADS_LIST\" SETTINGS=\"$SETTINGS\"" \
         "PROMPTS=$PROMPTS NEW_TOKENS=$NEW_TOKENS BUDGET=$BUDGET DEPTH=$DEPTH PREFIX=$PREFIX" \
         "REPEAT=$REPEAT NICE=$NICE examples/stepcost.sh $OUT"
    echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (modified)')"
    echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores"
    echo "start: $(date -u +%FT%TZ), load average $(load)"
} > "$OUT/results.txt"
cat "$OUT/results.txt" >&2
lscpu > "$OUT/lscpu.txt" 2>/dev/null || true

# prompts: 64-byte pieces of the held-out text past the corpus (as examples/speedup.sh)
for i in $(seq 0 $((PROMPTS - 1))); do
    head -c $((131072 + i * 4096 + 64)) "$HELDOUT" | tail -c 64 | bytes_to_ids | tr '\n' ' ' > "$OUT/prompt$i.txt"
    echo >> "$OUT/prompt$i.txt"
done
head -c 65536 "$HELDOUT" | bytes_to_ids |
    awk '{ printf "%s%s", $1, (NR % 256 == 0 ? "\n\n" : " ") } END { print "" }' > "$OUT/corpus_tokens.txt"

for pair in $PAIRS; do
    D=${DRAFT[$pair]} T=${TARGET[$pair]} P=$OUT/$pair
    mkdir -p "$P/runs"
    say "$pair: corpus and curves ($D drafting $T)"
    [ -f "$P/curves.json" ] || {
        "$RUN" dump --draft "$D" --target "$T" --tokens "$OUT/corpus_tokens.txt" -o "$P/corpus.h5" \
            --context 256 --threads 2 -q
        "$ACCEPT" "$P/corpus.h5" --mode greedy,stochastic --temperature 1 --width 16 --seed 1 \
            -o "$P/curves.json" > /dev/null
        rm -f "$P/corpus.h5"
    }
    for th in $THREADS_LIST; do
        say "$pair: profiles, $th thread(s)"
        # the target with its step section, the draft in a steady stream
        $N "$PROFILE" --model "$T" --draft "$D" --tokens 1,2,3,4,5,6,8,10,12,16,24,32,48,64 \
            --prefix "$PREFIX" --warmup 3 --repeat "$REPEAT" --threads "$th" --quiet --force \
            -o "$P/profile_target_t$th.json" > "$P/profile_target_t$th.txt" 2> "$P/profile_target_t$th.log"
        $N "$PROFILE" --model "$D" --tokens 1,2,3,4,5,6,8,10,12,16,24,32,48,64 \
            --prefix "$PREFIX" --warmup 3 --repeat "$REPEAT" --threads "$th" --quiet --force \
            -o "$P/profile_draft_t$th.json" > "$P/profile_draft_t$th.txt" 2> "$P/profile_draft_t$th.log"
        # the same target profile without its step section: the steady-stream model
        python3 examples/stepcost.py strip "$P/profile_target_t$th.json" "$P/profile_target_t${th}_steady.json"
        for s in $SETTINGS; do
            tag=t${th}_$s
            say "$pair: plan and runs, $th thread(s), $s"
            "$PLAN" -a "$P/curves.json" -c "${CURVE[$s]}" --budget "$BUDGET" --depth "$DEPTH" \
                --target-profile "$P/profile_target_t$th.json" --draft-profile "$P/profile_draft_t$th.json" \
                --trust-profiles -o "$P/plan_$tag.json" > "$P/plan_$tag.txt"
            "$PLAN" -a "$P/curves.json" -c "${CURVE[$s]}" --budget "$BUDGET" --depth "$DEPTH" \
                --target-profile "$P/profile_target_t${th}_steady.json" --draft-profile "$P/profile_draft_t$th.json" \
                --trust-profiles -o "$P/plan_${tag}_steady.json" > /dev/null
            for i in $(seq 0 $((PROMPTS - 1))); do
                $N "$RUN" --draft "$D" --target "$T" --plan "$P/plan_$tag.json" --prompt "$OUT/prompt$i.txt" \
                    -n "$NEW_TOKENS" --mode "${MODE[$s]}" --temperature "${TEMP[$s]}" --seed $((1000 + i)) \
                    --threads "$th" -q -o "$P/runs/out_${tag}_$i.txt" --report "$P/runs/report_${tag}_$i.json" \
                    2> "$P/runs/run_${tag}_$i.log" ||
                    { echo "stepcost.sh: sequoia-run failed: $P/runs/run_${tag}_$i.log" >&2; exit 1; }
            done
        done
    done
done
echo "end: $(date -u +%FT%TZ), load average $(load)" >> "$OUT/results.txt"
python3 examples/stepcost.py report "$OUT" "$PAIRS" "$THREADS_LIST" "$SETTINGS" "$PROMPTS" | tee -a "$OUT/results.txt"
echo "all outputs in $OUT/ (results.txt, summary.json, load.log, per pair: profiles, plans, runs/)" >&2
