#!/bin/sh
# The estimator's cost per position, two sequoia-accept binaries side by side (issue 27, item 4).
#
#   tests/bench/accept-cpu.sh OLD_BIN NEW_BIN [ROWS] [REPS] [CORPORA]
#
# Writes synthetic corpora with examples/dump_corpus.py (V = 32000, 16 sequences of ROWS/16
# positions; default ROWS 1024): CORPORA is a comma list of f16z (float16, shuffle + deflate 1:
# what the dumper writes by default, i.e. what a new user gets) and f32 (float32, no filter;
# default both). Then REPS rounds (default 5); each round runs both binaries on each corpus with
# 1 and 2 threads, the binaries' order alternating from round to round (interleaved, so that a
# change of load hits both alike): stochastic mode, T = 0.6, W = 16, one sample per position,
# the whole process (SHA-256 of the corpus included). Per run: wall time and CPU time
# (user + sys of the process). Prints every run, then per (corpus, binary, threads) the medians:
# positions per CPU-second (the per-core cost, little affected by load), positions per wall
# second (which the load affects), and the two-thread speed-up by wall time; the load average
# before and after each run; the CPU model and its vector extensions. The outputs of the two
# binaries are compared (the "tool" string aside): same corpora, same seed, same bytes.
#
# The estimator has scalar, AVX2 and AVX-512 paths (AVX-512 since issue 27's fourth round; a
# binary from before runs AVX2 on an AVX-512 host), all giving the same bits. SQ_CPU_ISA=avx2 (or
# scalar) in the environment makes both binaries run that path, e.g. to measure an AVX2 host's
# figures on an AVX-512 one; the header prints the setting. Needs a python3 with numpy and h5py
# (SQ_PYTHON, else python3, else /usr/bin/python3). Run it when the machine is quiet for
# wall-clock figures.
#
# Against the official estimators: with OFFICIAL=DIR (a checkout of Infini-AI-Lab/Sequoia, see
# docs/benchmarks.md), every round also runs tests/bench/official_accept.py on the first
# OFFICIAL_ROWS rows (default 256) of each corpus, with its two estimators (fast_test: the
# same Rao-Blackwellised estimator as ours; test_accept: SpecTreeTest, one coin per position)
# and torch on 1 and 2 threads, in the same interleaved order; the python3 must then also have
# torch. Their CPU time is that of the estimator's calls only (not reading the corpus, not
# starting Python), ours that of the whole process, so the ratio is, if anything, unfavourable
# to ours. A second ratio compares whole with whole: their CPU time with their reading of the
# same rows (h5py: HDF5's inflate and unshuffle, the float16 widening, the padding;
# official_accept.py's read_cpu_s), still without starting Python; ours reads, inflates and
# hashes the corpus and computes the dynamic-tree statistics too. Prints their medians, the
# ratio per core (positions per CPU-second, ours / theirs, at equal threads), and whether the
# curves agree (official_accept.py --compare). Their runs get OMP_WAIT_POLICY=PASSIVE: torch's
# OpenMP workers otherwise spin while they wait, which on busy cores bills them CPU time for
# nothing (and would flatter the ratio).
#
# ACCEPT_ARGS: more options for both binaries, e.g. ACCEPT_ARGS='--dynamic-samples 0' (no
# dynamic-tree statistics: the curves alone, what the official estimators compute).
#
# Build OLD and NEW the same way (meson's default debugoptimized, as main's build, or both
# --buildtype=release): the build type alone moved the float32 figure by about 10% before issue
# 27's fifth round (the SHA-256 loop at -O2), so mixing them measures the compiler.
set -eu
[ $# -ge 2 ] || { sed -n '2,47p' "$0" >&2; exit 64; }
OLD=$1
NEW=$2
ROWS=${3:-1024}
REPS=${4:-5}
CORPORA=${5:-f16z,f32}
here=$(cd "$(dirname "$0")/../.." && pwd)
for b in "$OLD" "$NEW"; do
    [ -x "$b" ] || { echo "accept-cpu.sh: $b: not an executable" >&2; exit 66; }
done
OFFICIAL=${OFFICIAL:-}
OFFICIAL_ROWS=${OFFICIAL_ROWS:-256}
mods='numpy, h5py'
if [ -n "$OFFICIAL" ]; then
    [ -d "$OFFICIAL" ] || { echo "accept-cpu.sh: OFFICIAL=$OFFICIAL: not a directory" >&2; exit 66; }
    mods='numpy, h5py, torch'
fi
PY=
for p in "${SQ_PYTHON:-}" python3 /usr/bin/python3; do
    [ -n "$p" ] || continue
    if "$p" -c "import $mods" 2>/dev/null; then PY=$p; break; fi
done
[ -n "$PY" ] || { echo "accept-cpu.sh: no python3 with $mods" >&2; exit 69; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/accept-cpu.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM

cpu=$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')
isa=$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx2|avx512f|f16c|fma|sha_ni)$' | tr '\n' ' ')
echo "accept-cpu: $(date -u '+%Y-%m-%d %H:%M UTC'); CPU: $cpu ($(nproc) online; $isa)"
echo "old: $OLD"
echo "new: $NEW"
echo "rows $ROWS (16 sequences), V 32000, stochastic T 0.6, W 16, 1 sample; $REPS rounds${ACCEPT_ARGS:+; options: $ACCEPT_ARGS}; code path: ${SQ_CPU_ISA:-the best this CPU has}"

for c in $(echo "$CORPORA" | tr ',' ' '); do
    case $c in
        f16z) dtype=float16; comp=1 ;;
        f32) dtype=float32; comp=0 ;;
        *) echo "accept-cpu.sh: corpus kind $c: expected f16z or f32" >&2; exit 64 ;;
    esac
    "$PY" - "$here/examples" "$tmp/$c.h5" "$ROWS" "$dtype" "$comp" <<'EOF'
