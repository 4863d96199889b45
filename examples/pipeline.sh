#!/usr/bin/env bash
# The whole toolkit on the shipped draft/target pair (data/models), on this machine:
#   corpus dump -> acceptance curves -> latency profiles -> plans -> validated runs,
# then a table of predicted against measured tokens/step and time/token per setting, Sequoia
# against SpecInfer verification on one tree, and the optimal tree against a k x L tree of the
# same size (as in the paper's §5).
#
#   ./setup.sh && examples/pipeline.sh [OUT_DIR]        (default: a fresh folder under $TMPDIR)
#
# Environment: BUILD (default build), THREADS (default 1: these models are tiny, and one thread
# is fastest for them), PROMPTS (prompts per setting, default 6), NEW_TOKENS (default 128).
set -euo pipefail
. "$(dirname "$0")/out_dir.sh"   # OUT: the caller's OUT_DIR, else a fresh folder
example_out_dir pipeline "${1:-}"
cd "$(dirname "$0")/.."

BUILD=${BUILD:-build}
THREADS=${THREADS:-1}
PROMPTS=${PROMPTS:-6}
NEW_TOKENS=${NEW_TOKENS:-128}
DRAFT=data/models/draft
TARGET=data/models/target
HELDOUT=data/heldout.txt
PLAN=$BUILD/planner/sequoia-plan
ACCEPT=$BUILD/planner/sequoia-accept
PROFILE=$BUILD/profiler/sequoia-profile
RUN=$BUILD/runtime/sequoia-run

for tool in "$PLAN" "$ACCEPT" "$PROFILE" "$RUN"; do
    if [ ! -x "$tool" ]; then
        echo "pipeline.sh: $tool is missing: run ./setup.sh first" >&2
        exit 66
    fi
done
mkdir -p "$OUT"
say() { printf '\n== %s\n' "$*" >&2; }
# bytes -> token ids (the models are byte-level: token id = byte value)
bytes_to_ids() { od -An -v -tu1 | tr -s ' \n' '\n' | sed '/^$/d'; }

say "1. token files from the held-out text ($HELDOUT)"
# corpus: the first 32 KiB, one sequence per 256 bytes (the models' training window)
head -c 32768 "$HELDOUT" | bytes_to_ids |
    awk '{ printf "%s%s", $1, (NR % 256 == 0 ? "\n\n" : " ") } END { print "" }' > "$OUT/corpus_tokens.txt"
# prompts: 64-byte pieces from later in the held-out text, disjoint from the corpus
for i in $(seq 0 $((PROMPTS - 1))); do
    head -c $((65536 + i * 8192 + 64)) "$HELDOUT" | tail -c 64 | bytes_to_ids | tr '\n' ' ' > "$OUT/prompt$i.txt"
    echo >> "$OUT/prompt$i.txt"
done

say "2. corpus: teacher-forced logits of both models (sequoia-run dump)"
"$RUN" dump --draft "$DRAFT" --target "$TARGET" --tokens "$OUT/corpus_tokens.txt" \
    -o "$OUT/corpus.h5" --context 256 --threads "$THREADS"

say "3. acceptance curves (sequoia-accept)"
"$ACCEPT" "$OUT/corpus.h5" --mode greedy,stochastic,specinfer --temperature 0.6,1.0 --width 16 \
    --seed 1 -o "$OUT/curves.json" --svg "$OUT/curves.svg"

say "4. latency profiles of both models on this machine (sequoia-profile)"
for m in target draft; do
    dir=$TARGET
    [ "$m" = draft ] && dir=$DRAFT
    "$PROFILE" --model "$dir" --max-tokens 128 --prefix 256 --warmup 5 --repeat 31 \
        --threads "$THREADS" -o "$OUT/profile_$m.json" --svg "$OUT/profile_$m.svg" --quiet
done

say "5. plans (sequoia-plan): the fastest tree per setting, and fixed 33-node trees"
settings="greedy:greedy@T0:0 stochastic:stochastic@T0.6:0.6 stochastic:stochastic@T1:1"
for s in $settings; do
    IFS=: read -r mode curve temp <<< "$s"
    "$PLAN" -a "$OUT/curves.json" -c "$curve" --budget 64 --depth 10 \
        --target-profile "$OUT/profile_target.json" --draft-profile "$OUT/profile_draft.json" \
        -o "$OUT/plan_$curve.json" --svg "$OUT/plan_$curve.svg" > "$OUT/plan_$curve.txt"
