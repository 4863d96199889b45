#!/usr/bin/env bash
# Plans for serving, proved on this machine (issue 18; docs/benchmarks.md, "Ladder"):
#   batch profiles of both models -> sequoia-plan --ladder -> at each batch size b, the ladder's
#   plan decoded by sequoia-run --batch b against the same batch decoded by the target alone,
# then a table of predicted against measured throughput (tokens/s over the batch) and speedup,
# and the predicted crossover (the smallest batch from which no tree pays) against the measured
# one. To find the measured crossover, each batch size also runs the trees of the other rungs
# that pay somewhere (the best tree of batch 1, ...): speculation pays at b when one of them
# beats plain decoding at b by more than the noise (MARGIN).
#
#   examples/ladder.sh [OUT_DIR]                 (default: a fresh folder under $TMPDIR)
#
# Environment: BUILD (default build), DRAFT, TARGET (default the shipped pair in data/models),
# CURVES (acceptance curves; default data/pipeline/curves.json for the shipped pair, otherwise
# estimated here from a corpus dumped with sequoia-run dump), CURVE (default greedy@T0), MODE
# (default greedy), BATCHES (default 1,2,4,8), BUDGET (default 64), DEPTH (default 10),
# THREADS (default 1: the shipped models are tiny, and one thread is fastest for them),
# PROMPTS (default 8), NEW_TOKENS (default 128), PREFIX (default 128: about the mean context of
# the runs), REPEAT (profile samples per point, default 30), ROUNDS (runs per batch size, the
# median taken; default 3), MARGIN (default 0.05), STAT (p10 or median, default p10: below).
# Exit status: 0 when it ran (the verdict is in measured.txt), 64 for a STAT that is neither,
# 66 when a tool is not built, 1 when a plan's greedy output differs from plain decoding.
set -euo pipefail
. "$(dirname "$0")/out_dir.sh"   # OUT: the caller's OUT_DIR, else a fresh folder
example_out_dir ladder "${1:-}"
cd "$(dirname "$0")/.."

BUILD=${BUILD:-build}
DRAFT=${DRAFT:-data/models/draft}
TARGET=${TARGET:-data/models/target}
CURVE=${CURVE:-greedy@T0}
MODE=${MODE:-greedy}
BATCHES=${BATCHES:-1,2,4,8}
BUDGET=${BUDGET:-64}
DEPTH=${DEPTH:-10}
THREADS=${THREADS:-1}
PROMPTS=${PROMPTS:-8}
NEW_TOKENS=${NEW_TOKENS:-128}
PREFIX=${PREFIX:-128}
REPEAT=${REPEAT:-30}
ROUNDS=${ROUNDS:-3}
MARGIN=${MARGIN:-0.05}
HELDOUT=data/heldout.txt
PLAN=$BUILD/planner/sequoia-plan
ACCEPT=$BUILD/planner/sequoia-accept
PROFILE=$BUILD/profiler/sequoia-profile
RUN=$BUILD/runtime/sequoia-run

for tool in "$PLAN" "$ACCEPT" "$PROFILE" "$RUN"; do
    if [ ! -x "$tool" ]; then
        echo "ladder.sh: $tool is missing: run ./setup.sh first" >&2
        exit 66
    fi
done
case "${STAT:=p10}" in
    p10|median) ;;
    *) echo "ladder.sh: STAT: '$STAT' is neither p10 nor median" >&2; exit 64 ;;
esac
mkdir -p "$OUT/plans" "$OUT/runs"
# plain decoding: the root-only plan (whatever the curve, a one-node tree is the target alone),
# used for the large target's corpus below and as every batch size's baseline
"$PLAN" -a data/pipeline/curves.json -c greedy@T0 -n 1 -d 1 -o "$OUT/plans/root.json" 2>/dev/null
say() { printf '\n== %s\n' "$*" >&2; }
bytes_to_ids() { od -An -v -tu1 | tr -s ' \n' '\n' | sed '/^$/d'; }

say "0. machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
date -u +%FT%TZ > "$OUT/when.txt"
cut -d' ' -f1-3 /proc/loadavg >> "$OUT/when.txt"

say "1. prompts: $PROMPTS pieces of 64 bytes of held-out text, one sequence each"
: > "$OUT/prompts.txt"
for i in $(seq 0 $((PROMPTS - 1))); do
    head -c $((65536 + i * 8192 + 64)) "$HELDOUT" | tail -c 64 | bytes_to_ids | tr '\n' ' ' >> "$OUT/prompts.txt"
    printf '\n\n' >> "$OUT/prompts.txt"
done

