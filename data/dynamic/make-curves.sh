#!/usr/bin/env bash
# Curves with the dynamic-tree statistics (issue 26) for one draft/target pair, from the target's
# own continuations of 32 held-out prompts (as examples/ladder.sh's step 1b): the greedy corpus is
# the target's greedy decoding (what greedy runs decode), the T = 1 corpus its sampled decoding at
# T = 1 (what topk and stochastic runs at T = 1 decode).
#
#   data/dynamic/make-curves.sh NAME DRAFT TARGET      (writes data/dynamic/curves-NAME-*.json)
#
# The dynamic-tree statistics leave out each sequence's first 63 positions (the prompt: decoding
# starts from the prompt's last position, 63), and get their off-path contexts from a second
# corpus: the text up to a sampled position, then the best draft token the text did not take. 
# Environment: BUILD (default build), THREADS (default 1), NEW_TOKENS (default 128), SAMPLES (the
# statistics' positions, default 4096), PROMPTS (a file of other 64-token prompts, separated by
# empty lines), OUTDIR (default data/dynamic), MODES (default "greedy T1": which corpora).
set -euo pipefail
cd "$(dirname "$0")/../.."
NAME=$1 DRAFT=$2 TARGET=$3
BUILD=${BUILD:-build}
THREADS=${THREADS:-1}
NEW_TOKENS=${NEW_TOKENS:-128}
SAMPLES=${SAMPLES:-4096}
PLAN=$BUILD/planner/sequoia-plan
ACCEPT=$BUILD/planner/sequoia-accept
RUN=$BUILD/runtime/sequoia-run
TMP=$(mktemp -d "${TMPDIR:-/tmp}/dyncurves.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
bytes_to_ids() { od -An -v -tu1 | tr -s ' \n' '\n' | sed '/^$/d'; }
"$PLAN" -a data/pipeline/curves.json -c greedy@T0 -n 1 -d 1 -o "$TMP/root.json" 2>/dev/null
if [ -n "${PROMPTS:-}" ]; then
    cp "$PROMPTS" "$TMP/prompts.txt"   # prompts of 64 tokens, separated by empty lines
else
    : > "$TMP/prompts.txt"
    for i in $(seq 0 31); do
        head -c $((i * 1024 + 64)) data/heldout.txt | tail -c 64 | bytes_to_ids | tr '\n' ' ' >> "$TMP/prompts.txt"
        printf '\n\n' >> "$TMP/prompts.txt"
    done
fi
BATCH=$(grep -c . "$TMP/prompts.txt")
for m in ${MODES:-greedy T1}; do
    if [ $m = greedy ]; then opts=(--mode greedy); accept=(--mode greedy);
    else opts=(--mode topk --temperature 1 --seed 7); accept=(--mode topk,stochastic --temperature 1); fi
    "$RUN" --draft "$DRAFT" --target "$TARGET" --plan "$TMP/root.json" --prompt "$TMP/prompts.txt" \
        --batch "$BATCH" -n "$NEW_TOKENS" "${opts[@]}" --threads "$THREADS" --no-baseline \
        -o "$TMP/generated.txt" 2>/dev/null
    paste -d ' ' <(sed '/^$/d' "$TMP/prompts.txt") "$TMP/generated.txt" | sed 's/$/\n/' > "$TMP/tokens.txt"
    "$RUN" dump --draft "$DRAFT" --target "$TARGET" --tokens "$TMP/tokens.txt" -o "$TMP/corpus.h5" \
        --context $((64 + NEW_TOKENS)) --threads "$THREADS" --compression 0 2>/dev/null
    # off-path contexts: where the engine's rejected siblings start (the best draft token the
    # text did not take, at every 4th sampled position), dumped as branches of the text
    "$ACCEPT" "$TMP/corpus.h5" "${accept[@]}" --width 16 --seed 1 -q --dynamic-skip 63 --dynamic-samples "$SAMPLES" \
        --dynamic-segment 256 --dynamic-branches "$TMP/branches.txt" -o "$TMP/first.json"
    awk 'NR == FNR { if (NF) seq[n++] = $0; next }
         { split(seq[$2], t, " "); line = ""
           for (i = 1; i <= $3 + 1; i++) line = line t[i] " "
           print line $4 " 0"; print "" }' "$TMP/tokens.txt" "$TMP/branches.txt" > "$TMP/branches-tokens.txt"
    "$RUN" dump --draft "$DRAFT" --target "$TARGET" --tokens "$TMP/branches-tokens.txt" \
        -o "$TMP/branches.h5" --context $((64 + NEW_TOKENS + 2)) --threads "$THREADS" \
        --compression 0 2>/dev/null
    "$ACCEPT" "$TMP/corpus.h5" "${accept[@]}" --width 16 --seed 1 -q --dynamic-skip 63 --dynamic-samples "$SAMPLES" \
        --dynamic-segment 256 --dynamic-offpath "$TMP/branches.h5" -o "${OUTDIR:-data/dynamic}/curves-$NAME-$m.json"
    rm -f "$TMP/corpus.h5" "$TMP/branches.h5"
done