done
# the paper's comparisons on one size: the optimal 33-node tree (depth <= 9) ...
"$PLAN" -a "$OUT/curves.json" -c stochastic@T1 --budget 33 --depth 9 -o "$OUT/plan33_optimal.json" \
    --svg "$OUT/plan33_optimal.svg" --svg-table "$OUT/table.svg" > /dev/null
# ... the same tree scored under the SpecInfer curve (exported as a choices list, then imported
# with that curve; the Medusa list, since TensorRT-LLM refuses 33 nodes, see docs/engines.md) ...
"$PLAN" --plan "$OUT/plan33_optimal.json" --export medusa -o "$OUT/plan33_choices.json"
"$PLAN" --import choices "$OUT/plan33_choices.json" -a "$OUT/curves.json" -c specinfer@T1 \
    -o "$OUT/plan33_optimal_specinfer.json" > /dev/null
# ... and SpecInfer's shape: 4 independent sequences of 8 tokens (k x L = 4 x 8, 33 nodes)
python3 - "$OUT/kxl_choices.json" <<'PY'
import json, sys
k, L = 4, 8
json.dump([[i] + [0] * j for j in range(L) for i in range(k)], open(sys.argv[1], "w"))
PY
"$PLAN" --import choices "$OUT/kxl_choices.json" -a "$OUT/curves.json" -c stochastic@T1 \
    -o "$OUT/plan33_kxl.json" > /dev/null

say "6. validated runs (sequoia-run): $PROMPTS prompts x $NEW_TOKENS new tokens per setting"
run_setting() { # name plan mode temperature
    local name=$1 plan=$2 mode=$3 temp=$4
    for i in $(seq 0 $((PROMPTS - 1))); do
        local extra=()
        [ "$i" -eq 0 ] && extra=(--validate --validate-samples 600)
        "$RUN" --draft "$DRAFT" --target "$TARGET" --plan "$plan" --prompt "$OUT/prompt$i.txt" \
            -n "$NEW_TOKENS" --mode "$mode" --temperature "$temp" --seed $((1000 + i)) \
            --threads "$THREADS" -o "$OUT/out_${name}_$i.txt" --report "$OUT/report_${name}_$i.json" \
            "${extra[@]}" 2> "$OUT/run_${name}_$i.log" ||
            { echo "pipeline.sh: sequoia-run failed for $name prompt $i (see $OUT/run_${name}_$i.log)" >&2; exit 1; }
    done
}
for s in $settings; do
    IFS=: read -r mode curve temp <<< "$s"
    run_setting "$curve" "$OUT/plan_$curve.json" "$mode" "$temp"
done
run_setting sequoia33 "$OUT/plan33_optimal.json" stochastic 1
run_setting specinfer33 "$OUT/plan33_optimal_specinfer.json" specinfer 1
run_setting kxl33 "$OUT/plan33_kxl.json" stochastic 1

say "7. predicted against measured"
python3 - "$OUT" "$PROMPTS" <<'PY'
import json, math, sys
out, prompts = sys.argv[1], int(sys.argv[2])

def load(p):
    return json.load(open(p))

def run_report(p):
    # a single run's report: the fields read here are the same in sequoia-run-report v1 and v2
    r = load(p)
    if r.get("format") != "sequoia-run-report" or r.get("version") not in (1, 2):
        sys.exit(f"pipeline.sh: {p}: not a sequoia-run-report v1 or v2")
    return r

def measured(name):
    steps, tok, spec_ms, ar_ms, ar_tok, valid = [], 0, 0.0, 0.0, 0, []
    for i in range(prompts):
        r = run_report(f"{out}/report_{name}_{i}.json")
        steps += r["step_tokens"]
        tok += r["generated_tokens"]
        spec_ms += r["timing"]["speculative_ms"]
        ar_ms += r["timing"].get("autoregressive_ms") or 0.0
        ar_tok += len(r.get("autoregressive", {}).get("tokens", []))
        if "validation" in r:
            valid.append(r["validation"].get("pass"))
    n = len(steps)
    mean = sum(steps) / n
    # the steps taken as independent (every prompt's steps pooled; hundreds of them, so the
    # normal quantile); too few steps give no interval, and a step outputs at least one token
    # (issue 27: an interval below 1 token/step, a division by zero for one step)
    if n >= 30:
        sd = math.sqrt(sum((x - mean) ** 2 for x in steps) / (n - 1))
        half = 1.96 * sd / math.sqrt(n)
        lo, hi = max(mean - half, 1.0), mean + half
    else:
        lo = hi = float("nan")
    return {"mean": mean, "lo": lo, "hi": hi, "steps": n,
            "ms_tok": spec_ms / tok, "ar_ms_tok": ar_ms / ar_tok if ar_tok else float("nan"),
            "valid": all(valid) if valid else None}

