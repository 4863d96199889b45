#!/usr/bin/env bash
# Seeds known bugs into the CUDA sources, one at a time, and shows which tests of the CUDA
# suite (tests/test_cuda.c) and of the edge shapes (tests/cuda-emu/test_emu_shapes.c) catch
# each, on the CPU emulation (issue 15). A test that no mutation can fail proves nothing; the
# table this prints is the evidence that each one can.
#
#   tests/cuda-emu/mutate.sh [SCRATCH_DIR] [SCHEDULE]     from the repository root
#
# The repository's files are copied to SCRATCH_DIR/src (default: a new temporary directory), an
# emulation-only build is configured once in SCRATCH_DIR/build (-Dcuda=disabled: no nvcc needed),
# and for each mutation the two emulated test programs are rebuilt and run, one test name at a
# time, under SCHEDULE (default lazy; see tests/cuda-emu/emu.cc). The source tree itself is never
# modified. Exit status 0 when every mutation is caught by at least one test and every test is
# failed by at least one mutation; 1 otherwise.
#
# The mutations (a mutation whose text is no longer in the source stops the script: update it):
#   mask        tree attention ignores the pending mask (every pending slot counts)
#   gqa         GQA maps query head h to KV head h % n_kv instead of h / (n_heads / n_kv)
#   keep        commit ignores keep[] (keeps the first nkeep pending slots)
#   rope        RoPE pairs elements (2k, 2k+1) instead of (k, k + head_dim/2)
#   upload      no synchronisation after the weight uploads (the ordering bug of issue 15)
#   offload     offload mode computes without waiting for its layer's copy
#   softmax     the probabilities are not normalised
#   residual    the residual is not normalised
#   without     sampling without replacement may draw a token twice
#   batchmask   a batched forward's attention reads every sequence's mask from the first one's
#   batchkv     a batched forward stores new keys and values at slots counted from the batch's
#               first row instead of the sequence's own
# and those of the long contexts (issue 27; before the long-context tests, all passed every test):
#   rescale     the online softmax does not rescale its accumulator when a later chunk raises
#               the running maximum (alpha not applied)
#   sum         ... nor its running sum
#   max         ... and keeps the first chunk's maximum as its running maximum
#   chunks      a range reads only its first chunk (the rest of its chunks are skipped)
#   merge       the merge of the ranges does not rescale what it has merged so far
#   split       the merge drops the last range (where the largest score of a row lies)
#   batchsplit  a batched forward cuts every sequence's context by the first sequence's
#               chunks per range
#
# SQ_MUTATE_ONLY="rescale sum ..." runs only the named mutations (every test, each); the check
# that every test catches some mutation is then skipped. SQ_MUTATE_SKIP="name ..." skips the
# tests whose criterion name (e.g. greedy_speculative_decoding_equals_target_greedy) is listed
# (printed as "skipped"; a time saver for a partial run, never for the full table).
set -u

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SCRATCH=${1:-$(mktemp -d "${TMPDIR:-/tmp}/sq-mutate.XXXXXX")}
SCHED=${2:-lazy}
SRC=$SCRATCH/src
BUILD=$SCRATCH/build
mkdir -p "$SRC"

echo "mutate.sh: copying the repository to $SRC"
(cd "$ROOT" && git ls-files -co --exclude-standard -z | tar --null -T - -cf -) | tar -C "$SRC" -xf -
mkdir -p "$SCRATCH/orig/runtime"
cp "$SRC/runtime/cuda_backend.cu" "$SRC/runtime/cuda_sample.cu" "$SCRATCH/orig/runtime/"
if [ ! -f "$BUILD/build.ninja" ]; then
    meson setup "$BUILD" "$SRC" -Dcuda=disabled -Demulate_cuda=true > "$SCRATCH/setup.log" 2>&1 \
        || { echo "mutate.sh: meson setup failed; see $SCRATCH/setup.log"; exit 1; }
fi
# the test programs and the emulated CUDA module they load (which holds the mutated code)
EXES=(tests/cuda-emu/test-emu-cuda tests/cuda-emu/test-emu-shapes tests/cuda-emu/libsequoia-cuda-emu.so)