if [ -z "${CURVES:-}" ]; then
    if [ "$TARGET" = data/models/target ] && [ "$DRAFT" = data/models/draft ]; then
        CURVES=data/pipeline/curves.json
    else
        # The curve must describe the text the runs decode: the target's own continuations of
        # prompts (greedy: its argmax text), which the draft predicts better than human text
        # (p_1 0.75 against 0.66 for the 18M target). So the corpus is the target's decoding of
        # 32 other held-out prompts, prompts included, the way the runs below decode theirs.
        say "1b. acceptance curves of $DRAFT against $TARGET on the target's own continuations"
        : > "$OUT/corpus_prompts.txt"
        for i in $(seq 0 31); do
            head -c $((i * 1024 + 64)) "$HELDOUT" | tail -c 64 | bytes_to_ids | tr '\n' ' ' >> "$OUT/corpus_prompts.txt"
            printf '\n\n' >> "$OUT/corpus_prompts.txt"
        done
        "$RUN" --draft "$DRAFT" --target "$TARGET" --plan "$OUT/plans/root.json" \
            --prompt "$OUT/corpus_prompts.txt" --batch 32 -n "$NEW_TOKENS" --mode "$MODE" \
            --threads "$THREADS" --no-baseline -o "$OUT/corpus_generated.txt" 2>/dev/null
        paste -d ' ' <(sed '/^$/d' "$OUT/corpus_prompts.txt") "$OUT/corpus_generated.txt" |
            sed 's/$/\n/' > "$OUT/corpus_tokens.txt"
        "$RUN" dump --draft "$DRAFT" --target "$TARGET" --tokens "$OUT/corpus_tokens.txt" \
            -o "$OUT/corpus.h5" --context $((64 + NEW_TOKENS)) --threads "$THREADS" --compression 0
        "$ACCEPT" "$OUT/corpus.h5" --mode "$MODE" --width 16 --seed 1 -o "$OUT/curves.json"
        rm -f "$OUT/corpus.h5"
        CURVES=$OUT/curves.json
    fi
fi

say "2. batch profiles (batch $BATCHES, prefix $PREFIX, $REPEAT samples a point)"
TOKENS=1,2,3,4,5,6,8,10,12,16,20,24,32,48,64
[ "$BUDGET" -gt 64 ] && TOKENS=$TOKENS,96,128
for m in target draft; do
    dir=$TARGET
    [ "$m" = draft ] && dir=$DRAFT
    "$PROFILE" --model "$dir" --batch "$BATCHES" --tokens "$TOKENS" --prefix "$PREFIX" \
        --repeat "$REPEAT" --warmup 3 --threads "$THREADS" -o "$OUT/profile_$m.json" \
        --svg "$OUT/profile_$m.svg" --quiet > "$OUT/profile_$m.txt"
done

# The runs below are timed over their decoding steps only (sequoia-run's report, "batch" section,
# "decode"),
# leaving out the loading of the models and the prompts' prefill, which the profiles do not time
# either. On a shared host a forward's time moves by up to 2x from one second to the next with
# the neighbours' load (docs/benchmarks.md, "Ladder"); its 10th percentile is the forward's own
# time. STAT=p10 (the default) plans from the profiles' p10 and rates a run by its batch steps'
# p10 (throughput = batch x tokens/step / p10 step time); STAT=median plans from the medians and
# rates a run by its tokens over its whole decoding time. The table gives both.
for m in target draft; do
    python3 - "$OUT/profile_$m.json" "$OUT/profile_${m}_plan.json" "$STAT" <<'EOF2'
import json, sys
p = json.load(open(sys.argv[1]))
if sys.argv[3] == "p10":
    for q in p["points"]:
        q["median_ms"] = q["p10_ms"]
json.dump(p, open(sys.argv[2], "w"), indent=2)
EOF2
done
say "3. the ladder (sequoia-plan --ladder, curve $CURVE, budget $BUDGET, depth $DEPTH)"
"$PLAN" --ladder --target-profile "$OUT/profile_target_plan.json" --draft-profile "$OUT/profile_draft_plan.json" \
    -a "$CURVES" -c "$CURVE" -n "$BUDGET" -d "$DEPTH" --extrapolate constant \
    -o "$OUT/ladder.json" --ladder-plans "$OUT/plans" --svg "$OUT/ladder.svg" \
    2> "$OUT/ladder.txt" || { cat "$OUT/ladder.txt" >&2; exit 1; }
