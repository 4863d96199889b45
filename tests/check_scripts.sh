#!/usr/bin/env bash
# Every shell script of the repository parses (bash -n): the benchmark and example scripts are
# run by hand, rarely by the suite, so a quoting slip would otherwise wait for the next user.
# Usage: check_scripts.sh SOURCE_ROOT. Exit 0 when all parse; 1 naming each one that does not.
set -u
root=$1
cd "$root" || exit 1
bad=0
n=0
while IFS= read -r f; do
    case $f in *.sh | .ci/run | setup.sh) ;; *) continue ;; esac
    n=$((n + 1))
    if ! err=$(bash -n "$f" 2>&1); then
        echo "$f: does not parse: $err"
        bad=1
    fi
done < <(git ls-files 2>/dev/null || find . -name '*.sh' -printf '%P\n')
echo "$n scripts checked"
[ "$n" -gt 0 ] || { echo "no script found under $root"; exit 1; }
exit $bad
