#!/usr/bin/env bash
# The planner's choice of envelope for this CPU (issue 26): sequoia-plan --engine E --ladder from
# the batch profiles of examples/ladder.sh (one thread; data/ladder: the shipped models,
# data/ladder-large: the 18M target), budget 64, greedy and topk at T = 1. Pairs: shipped
# (draft -> target), large (draft -> large), target-large (target -> large):
#
#   data/dynamic/choose.sh > /dev/null     (writes data/dynamic/plan-PAIR-ENGINE-CONFIG.{json,txt})
set -euo pipefail
cd "$(dirname "$0")/../.."
PLAN=${BUILD:-build}/planner/sequoia-plan
for pair in shipped large target-large; do
    tprof=data/ladder/profile_target.json dprof=data/ladder/profile_draft.json
    [ $pair = large ] && tprof=data/ladder-large/profile_target.json dprof=data/ladder-large/profile_draft.json
    [ $pair = target-large ] && tprof=data/ladder-large/profile_target.json dprof=data/ladder/profile_target.json
    for engine in sglang trtllm-dynamic; do
        for cfg in greedy@T0 topk@T1; do
            case $cfg in greedy*) curves=data/dynamic/curves-$pair-greedy.json ;;
                         *) curves=data/dynamic/curves-$pair-T1.json ;; esac
            out=data/dynamic/plan-$pair-$engine-${cfg%%@*}
            "$PLAN" -a "$curves" --curve "$cfg" --engine $engine --target-profile "$tprof" \
                --draft-profile "$dprof" -n 64 \
                --path text --ladder -o "$out.json" > "$out.txt"
            echo "$out.txt"
        done
    done
done