cat "$OUT/ladder.txt" >&2
# The chain schedules, each in a run of its own: a tool's outputs are all or nothing
# (docs/robustness.md), and an engine's schedule may refuse a ladder it cannot express (exit 65:
# TensorRT-LLM's draft_len_schedule cannot grow the draft with the batch size), which must not
# cost the ladder and the plans above. A refusal is reported and the run goes on.
for sched in schedule vllm-schedule; do
    if "$PLAN" --ladder --target-profile "$OUT/profile_target_plan.json" \
        --draft-profile "$OUT/profile_draft_plan.json" -a "$CURVES" -c "$CURVE" -n "$BUDGET" \
        -d "$DEPTH" --extrapolate constant -q -o "$OUT/ladder-$sched.json" \
        "--$sched" "$OUT/$sched.json" 2> "$OUT/$sched.txt"; then
        rm -f "$OUT/ladder-$sched.json"
    else
        rc=$?
        [ "$rc" = 65 ] || { cat "$OUT/$sched.txt" >&2; exit 1; }
        echo "ladder.sh: no $sched.json: $(cat "$OUT/$sched.txt")" >&2
    fi
done

say "4. every rung's plan at every batch size, and plain decoding (sequoia-run --batch, $ROUNDS rounds, median)"
IFS=, read -r -a BS <<< "$BATCHES"
for round in $(seq 1 "$ROUNDS"); do
    for b in "${BS[@]}"; do
        for p in "${BS[@]}" root; do
            plan=$OUT/plans/plan-b$p.json
            [ "$p" = root ] && plan=$OUT/plans/root.json
            "$RUN" --draft "$DRAFT" --target "$TARGET" --plan "$plan" --prompt "$OUT/prompts.txt" \
                --batch "$b" -n "$NEW_TOKENS" --mode "$MODE" --threads "$THREADS" --no-baseline \
                -o "$OUT/runs/tokens_b${b}_$p.txt" --report "$OUT/runs/b${b}_plan${p}_r$round.json" \
                2> "$OUT/runs/b${b}_plan${p}_r$round.log"
        done
        # greedy: every plan's output is the target's own (the root-only plan is plain decoding)
        for p in "${BS[@]}"; do
            cmp -s "$OUT/runs/tokens_b${b}_$p.txt" "$OUT/runs/tokens_b${b}_root.txt" ||
                { echo "ladder.sh: batch $b: plan-b$p's output differs from plain decoding" >&2; exit 1; }
        done
    done
done

say "5. predicted against measured"
python3 - "$OUT" "$BATCHES" "$ROUNDS" "$MARGIN" "$STAT" <<'EOF'
import json, statistics, sys
out, batches, rounds, margin = sys.argv[1], [int(b) for b in sys.argv[2].split(',')], int(sys.argv[3]), float(sys.argv[4])
stat = sys.argv[5]
def rate_p10(x):
    """tokens/s over the batch at the batch steps' 10th-percentile time"""
    return x["batch"] * x["tokens_per_step"] / (x["decode"]["step_ms_p10"] / 1e3)
def rate_mean(x):
    """tokens/s over the batch: all tokens over the whole decoding (prefill left out)"""
    return x["decode"]["tokens_per_s"]
rate = rate_p10 if stat == "p10" else rate_mean
lad = json.load(open(f"{out}/ladder.json"))
rungs = {r["batch"]: r for r in lad["rungs"]}
def run(b, p, r):
    """a run's batch figures: the batch section of sequoia-run-report v2 (docs/formats.md), or
    a sequoia-run-batch v1 report (sequoia-run before v2), whose top level held them"""
    path = f"{out}/runs/b{b}_plan{p}_r{r}.json"
    j = json.load(open(path))
    if j.get("format") == "sequoia-run-batch" and j.get("version") == 1:
        return j
    if j.get("format") != "sequoia-run-report" or j.get("version") != 2:
        sys.exit(f"ladder.sh: {path}: not a sequoia-run-report v2 (format {j.get('format')!r}, "
                 f"version {j.get('version')!r})")
    bt = j["batch"]
    return dict(batch=bt["size"], tokens_per_step=bt["tokens_per_step"],
                tokens_per_s=bt["tokens_per_s"], decode=bt["decode"])
