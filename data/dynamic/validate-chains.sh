#!/usr/bin/env bash
# A measured check of the dynamic-tree predictor where the static runtime can measure it: with
# K = 1 both engines' tree is the chain of the draft's top-1 tokens, L levels deep, i.e. the
# static chain of L + 1 nodes. sequoia-run decodes 16 held-out prompts (other than the corpus's,
# ladder.sh's offsets) x 128 new tokens with that chain, greedy and topk at T = 1 (target-only
# sampling: SQ_MODE_TOPK), and the table puts its tokens/step beside predicted-*.txt's.
#
#   data/dynamic/validate-chains.sh     (writes data/dynamic/chains-measured.txt)
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
PLAN=$BUILD/planner/sequoia-plan
RUN=$BUILD/runtime/sequoia-run
TMP=$(mktemp -d "${TMPDIR:-/tmp}/dynchains.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
bytes_to_ids() { od -An -v -tu1 | tr -s ' \n' '\n' | sed '/^$/d'; }
: > "$TMP/prompts.txt"
for i in $(seq 0 15); do
    head -c $((65536 + i * 8192 + 64)) data/heldout.txt | tail -c 64 | bytes_to_ids | tr '\n' ' ' >> "$TMP/prompts.txt"
    printf '\n\n' >> "$TMP/prompts.txt"
done
out=data/dynamic/chains-measured.txt
{
echo "# K = 1 envelopes L,1,L+1: sequoia-run with the static chain of L+1 nodes, 16 prompts x 128 tokens, --batch 16, one thread"
printf '%-13s %-8s %-8s %9s %17s %9s %7s\n' pair mode L,K,N measured "95% CI" predicted "diff"
for pair in shipped large target-large; do
    case $pair in shipped) d=data/models/draft t=data/models/target ;;
                  large) d=data/models/draft t=data/models/large ;;
                  target-large) d=data/models/target t=data/models/large ;; esac
    for mode in greedy topk; do
        for L in 1 3 5 8; do
            env="$L,1,$((L + 1))"
            "$PLAN" -a data/dynamic/curves-shipped-greedy.json -c greedy@T0 -n $((L + 1)) -d $((L + 1)) -w 1 \
                -o "$TMP/chain.json" -q
            opts=(--mode greedy); [ $mode = topk ] && opts=(--mode topk --temperature 1 --seed 3)
            "$RUN" --draft $d --target $t --plan "$TMP/chain.json" --prompt "$TMP/prompts.txt" \
                --batch 16 -n 128 "${opts[@]}" --threads 1 --no-baseline --report "$TMP/r.json" \
                -o "$TMP/out.txt" 2>/dev/null
            pred=$(awk -v e="$env" '$1 == e {print $2}' data/dynamic/predicted-$pair-$mode.txt)
            python3 - "$TMP/r.json" "$pair" "$mode" "$env" "$pred" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))["tokens_per_step"]
p = float(sys.argv[5])
print("%-13s %-8s %-8s %9.4f   [%6.4f %6.4f] %9.4f %+6.1f%%" % (sys.argv[2], sys.argv[3], sys.argv[4],
      r["mean"], r["ci95"][0], r["ci95"][1], p, 100 * (p / r["mean"] - 1)))
PY
        done
    done
done
} > "$out"
cat "$out"