def fci(m):
    return f"[{m['lo']:.3f}, {m['hi']:.3f}]" if not math.isnan(m["lo"]) else f"(no CI: {m['steps']} steps)"

rows = []
print(f"{'setting':<16} {'tree':>9} {'tokens/step':>12} {'measured [95% CI]':>26} "
      f"{'ms/token':>9} {'measured':>9} {'target':>8} {'speedup':>8} {'valid':>6}")
for curve in ("greedy@T0", "stochastic@T0.6", "stochastic@T1"):
    plan = load(f"{out}/plan_{curve}.json")
    m = measured(curve)
    hw = plan["hardware"]
    pred_ms = hw["time_per_token_ms"]
    print(f"{curve:<16} {plan['size']:>4}/{plan['depth']:<4} {plan['expected_tokens']:>12.3f} "
          f"{m['mean']:>9.3f} {fci(m)} {pred_ms:>9.3f} {m['ms_tok']:>9.3f} "
          f"{m['ar_ms_tok']:>8.3f} {m['ar_ms_tok'] / m['ms_tok']:>7.2f}x {str(m['valid']):>6}")
    rows.append({"setting": curve, "size": plan["size"], "depth": plan["depth"],
                 "predicted_tokens_per_step": plan["expected_tokens"],
                 "measured_tokens_per_step": m["mean"], "ci95": None if math.isnan(m["lo"]) else [m["lo"], m["hi"]],
                 "steps": m["steps"], "predicted_ms_per_token": pred_ms,
                 "measured_ms_per_token": m["ms_tok"], "target_alone_ms_per_token": m["ar_ms_tok"],
                 "predicted_speedup": hw["predicted_speedup"],
                 "measured_speedup": m["ar_ms_tok"] / m["ms_tok"], "validated": m["valid"]})

print("\nthe same 33-node tree (depth <= 9) at T = 1.0, by verification algorithm:")
for name, plan_file, label in (("sequoia33", "plan33_optimal.json", "Sequoia (without replacement)"),
                               ("specinfer33", "plan33_optimal_specinfer.json", "SpecInfer (with replacement)")):
    plan = load(f"{out}/{plan_file}")
    m = measured(name)
    print(f"  {label:<30} predicted {plan['expected_tokens']:.3f}, measured {m['mean']:.3f} "
          f"{fci(m)} tokens/step")
    rows.append({"setting": name, "size": plan["size"], "predicted_tokens_per_step": plan["expected_tokens"],
                 "measured_tokens_per_step": m["mean"], "ci95": None if math.isnan(m["lo"]) else [m["lo"], m["hi"]], "steps": m["steps"]})

print("\n33-node trees at T = 1.0 with Sequoia verification, by shape:")
for name, plan_file, label in (("sequoia33", "plan33_optimal.json", "optimal (DP)"),
                               ("kxl33", "plan33_kxl.json", "k x L = 4 x 8")):
    plan = load(f"{out}/{plan_file}")
    m = measured(name)
    print(f"  {label:<30} predicted {plan['expected_tokens']:.3f}, measured {m['mean']:.3f} "
          f"{fci(m)} tokens/step")
    if name == "kxl33":
        rows.append({"setting": name, "size": plan["size"], "predicted_tokens_per_step": plan["expected_tokens"],
                     "measured_tokens_per_step": m["mean"], "ci95": None if math.isnan(m["lo"]) else [m["lo"], m["hi"]], "steps": m["steps"]})
json.dump({"format": "sequoia-pipeline-summary", "version": 1, "rows": rows},
          open(f"{out}/summary.json", "w"), indent=1)
print(f"\nall outputs in {out}/ (summary.json, curves.svg, plan_*.svg, profile_*.svg, table.svg)")
PY
