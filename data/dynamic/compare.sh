#!/usr/bin/env bash
# Predicted (predicted-*.txt, this folder) against measured (the runtime's measured.txt and
# measured-stochastic.txt, sequoia-run --engine sglang, issue 26) tokens/step, envelope by
# envelope. The runtime's pair "large" is the 18M target drafted by data/models/target, here
# "target-large".
#
#   data/dynamic/compare.sh [MEASURED.txt ...]     (default: measured.txt measured-stochastic.txt)
#
# SUFFIX=-insample compares the predictions from curves of the runtime's own prompts
# (predicted-PAIR-insample-MODE.txt) instead.
set -euo pipefail
cd "$(dirname "$0")"
files=("$@")
[ ${#files[@]} -gt 0 ] || files=(measured.txt measured-stochastic.txt)
printf '%-8s %-11s %-8s %9s %17s %9s %7s\n' pair mode L,K,N measured ci95 predicted diff
for f in "${files[@]}"; do
    [ -f "$f" ] || continue
    awk 'NR > 1 && $3 ~ /^[0-9]+,[0-9]+,[0-9]+$/ {print $1, $2, $3, $4, $6}' "$f" |
    while read -r pair mode env meas ci; do
        mine=$pair; [ "$pair" = large ] && mine=target-large
        mine=$mine${SUFFIX:-}
        pred=$(awk -v e="$env" '$1 == e {print $2}' "predicted-$mine-$mode.txt" 2>/dev/null || true)
        [ -n "$pred" ] || continue
        awk -v p="$pair" -v m="$mode" -v e="$env" -v x="$meas" -v c="$ci" -v y="$pred" \
            'BEGIN {printf "%-8s %-11s %-8s %9.3f %17s %9.3f %+6.1f%%\n", p, m, e, x, c, y, 100 * (y / x - 1)}'
    done
done
