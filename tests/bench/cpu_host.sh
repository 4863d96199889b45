#!/bin/sh
# The CPU benchmarks of issue 27 in one go, for a quiet machine (docs/benchmarks.md, "The
# skinny product" and "Threads beside busy processes"):
#   tests/bench/cpu_host.sh [BUILD_DIR] [OUT_DIR]
# prints the host (lscpu's model, the paths the CPU has, the load) and runs
#   bench-skinny --blocks      the register blocks per path (18M model, F32 and F16 weights)
#   bench-skinny               the runtime's product against OpenBLAS, rows 1-64, every path,
#                              dtype and shipped model shape (worst_rt: the worst single matrix)
#   bench-skinny --per-matrix  each matrix alone, hot caches, rows 1-64, every path against
#                              OpenBLAS's kernels of its set, f32, 31 interleaved rounds: each
#                              matrix's ratio with a 95% interval and a verdict (faster / n.d. /
#                              slower; OpenBLAS's small-matrix kernels run at the fewest rows)
#   sequoia-profile            the shipped target's profile around the thresholds, per path
#                              (monotone in rows?)
#   bench-busy                 the 18M target's one-token forward, 1 thread and the default,
#                              quiet and beside busy loops, three times
# each into OUT_DIR (default: build/bench-cpu), with the load average before and after.
set -eu
build=${1:-build}
out=${2:-$build/bench-cpu}
mkdir -p "$out"
host() {
    echo "# $(date -u '+%Y-%m-%d %H:%M UTC'); $(uptime)"
    lscpu | grep -E '^(Model name|CPU\(s\)|Thread|Core)' | sed 's/^/# /'
    printf '# flags:'
    for f in avx2 fma f16c avx512f avx512bw; do
        grep -qw "$f" /proc/cpuinfo && printf ' %s' "$f"
    done
    echo
}
{ host; "$build/tests/bench/bench-skinny" --blocks --dtype f32,f16 \
      --rows 1,2,3,4,6,8,12,16,17,24,32,40,48,56,64; host; } | tee "$out/blocks.txt"
{ host; "$build/tests/bench/bench-skinny"; host; } | tee "$out/skinny.txt"
{ host; "$build/tests/bench/bench-skinny" --per-matrix --dtype f32 --reps 31 --ms 1; host; } \
    | tee "$out/skinny-per-matrix.txt"
for isa in avx2 avx512 scalar; do
    # OpenBLAS with the kernels of the same set (AVX-512: what the tools pick for this CPU)
    case $isa in
        avx2) blas="env OPENBLAS_CORETYPE=Haswell" ;;
        scalar) blas="env OPENBLAS_CORETYPE=Prescott" ;;
        *) blas="env -u OPENBLAS_CORETYPE" ;;
    esac
    { host; echo "# SQ_CPU_ISA=$isa $blas"
      $blas SQ_CPU_ISA=$isa "$build/profiler/sequoia-profile" \
          --model data/models/target --tokens 1,8,15,16,17,18,32,44,45,48,49,56,64,65 \
          --prefix 128 --repeat 30 --threads 1 --no-refine -o "$out/profile-$isa.json"; } \
        2>&1 | tee -a "$out/profile.txt"
done
for i in 1 2 3; do
    { host; "$build/tests/bench/bench-busy"; host; } | tee -a "$out/busy.txt"
done