rows, table = [], []
meas_pays = {}
for b in batches:
    rg = rungs[b]
    best = rg["tree"]
    reps = [run(b, b, r) for r in range(1, rounds + 1)]
    plain = [run(b, "root", r) for r in range(1, rounds + 1)]
    tps = statistics.median(rate(x) for x in reps)
    base = statistics.median(rate(x) for x in plain)
    # speedups per round, each of two runs back to back
    spd = statistics.median(rate(x) / rate(y) for x, y in zip(reps, plain))
    wall_tps = statistics.median(x["tokens_per_s"] for x in reps)
    other = rate_mean if stat == "p10" else rate_p10
    other_tps = statistics.median(other(x) for x in reps)
    # one batch step: predicted from the profiles, measured as the runs' median step
    pred_step = 1e3 * b * best["expected_tokens"] / best["tokens_per_second"]
    q = "p10" if stat == "p10" else "median"
    step_ms = statistics.median(x["decode"][f"step_ms_{q}"] for x in reps)
    target_ms = statistics.median(x["decode"][f"target_forward_ms_{q}"] for x in reps)
    tstep = statistics.median(x["tokens_per_step"] for x in reps)
    pred_tps = best["tokens_per_second"]
    # the measured crossover: does any rung's tree with more than the root beat plain
    # decoding at b (by more than the margin)?
    cands = {}
    for p in batches:
        if rungs[p]["tree"]["size"] > 1:
            cands[p] = statistics.median(rate(run(b, p, r)) / rate(run(b, "root", r))
                                         for r in range(1, rounds + 1))
    pays = any(s > 1 + margin for s in cands.values())
    meas_pays[b] = pays
    row = dict(batch=b, tree_size=best["size"], tree_depth=best["depth"],
               predicted_tokens_per_step=best["expected_tokens"], measured_tokens_per_step=tstep,
               predicted_tokens_per_s=pred_tps, measured_tokens_per_s=tps,
               ratio=tps / pred_tps, measured_wall_tokens_per_s=wall_tps,
               **{f"measured_tokens_per_s_{'mean' if stat == 'p10' else 'p10'}": other_tps},
               predicted_step_ms=pred_step, measured_step_ms=step_ms, measured_target_forward_ms=target_ms, predicted_speedup=best["speedup"], measured_speedup=spd,
               predicted_plain_tokens_per_s=rg["plain_tokens_per_second"], measured_plain_tokens_per_s=base,
               plain_ratio=base / rg["plain_tokens_per_second"],
               predicted_pays=bool(rg["speculation_pays"]), measured_pays=pays,
               other_trees_measured_speedup={str(k): v for k, v in cands.items()})
    rows.append(row)
pred_x = lad.get("crossover_batch", 0)
meas_x = 0
for i, b in enumerate(batches):
    if all(not meas_pays[c] for c in batches[i:]):
        meas_x = b
        break
def step(x):
    return batches.index(x) if x in batches else len(batches)
summary = dict(rows=rows, predicted_crossover=pred_x, measured_crossover=meas_x,
               crossover_within_one_step=abs(step(pred_x) - step(meas_x)) <= 1,
               throughput_within_15pct=all(abs(r["ratio"] - 1) <= 0.15 for r in rows),
               margin=margin, rounds=rounds, stat=stat)
json.dump(summary, open(f"{out}/measured.json", "w"), indent=2)
with open(f"{out}/measured.txt", "w") as f:
    f.write(f"{'batch':>5} {'tree':>7} {'tok/step pred':>13} {'meas':>6} {'tok/s pred':>10} "
            f"{'meas':>8} {'ratio':>6} {'plain pred':>10} {'meas':>8} {'speedup pred':>12} {'meas':>6}  pays pred/meas\n")
    for r in rows:
        f.write(f"{r['batch']:>5} {r['tree_size']:>3}/{r['tree_depth']:<3} {r['predicted_tokens_per_step']:>13.3f} "
                f"{r['measured_tokens_per_step']:>6.3f} {r['predicted_tokens_per_s']:>10.0f} "
                f"{r['measured_tokens_per_s']:>8.0f} {r['ratio']:>6.3f} {r['predicted_plain_tokens_per_s']:>10.0f} "
                f"{r['measured_plain_tokens_per_s']:>8.0f} {r['predicted_speedup']:>12.3f} "
                f"{r['measured_speedup']:>6.3f}  {'yes' if r['predicted_pays'] else 'no'}/{'yes' if r['measured_pays'] else 'no'}\n")
    o = "mean" if stat == "p10" else "p10"
    f.write(f"\n{'batch':>5} {'step ms pred':>12} {'meas':>7} {'target forward ms (run)':>24} "
            f"{'tok/s meas (' + o + ')':>20} {'ratio':>6}\n")
    for r in rows:
        ot = r[f"measured_tokens_per_s_{o}"]
        f.write(f"{r['batch']:>5} {r['predicted_step_ms']:>12.2f} {r['measured_step_ms']:>7.2f} "
                f"{r['measured_target_forward_ms']:>24.2f} {ot:>20.0f} "
                f"{ot / r['predicted_tokens_per_s']:>6.3f}\n")
    f.write(f"\nstatistic: {stat} (profiles' {stat}; runs rated by their batch steps' "
            f"{'p10 time' if stat == 'p10' else 'total decoding time'}, prefill left out), "
            f"median of {rounds} rounds\n")
    f.write(f"predicted crossover: batch {pred_x or 'none'}; measured: batch {meas_x or 'none'} "
            f"({'within' if summary['crossover_within_one_step'] else 'NOT within'} one batch step)\n")
    f.write(f"throughput within 15% of the prediction at every batch size: "
            f"{'yes' if summary['throughput_within_15pct'] else 'no'}\n")
print(open(f"{out}/measured.txt").read())
EOF
