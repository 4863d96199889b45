#!/usr/bin/env bash
# The two-fold held-out test of the dynamic-tree prediction (issue 26): 64 prompts of 64 bytes
# of data/heldout.txt (offsets 3072 j + 1536, j = 0..63, none overlapping the prompts of
# data/dynamic/ or data/ladder-large/), fold A the even j, fold B the odd j. For each fold and
# pair: curves from the target's own continuations of the fold's prompts (make-curves.sh,
# 200 tokens as the runs, every decoded position: SAMPLES = 32 x 200), the runtime's tokens/step
# of the 11 envelopes on the fold's prompts (measure.sh, one batch of 32, 200 tokens, greedy,
# topk@T1 and stochastic@T1, no baseline), the predictions (predict.sh), then compare.py: each
# fold's curves against the other fold's runs.
#
#   data/dynamic/heldout/run.sh [BUILD]     (from anywhere; resumes: what exists is kept)
#
# Environment: STEPS (default "prompts curves measure predict compare"), KEEP (a folder for the
# runs' reports, for positions.py). About 60 minutes on the 2-core AMD EPYC under load 4-9
# with curves and measurements side by side (the 18M pair takes most); twice that in turn.
set -euo pipefail
cd "$(dirname "$0")/../../.."
BUILD=${BUILD:-${1:-build}}
H=data/dynamic/heldout
ENVS="4,1,5 2,2,4 3,4,8 5,4,8 7,2,12 5,4,16 3,8,16 6,4,24 4,8,32 8,4,32 8,8,64"
pair_models() {
    if [ "$1" = shipped ]; then echo data/models/draft data/models/target
    else echo data/models/target data/models/large; fi
}
for step in ${STEPS:-prompts curves measure predict compare}; do
    case $step in
    prompts)
        [ -f $H/prompts-A.txt ] || python3 - <<'PY'
data = open("data/heldout.txt", "rb").read()
for fold, par in (("A", 0), ("B", 1)):
    with open("data/dynamic/heldout/prompts-%s.txt" % fold, "w") as f:
        for j in range(par, 64, 2):
            b = data[3072 * j + 1536:3072 * j + 1600]
            f.write(" ".join(str(x) for x in b) + "\n\n")
PY
        ;;
    curves)
        for m in greedy T1; do
            for pair in target-large shipped; do
                for f in A B; do
                    [ -f $H/curves-$pair-$f-$m.json ] && continue
                    echo "$(date -u +%T) curves $pair $f $m" >&2
                    BUILD=$BUILD MODES=$m PROMPTS=$H/prompts-$f.txt NEW_TOKENS=200 SAMPLES=6400 \
                        OUTDIR=$H data/dynamic/make-curves.sh $pair-$f $(pair_models $pair) > /dev/null
                done
            done
        done ;;
    measure)
        for pm in "large greedy" "shipped greedy" "large topk" "shipped topk" \
                  "shipped stochastic" "large stochastic"; do
            set -- $pm
            for f in A B; do
                echo "$(date -u +%T) measure $pm $f" >&2
                PAIRS=$1 MODES=$2 VALIDATE=0 NAME=measured-$f PROMPTS=$H/prompts-$f.txt \
                    ENVELOPES="$ENVS" ${KEEP:+KEEP=$KEEP/$f} data/dynamic/measure.sh "$BUILD" $H > /dev/null
            done
        done
        # the whole tables from every row
        for f in A B; do
            TABLES_ONLY=1 PAIRS="shipped large" MODES="greedy topk stochastic" NAME=measured-$f \
                PROMPTS=$H/prompts-$f.txt ENVELOPES="$ENVS" data/dynamic/measure.sh "$BUILD" $H > /dev/null
        done ;;
    predict)
        BUILD=$BUILD DIR=$H PAIRS="shipped-A shipped-B target-large-A target-large-B" \
            CONFIGS="greedy@T0 topk@T1 stochastic@T1" ENVELOPES="$ENVS" data/dynamic/predict.sh > /dev/null ;;
    compare)
        python3 $H/compare.py > $H/compared.txt
        cat $H/compared.txt ;;
    esac
done