# name@file@original text@mutated text[@original text@mutated text ...] (all pairs applied)
MUTATIONS=(
    "mask@runtime/cuda_backend.cu@(t < C || mask[(size_t)tok[r] * width + (t - C)])@(t < C || 1)"
    "gqa@runtime/cuda_backend.cu@int i = R / group, h = kvh * group + R % group;@int i = R / group, h = (R % group) * n_kv_heads + kvh;@int h = kvh * group + R % group;@int h = (R % group) * n_kv_heads + kvh;"
    "keep@runtime/cuda_backend.cu@base + (size_t)(C + keep[blockIdx.x]) * kv_dim@base + (size_t)(C + (int)blockIdx.x + 0 * keep[0]) * kv_dim"
    "rope@runtime/cuda_backend.cu@sq_k_rope_rotate(&a[k], &a[k + npair]@sq_k_rope_rotate(&a[2 * k], &a[2 * k + 1]@float a = kf[o + k], b = kf[o + k + npair];@float a = kf[o + 2 * k], b = kf[o + 2 * k + 1];@kdst[o + k] = store16<BF>(a);@kdst[o + 2 * k] = store16<BF>(a);@kdst[o + k + npair] = store16<BF>(b);@kdst[o + 2 * k + 1] = store16<BF>(b);"
    "upload@runtime/cuda_backend.cu@    CUDA_CHECK(cudaDeviceSynchronize());@    /* no synchronisation */"
    "offload@runtime/cuda_backend.cu@CUDA_CHECK(cudaStreamWaitEvent(st, s->copied[l & 1], 0));@/* no wait */"
    "softmax@runtime/cuda_sample.cu@        p[i] /= s;@        p[i] /= 1.0;"
    "residual@runtime/cuda_sample.cu@r[i] = sq_k_residual(r[i], q[i]) / s;@r[i] = sq_k_residual(r[i], q[i]);"
    "without@runtime/cuda_sample.cu@            taken[bi] = 1;@            taken[bi] = 0;"
    "batchmask@runtime/cuda_backend.cu@const uint8_t *mask = mask_all + sd.mask_off;@const uint8_t *mask = mask_all + 0 * sd.mask_off;"
    "batchkv@runtime/cuda_backend.cu@const size_t slot = (size_t)(sd->C + sd->width - sd->n + (row - sd->row0));@const size_t slot = (size_t)(sd->C + sd->width - sd->n + row);"
    "rescale@runtime/cuda_backend.cu@acc[r][k] *= alpha[r];@acc[r][k] *= 1.0f + 0.0f * alpha[r];"
    "sum@runtime/cuda_backend.cu@l[r] = l[r] * alpha[r] + warp_sum(pj);@l[r] = l[r] + warp_sum(pj);"
    "max@runtime/cuda_backend.cu@m[r] = mn;@m[r] = m[r] == -INFINITY ? mn : m[r];"
    "chunks@runtime/cuda_backend.cu@const int c1 = min(c0 + chunks_per_split,@const int c1 = min(c0 + 1,"
    "merge@runtime/cuda_backend.cu@res = alpha * res + (beta@res = (0.0f * alpha + 1.0f) * res + (beta"
    "split@runtime/cuda_backend.cu@for (int s = 0; s < splits; s++, p += hd + 2) {@for (int s = 0; s < splits - (splits > 1); s++, p += hd + 2) {"
    "batchsplit@runtime/cuda_backend.cu@chunks_per_split = sd.chunks_per_split;@chunks_per_split = seqs[0].chunks_per_split;"
)

# The tests: program|criterion filter|label
TESTS=(
    "test-emu-cuda|cuda/logits_agree_with_the_cpu_within_the_dtype_tolerance|logits vs CPU"
    "test-emu-cuda|cuda/tree_forward_equals_path_forward_and_commit_keeps_the_path|tree vs path"
    "test-emu-cuda|cuda/offload_computes_what_the_on_device_weights_compute|offload vs device"
    "test-emu-cuda|cuda/greedy_speculative_decoding_equals_target_greedy|greedy spec = AR"
    "test-emu-cuda|cuda/softmax_with_temperature_and_top_p_equals_the_verifier|softmax/top-p"
    "test-emu-cuda|cuda/probs_follow_the_rule_at_ties_and_non_finite_logits|probs rule"
    "test-emu-cuda|cuda/argmax_and_residual_equal_the_verifier|argmax/residual"
    "test-emu-cuda|cuda/draws_with_and_without_replacement_equal_the_host_computation|draws"
    "test-emu-cuda|cuda/batched_forward_equals_separate_forwards_and_the_cpu_batch|batch vs alone/CPU"
    "test-emu-cuda|cuda/batched_greedy_decoding_equals_separate_runs|batch greedy"
    "test-emu-cuda|cuda/long_context_attention_agrees_with_the_cpu|long context"
    "test-emu-cuda|cuda/long_context_batched_forward_agrees_with_the_cpu|long batch"
    "test-emu-shapes|emu/edge_shapes_agree_with_the_cpu|edge shapes"
)

