#!/bin/sh
# meson test 'families-reference' (issue 24; tests/reference/README.md, "In the suite"): our
# runtime against the outside reference of every family. Makes the tiny checkpoints into a
# temporary directory (make_checkpoints.py, pure Python), checks them against the manifest's
# SHA-256s, dumps our logits of every variant and dtype with sq-dump-logits ($1: one causal
# forward on the CPU, the checkpoint's own dtype), and compares all of them with
# check_logits.py --require-all against the numpy files and against llama.cpp's, at
# check_logits.py's default tolerances (the README's "Tolerances"). No network, torch or
# llama.cpp; a few seconds.
#
#   run_check.sh DUMP_LOGITS_BIN [PYTHON3]
set -u
if [ $# -lt 1 ] || [ $# -gt 2 ]; then
    echo "usage: run_check.sh DUMP_LOGITS_BIN [PYTHON3]" >&2
    exit 64
fi
bin=$1
py=${2:-python3}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sq-families-ref.XXXXXX") || exit 73
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM HUP

"$py" "$here/make_checkpoints.py" "$tmp/ckpt" || exit $?
"$py" "$here/check_logits.py" --verify-checkpoints "$tmp/ckpt" || exit $?

mkdir "$tmp/dumps" || exit 73
n=0
for t in "$tmp"/ckpt/*.tokens; do
    v=$(basename "$t" .tokens)
    for dt in f32 bf16; do
        "$bin" "$tmp/ckpt/$v-$dt" "$t" "$tmp/dumps/$v-$dt.f32" || {
            rc=$?
            echo "run_check: sq-dump-logits failed on $v-$dt (exit $rc)" >&2
            exit $rc
        }
        n=$((n + 1))
    done
done
echo "dumped $n checkpoints"

status=0
for against in numpy llamacpp; do
    echo "== against $against"
    "$py" "$here/check_logits.py" "$tmp/dumps" --against "$against" --require-all || status=1
done
exit $status