import sys
sys.path.insert(0, sys.argv[1])
import dump_corpus as d
out, rows, dtype, comp = sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
d.write_corpus(out, d.synthetic_sequences(rows, 32000, 1, 16), 32000, draft="synthetic-draft",
               target="synthetic-target", dtype=dtype, compression=comp)
EOF
    echo "corpus $c: $(du -m "$tmp/$c.h5" | cut -f1) MB ($dtype, $([ "$comp" = 1 ] && echo 'shuffle + deflate 1' || echo 'no filter'))"
done

# one run: prints "wall cpu" in seconds (CPU: user + sys of the process from wait4, in
# microseconds); the curves go to $tmp/out-<tag>.json
one() { # bin corpus threads tag
    "$PY" -c '
import os, sys, time
t0 = time.monotonic()
pid = os.fork()
if pid == 0:
    os.execv(sys.argv[1], sys.argv[1:])
_, status, ru = os.wait4(pid, 0)
wall = time.monotonic() - t0
if status != 0:
    sys.exit("accept-cpu.sh: %s failed (status %d)" % (sys.argv[1], status))
print("%.4f %.4f" % (wall, ru.ru_utime + ru.ru_stime))
' "$1" "$2" -m stochastic -T 0.6 -w 16 -k 1 -j "$3" -q -o "$tmp/out-$4.json" ${ACCEPT_ARGS:-}
}

# the official estimators: prints "wall cpu" of the estimator's calls (official_accept.py's
# figures); the curve goes to $tmp/off-<tag>.json
official() { # estimator corpus threads tag
    OMP_WAIT_POLICY=PASSIVE "$PY" "$here/tests/bench/official_accept.py" "$OFFICIAL" "$2" --estimator "$1" -T 0.6 -w 16 \
        --threads "$3" --rows "$OFFICIAL_ROWS" -o "$tmp/off-$4.json" > /dev/null
    "$PY" -c 'import json, sys; d = json.load(open(sys.argv[1])); print("%.4f %.4f %.4f" % (d["wall_s"], d["cpu_s"], d["cpu_s"] + d["read_cpu_s"]))' "$tmp/off-$4.json"
}

printf '%-5s %-4s %3s %5s | %8s %8s | %s\n' corpus bin thr round wall_s cpu_s "load before -> after"
: > "$tmp/runs"
: > "$tmp/offruns"
r=1
while [ "$r" -le "$REPS" ]; do
    if [ $((r % 2)) = 1 ]; then order="old new"; else order="new old"; fi
    for c in $(echo "$CORPORA" | tr ',' ' '); do
        for which in $order; do
            if [ "$which" = old ]; then bin=$OLD; else bin=$NEW; fi
            for t in 1 2; do
                l0=$(cut -d' ' -f1 /proc/loadavg)
                set -- $(one "$bin" "$tmp/$c.h5" "$t" "$which-$c")
                l1=$(cut -d' ' -f1 /proc/loadavg)
                printf '%-5s %-4s %3s %5s | %8s %8s | %s -> %s\n' "$c" "$which" "$t" "$r" "$1" "$2" "$l0" "$l1"
                echo "$c $which $t $1 $2" >> "$tmp/runs"
            done
        done
        [ -n "$OFFICIAL" ] || continue
        if [ $((r % 2)) = 1 ]; then eorder="fast_test test_accept"; else eorder="test_accept fast_test"; fi
        for e in $eorder; do
            for t in 1 2; do
                l0=$(cut -d' ' -f1 /proc/loadavg)
                set -- $(official "$e" "$tmp/$c.h5" "$t" "$e-$c-$t")
                l1=$(cut -d' ' -f1 /proc/loadavg)
                printf '%-5s %-11s %3s %5s | %8s %8s | %s -> %s (with reading: %s)\n' "$c" "$e" "$t" "$r" "$1" "$2" "$l0" "$l1" "$3"
                echo "$c $e $t $1 $2 $3" >> "$tmp/offruns"
            done
        done
    done
    r=$((r + 1))