mutate() {   # FILE FROM TO [FROM TO ...]: each FROM occurs exactly once and is replaced
    python3 - "$SRC/$@" <<'PY'
import sys
path, pairs = sys.argv[1], sys.argv[2:]
s = open(path).read()
for a, b in zip(pairs[0::2], pairs[1::2]):
    n = s.count(a)
    if n != 1:
        sys.exit("mutate.sh: %s: the text %r occurs %d times (expected once): update the "
                 "mutation" % (path, a, n))
    s = s.replace(a, b)
open(path, "w").write(s)
PY
}

declare -A CAUGHT_BY_TEST
all_caught=1
printf '%-10s' "mutation"
for t in "${TESTS[@]}"; do printf ' | %-17s' "${t##*|}"; done
echo
for m in "${MUTATIONS[@]}"; do
    IFS='@' read -r -a f <<< "$m"
    name=${f[0]}
    if [ -n "${SQ_MUTATE_ONLY:-}" ] && [[ " $SQ_MUTATE_ONLY " != *" $name "* ]]; then
        continue
    fi
    file=${f[1]}
    cp "$SCRATCH/orig/$file" "$SRC/$file"
    mutate "$file" "${f[@]:2}" || exit 1
    if ! ninja -C "$BUILD" "${EXES[@]}" > "$SCRATCH/build-$name.log" 2>&1; then
        echo "mutate.sh: $name: the mutated source does not build; see $SCRATCH/build-$name.log"
        exit 1
    fi
    printf '%-10s' "$name"
    caught=0
    for t in "${TESTS[@]}"; do
        IFS='|' read -r exe filter label <<< "$t"
        if [[ " ${SQ_MUTATE_SKIP:-} " == *" ${filter##*/} "* ]]; then
            printf ' | %-17s' "skipped"
            continue
        fi
        log=$SCRATCH/run-$name-${filter##*/}.log
        env SQ_CUDA_EMU_SCHEDULE="$SCHED" ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 \
            SQ_SOURCE_ROOT="$SRC" timeout 600 "$BUILD/tests/cuda-emu/$exe" -j1 \
            --filter "$filter*" --verbose > "$log" 2>&1
        rc=$?
        ntot=$(grep -cE '^\[(PASS|FAIL)\]' "$log")
        if [ "$rc" -ne 0 ]; then
            printf ' | %-17s' "CAUGHT ($(grep -c '^\[FAIL\]' "$log")/$ntot)"
            caught=1
            CAUGHT_BY_TEST[$label]=1
        else
            printf ' | %-17s' "passes"
        fi
    done
    echo
    [ "$caught" -eq 1 ] || { all_caught=0; echo "  -> $name: NOT CAUGHT by any test"; }
    cp "$SCRATCH/orig/$file" "$SRC/$file"   # restore
done
echo
status=0
[ "$all_caught" -eq 1 ] || status=1
for t in "${TESTS[@]}"; do
    label=${t##*|}
    [ -n "${SQ_MUTATE_ONLY:-}" ] && break   # a subset of the mutations: no such check
    if [ -z "${CAUGHT_BY_TEST[$label]:-}" ]; then
        echo "mutate.sh: the test '$label' fails on no mutation"
        status=1
    fi
done
if [ "$status" -eq 0 ] && [ -n "${SQ_MUTATE_ONLY:-}" ]; then
    echo "mutate.sh: every mutation run ($SQ_MUTATE_ONLY) is caught (schedule $SCHED)"
elif [ "$status" -eq 0 ]; then
    echo "mutate.sh: every mutation is caught, and every test catches at least one (schedule $SCHED)"
fi
echo "mutate.sh: logs in $SCRATCH"
exit "$status"
