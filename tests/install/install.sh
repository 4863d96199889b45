#!/bin/sh
# Test 'install' (suite docs): `meson install` into a scratch DESTDIR gives another C program
# everything it needs to use the planner: the shared library libsequoia, its headers under
# include/sequoia/ and sequoia.pc. A tiny program (tests/install/tiny.c) is compiled and linked
# with nothing but `pkg-config --cflags --libs sequoia`, reads an acceptance curve, solves the
# DP, prints Best[n][d] and writes a plan, which the installed sequoia-plan then reads back.
#
#   install.sh BUILD_ROOT SOURCE_ROOT CC SANITIZE FUZZ
#
# The .pc file names the configured prefix (e.g. /usr/local); under a DESTDIR the files lie in
# DESTDIR/prefix, so pkg-config is told prefix=DESTDIR/prefix (--define-variable: only our
# file's ${prefix} moves; PKG_CONFIG_SYSROOT_DIR would also move the system's -I/-L paths).
set -eu
build=$1 src=$2 cc=$3 sanitize=$4 fuzz=$5

if [ "$fuzz" = "true" ]; then
    echo "fuzzing build: its objects need libFuzzer's runtime; not an install configuration"
    exit 77
fi
for p in pkg-config python3; do
    command -v "$p" >/dev/null || { echo "install test: $p not found"; exit 77; }
done

scratch=$(mktemp -d "${TMPDIR:-/tmp}/sq-install-test.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
root=$scratch/root

meson install -C "$build" --destdir "$root" --no-rebuild --quiet

pc=$(find "$root" -name sequoia.pc)
[ -n "$pc" ] || { echo "FAIL: no sequoia.pc installed under $root"; exit 1; }
prefix=$(sed -n 's/^prefix=//p' "$pc")
echo "installed: $pc (prefix $prefix)"
PKG_CONFIG_PATH=$(dirname "$pc")
export PKG_CONFIG_PATH
pc_args="--define-variable=prefix=$root$prefix"

cflags=$(pkg-config $pc_args --cflags sequoia)
libs=$(pkg-config $pc_args --libs sequoia)
libdir=$(pkg-config $pc_args --variable=libdir sequoia)
includedir=$(pkg-config $pc_args --variable=includedir sequoia)
echo "cflags: $cflags"
echo "libs:   $libs"

# The headers keep their paths, and every one of them compiles on its own.
for h in libsequoia/base/error.h libsequoia/format/curve.h libsequoia/format/plan.h \
         libsequoia/verify/verify.h planner/dp.h planner/hardware.h; do
    [ -f "$includedir/sequoia/$h" ] || { echo "FAIL: $includedir/sequoia/$h not installed"; exit 1; }
done
for h in $(cd "$includedir/sequoia" && find . -name '*.h' | sed 's|^\./||' | sort); do
    printf '#include "%s"\n' "$h" > "$scratch/one.c"
    # shellcheck disable=SC2086
    $cc -std=c11 -D_POSIX_C_SOURCE=200809L -Wall -Wextra -Werror $cflags -c "$scratch/one.c" \
        -o "$scratch/one.o" || { echo "FAIL: installed header $h does not compile alone"; exit 1; }
done

san=""
if [ "$sanitize" != "none" ] && [ -n "$sanitize" ]; then
    san="-fsanitize=$sanitize"
fi
# shellcheck disable=SC2086
$cc -std=c11 -Wall -Wextra -Werror $san $cflags "$src/tests/install/tiny.c" -o "$scratch/tiny" $libs

# The paper's App. E acceptance vector (31 ranks); the official solver's table gives
# Best[128][10] = 6.3194 and Best[16][10] = 4.5234 for it (tests/data/reference/).
cat > "$scratch/curves.json" <<'JSON'
{ "format": "sequoia-acceptance", "version": 1,
  "curves": [ { "name": "appE", "mode": "stochastic",
    "p": [0.7732, 0.1039, 0.0402, 0.0206, 0.0128, 0.0081, 0.0064, 0.0043, 0.0035, 0.0026, 0.0025,
          0.0021, 0.0016, 0.0014, 0.0010, 0.0010, 0.0010, 0.0007, 0.0007, 0.0006, 0.0007, 0.0006,
          0.0004, 0.0004, 0.0005, 0.0006, 0.0004, 0.0003, 0.0002, 0.0004, 0.0001] } ] }
JSON

status=0
check() {  # check N D EXPECTED
    out=$(LD_LIBRARY_PATH="$libdir" "$scratch/tiny" "$scratch/curves.json" "$1" "$2" "$scratch/plan$1.json")
    echo "$out"
    if ! printf '%s\n' "$out" | grep -qx "Best\[$1\]\[$2\] = $3"; then
        echo "FAIL: expected Best[$1][$2] = $3"; status=1
    fi
}
check 128 10 6.3194
check 16 10 4.5234
check 4 4 2.8333

# The program did not pick up this source tree or the build tree: only the installed library.
if LD_LIBRARY_PATH="$libdir" ldd "$scratch/tiny" | grep -q "libsequoia"; then
    lib=$(LD_LIBRARY_PATH="$libdir" ldd "$scratch/tiny" | sed -n 's/.*libsequoia[^ ]* => \([^ ]*\).*/\1/p')
    case $lib in
        "$root"/*) echo "linked against $lib" ;;
        *) echo "FAIL: tiny uses $lib, not the installed library"; status=1 ;;
    esac
else
    echo "FAIL: tiny is not linked against libsequoia"; status=1
fi

# The installed sequoia-plan reads the plan the program wrote.
plan_bin=$(find "$root" -type f -name sequoia-plan | head -n 1)
[ -x "$plan_bin" ] || { echo "FAIL: sequoia-plan not installed"; exit 1; }
choices=$("$plan_bin" --plan "$scratch/plan4.json" --export trtllm)
echo "sequoia-plan --plan plan4.json --export trtllm: $choices"
[ -n "$choices" ] || { echo "FAIL: empty export"; status=1; }

# Manual pages.
for t in sequoia-plan sequoia-accept sequoia-profile sequoia-run; do
    [ -n "$(find "$root" -path "*/man1/$t.1*")" ] || { echo "FAIL: man page $t.1 not installed"; status=1; }
done
exit $status