done

same=yes
for c in $(echo "$CORPORA" | tr ',' ' '); do
    grep -v '"tool"' "$tmp/out-old-$c.json" > "$tmp/a" || true
    grep -v '"tool"' "$tmp/out-new-$c.json" > "$tmp/b" || true
    cmp -s "$tmp/a" "$tmp/b" || same=no
done

echo
echo "medians over $REPS rounds (positions/CPU-s: per-core cost; wall: depends on the load):"
printf '%-5s %-4s %3s | %12s %12s | %s\n' corpus bin thr "pos/CPU-s" "pos/s wall" "2 vs 1 (wall)"
awk -v rows="$ROWS" '
function median(key,   n, i, j, t, a) {
    n = split(vals[key], a, " ")
    for (i = 2; i <= n; i++) { t = a[i] + 0; for (j = i - 1; j >= 1 && a[j] + 0 > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
{ k = $1 " " $2 " " $3; vals[k "w"] = vals[k "w"] " " $4; vals[k "c"] = vals[k "c"] " " $5; seen[$1 " " $2] = 1 }
END {
    for (cb in seen) {
        split(cb, x, " ")
        for (t = 1; t <= 2; t++) {
            k = cb " " t
            w[t] = median(k "w"); c[t] = median(k "c")
            printf "%-5s %-4s %3d | %12.0f %12.0f |", x[1], x[2], t, rows / c[t], rows / w[t]
            if (t == 2) printf " %.2fx", w[1] / w[2]
            printf "\n"
        }
    }
}' "$tmp/runs" | sort
echo "outputs of the two binaries identical (the tool string aside): $same"
if [ -n "$OFFICIAL" ]; then
    echo
    echo "official estimators, medians over $REPS rounds ($OFFICIAL_ROWS rows; CPU of the estimator's calls):"
    printf '%-5s %-11s %3s | %10s | %s\n' corpus estimator thr "pos/CPU-s" "per core, ours / theirs at equal threads: old new | theirs with reading: pos/CPU-s, old new"
    awk -v rows="$ROWS" -v orows="$OFFICIAL_ROWS" '
function median(s,   n, i, j, t, a) {
    n = split(s, a, " ")
    for (i = 2; i <= n; i++) { t = a[i] + 0; for (j = i - 1; j >= 1 && a[j] + 0 > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
FNR == NR { ours[$1 " " $2 " " $3] = ours[$1 " " $2 " " $3] " " $5; next }
{ k = $1 " " $2 " " $3; theirs[k] = theirs[k] " " $5; whole[k] = whole[k] " " $6; seen[k] = 1 }
END {
    for (k in seen) {
        split(k, x, " ")
        th = orows / median(theirs[k]); tw = orows / median(whole[k])
        o = rows / median(ours[x[1] " old " x[3]]); n = rows / median(ours[x[1] " new " x[3]])
        printf "%-5s %-11s %3d | %10.1f | %.2fx %.2fx | %.1f, %.2fx %.2fx\n", x[1], x[2], x[3], th, o / th, n / th, tw, o / tw, n / tw
    }
}' "$tmp/runs" "$tmp/offruns" | sort
    echo "curves: the last round's official (1 thread, $OFFICIAL_ROWS rows) against the new binary on the same rows (8 samples):"
    for c in $(echo "$CORPORA" | tr ',' ' '); do
        "$PY" "$here/tests/bench/official_accept.py" --head "$OFFICIAL_ROWS" "$tmp/$c.h5" "$tmp/$c-head.h5"
        "$NEW" "$tmp/$c-head.h5" -m stochastic -T 0.6 -w 16 -k 8 -q --dynamic-samples 0 \
            -o "$tmp/ours-$c-head.json"
        for e in fast_test test_accept; do
            printf '%-5s %-11s ' "$c" "$e"
            "$PY" "$here/tests/bench/official_accept.py" --compare "$tmp/ours-$c-head.json" "$tmp/off-$e-$c-1.json"
        done
    done
fi
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
