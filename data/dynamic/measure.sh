#!/bin/sh
# Tokens/step of the engines' dynamic trees (issue 26), executed by sequoia-run --engine: the
# envelopes of ENVELOPES on the shipped pair (data/models/draft -> data/models/target) and the
# 18M pair (data/models/target -> data/models/large), greedy and T = 1 (mode topk, the engines'
# target-only sampling), NEW tokens from each prompt of PROMPTS (default the 8 prompts of
# data/ladder-large/prompts.txt) decoded as one batch (a sequence decodes the same tokens alone
# and in a batch; greedy runs also --validate it against target-only decoding unless
# VALIDATE=0; MODES="stochastic" measures Sequoia's verifier on the same trees at T = 1).
# Writes OUT/NAME.json and OUT/NAME.txt (NAME default "measured"); see data/dynamic/README.md.
# Every run's row is kept in OUT/NAME.rows/ as it finishes, and a row already there is not run
# again, so a stopped measurement resumes where it stopped (delete the folder to start over).
# PAIRS: the pairs (default "shipped large"); KEEP: a folder that keeps every run's report;
# TABLES_ONLY=1: run nothing, write the tables from the rows there are.
#   usage: data/dynamic/measure.sh [BUILD [OUT]]   (from the source root)
set -eu
BUILD=${1:-build}
OUT=${2:-data/dynamic}
NEW=${NEW:-200}
THREADS=${THREADS:-1}
ENGINE=${ENGINE:-sglang}
NAME=${NAME:-measured}
VALIDATE=${VALIDATE:-1}
MODES=${MODES:-"greedy topk"}
ENVELOPES=${ENVELOPES:-"4,1,5 2,2,4 3,4,8 5,4,8 7,2,12 5,4,16 3,8,16 6,4,24 4,8,32 8,4,32 8,8,64"}
RUN="$BUILD/runtime/sequoia-run"
PROMPTS=${PROMPTS:-data/ladder-large/prompts.txt}
BATCH=$(grep -c . "$PROMPTS")
ROWS="$OUT/$NAME.rows"
mkdir -p "$ROWS"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
for pair in ${PAIRS:-shipped large}; do
    if [ $pair = shipped ]; then D=data/models/draft; T=data/models/target
    else D=data/models/target; T=data/models/large; fi
    for mode in $MODES; do
        for env in $ENVELOPES; do
            row="$ROWS/$pair-$mode-$env.json"
            [ -s "$row" ] || [ "${TABLES_ONLY:-0}" = 1 ] && continue
            extra="--no-baseline"
            [ $mode = greedy ] && [ "$VALIDATE" = 1 ] && extra="--validate"
            [ $mode != greedy ] && extra="$extra --temperature 1 --seed 1"
            "$RUN" --draft $D --target $T --engine "$ENGINE" --envelope "$env" \
                --prompt "$PROMPTS" --batch "$BATCH" -n "$NEW" --mode $mode $extra \
                --threads "$THREADS" -q --report "$TMP/r.json" -o "$TMP/o.txt" 2> "$TMP/err.txt" ||
                { cat "$TMP/err.txt" >&2; exit 1; }
            [ -z "${KEEP:-}" ] || { mkdir -p "$KEEP"; cp "$TMP/r.json" "$KEEP/$pair-$mode-$env.json"; }
            python3 - "$TMP/r.json" "$pair" "$env" "$PROMPTS" > "$TMP/row.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
t = r["tokens_per_step"]
v = r.get("validation", {})
out = {"pair": sys.argv[2], "prompts": sys.argv[4], "draft": r["setup"]["draft"], "target": r["setup"]["target"],
       "engine": r["dynamic"]["engine"], "envelope": [int(x) for x in sys.argv[3].split(",")],
       "mode": r["setup"]["mode"], "temperature": r["setup"]["temperature"],
       "sequences": r["batch"]["size"], "max_new_tokens": r["setup"]["max_new_tokens"],
       "steps": t["steps"], "tokens_per_step": t["mean"], "ci95": t["ci95"],
       "greedy_equals_target": v.get("greedy", {}).get("identical_to_target_greedy") if r["setup"]["mode"] == "greedy" else None}
print(json.dumps(out))
PY
            mv "$TMP/row.json" "$row"
        done
    done
done
python3 - "$OUT" "$NAME" "${PAIRS:-shipped large}" "$MODES" "$ENVELOPES" <<'PY'
import json, os, sys
out, name = sys.argv[1], sys.argv[2]
rows = [json.load(open(f)) for f in ("%s/%s.rows/%s-%s-%s.json" % (out, name, p, m, e)
        for p in sys.argv[3].split() for m in sys.argv[4].split() for e in sys.argv[5].split())
        if os.path.exists(f)]   # a row not measured (yet) is left out
json.dump({"format": "sequoia-dynamic-measured", "version": 1, "rows": rows},
          open("%s/%s.json" % (out, name), "w"), indent=1)
with open("%s/%s.txt" % (out, name), "w") as f:
    f.write("%-8s %-7s %-9s %8s %7s %16s %s\n" % ("pair", "mode", "envelope", "tok/step",
            "steps", "ci95", "greedy=target"))
    for r in rows:
        ci = r["ci95"] or [float("nan")] * 2
        g = "" if r["greedy_equals_target"] is None else ("yes" if r["greedy_equals_target"] else "NO")
        f.write("%-8s %-7s %-9s %8.3f %7d %7.3f..%-7.3f %s\n" % (r["pair"], r["mode"],
                ",".join(map(str, r["envelope"])), r["tokens_per_step"], r["steps"], ci[0], ci[1], g))
PY
cat "$OUT/$NAME.txt"
