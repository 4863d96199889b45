#!/usr/bin/env bash
# Predicted tokens/step of the engines' dynamic trees (issue 26) for a list of envelopes, from the
# curves of data/dynamic/make-curves.sh, one table per pair and configuration:
#
#   data/dynamic/predict.sh > /dev/null      (writes data/dynamic/predicted-PAIR-CONFIG.txt)
#
# The same envelope predicts the same for SGLang and TensorRT-LLM (one algorithm); each row says
# which engines allow it (PAIRS: the pairs, default "shipped large target-large"). The corpora are the target's own decoding (greedy, and sampled at T = 1),
# so greedy and topk follow the text (--path text); stochastic draws its accepted child
# (--path draw). Environment: BUILD (default build), TRIALS (default 100000), DIR (the folder of
# the curves and of the tables, default data/dynamic), ENVELOPES and CONFIGS (default
# "greedy@T0 topk@T1 stochastic@T1") to predict fewer.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
TRIALS=${TRIALS:-100000}
PLAN=$BUILD/planner/sequoia-plan
# the runtime's measured envelopes (data/dynamic/measured.txt on main) first, then more
DIR=${DIR:-data/dynamic}
ENVELOPES=${ENVELOPES:-"4,1,5 2,2,4 3,4,8 5,4,8 7,2,12 5,4,16 3,8,16 6,4,24 4,8,32 8,4,32 8,8,64 1,1,2 2,1,3 3,1,4 5,1,6 8,1,9 3,2,6 4,2,8 4,4,16 2,8,16 6,8,32"}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/dynpred.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
for pair in ${PAIRS:-shipped large target-large}; do
    for cfg in ${CONFIGS:-greedy@T0 topk@T1 stochastic@T1}; do
        case $cfg in greedy*) curves=$DIR/curves-$pair-greedy.json ;;
                     *) curves=$DIR/curves-$pair-T1.json ;; esac
        [ -f "$curves" ] || continue
        out=$DIR/predicted-$pair-${cfg%%@*}.txt
        path=text; [ "${cfg%%@*}" = stochastic ] && path=draw
        {
            echo "# predicted tokens/step, $pair pair, $cfg, from $curves ($TRIALS trials)"
            echo "# $PLAN -a $curves --curve $cfg --engine sglang|trtllm-dynamic --envelope L,K,N --path $path --trials $TRIALS"
            printf '%-8s %9s %8s  %-22s %s\n' "L,K,N" "tokens" "stderr" "engines" "P(accepted >= d), d = 1..L"
            for env in $ENVELOPES; do
                engines=""
                for e in sglang trtllm-dynamic; do
                    if "$PLAN" -a "$curves" --curve "$cfg" --engine $e --envelope "$env" \
                        --path $path --trials "$TRIALS" -q -o "$TMP/p.json" 2>/dev/null; then
                        engines="$engines${engines:+,}$e"
                        cp "$TMP/p.json" "$TMP/ok.json"
                    fi
                done
                [ -n "$engines" ] || continue
                python3 - "$TMP/ok.json" "$env" "$engines" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
pr = p["prediction"]
print("%-8s %9.4f %8.4f  %-22s %s" % (sys.argv[2], p["expected_tokens"], pr["stderr"], sys.argv[3],
      " ".join("%.3f" % x for x in pr["p_accepted_at_least"])))
PY
            done
        } > "$out"
        echo "$out"
    done
done
