#!/usr/bin/env bash
# The planner's choice of envelope for this CPU (issue 26): sequoia-plan --engine E --ladder from
# the batch profiles of examples/ladder.sh (data/ladder: shipped pair, data/ladder-large: the 18M
# target drafted by data/models/draft; one thread), budget 64, greedy and topk at T = 1:
#
#   data/dynamic/choose.sh > /dev/null     (writes data/dynamic/plan-PAIR-ENGINE-CONFIG.{json,txt})
set -euo pipefail
cd "$(dirname "$0")/../.."
PLAN=${BUILD:-build}/planner/sequoia-plan
for pair in shipped large; do
    prof=data/ladder; [ $pair = large ] && prof=data/ladder-large
    for engine in sglang trtllm-dynamic; do
        for cfg in greedy@T0 topk@T1; do
            case $cfg in greedy*) curves=data/dynamic/curves-$pair-greedy.json ;;
                         *) curves=data/dynamic/curves-$pair-T1.json ;; esac
            out=data/dynamic/plan-$pair-$engine-${cfg%%@*}
            "$PLAN" -a "$curves" --curve "$cfg" --engine $engine --target-profile \
                "$prof/profile_target.json" --draft-profile "$prof/profile_draft.json" -n 64 \
                --path text --ladder -o "$out.json" > "$out.txt"
            echo "$out.txt"
        done
    done
done
