#!/bin/sh
# Test 'install' (suite docs): `meson install` into a scratch DESTDIR gives another C or C++
# program everything it needs to use the planner: the shared library libsequoia, its public
# headers under include/sequoia/ and sequoia.pc (docs/design.md §9.1). Checked here:
#  - the installed headers are the reviewed list: every header of libsequoia/ and planner/ is
#    either installed or named in docs/design.md §9.1 as not installed (or is a *_private.h);
#  - every installed header compiles alone, as C and as C++, and all of them together as C++;
#  - `nm -D` of the installed library: the symbols it exports are exactly the SQ_API
#    declarations of the installed headers, and all are named sq_ (or SQ_);
#  - two tiny programs, tests/install/tiny.c (C) and tests/install/tiny.cc (C++, including
#    every installed header), compiled and linked with nothing but
#    `pkg-config --cflags --libs sequoia`, read an acceptance curve, solve the DP, print
#    Best[n][d] and write a plan, which the installed sequoia-plan then reads back.
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
for p in pkg-config python3 nm; do
    command -v "$p" >&2 || { echo "install test: $p not found"; exit 77; }
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

cflags=$(pkg-config "$pc_args" --cflags sequoia)
libs=$(pkg-config "$pc_args" --libs sequoia)
libdir=$(pkg-config "$pc_args" --variable=libdir sequoia)
includedir=$(pkg-config "$pc_args" --variable=includedir sequoia)
echo "cflags: $cflags"
echo "libs:   $libs"

# The headers keep their paths, and every one of them compiles on its own.
for h in libsequoia/base/error.h libsequoia/format/curve.h libsequoia/format/plan.h \
         libsequoia/verify/verify.h planner/dp.h planner/hardware.h; do
    [ -f "$includedir/sequoia/$h" ] || { echo "FAIL: $includedir/sequoia/$h not installed"; exit 1; }
done
installed=$(cd "$includedir/sequoia" && find . -name '*.h' | sed 's|^\./||' | sort)

# The C++ compiler that goes with $cc (gcc -> g++, clang -> clang++, cc -> c++); $CXX wins.
case $cc in
    *clang*) cxx_guess=$(printf '%s' "$cc" | sed 's/clang/clang++/') ;;
    *gcc*) cxx_guess=$(printf '%s' "$cc" | sed 's/gcc/g++/') ;;
    *) cxx_guess=c++ ;;
esac
cxx=${CXX:-$cxx_guess}
command -v "${cxx%% *}" >&2 ||
    { echo "FAIL: no C++ compiler '$cxx' (setup.sh installs g++; or set CXX)"; exit 1; }
echo "C++ compiler: $cxx"

# The public headers are a reviewed list (meson.build); a header that is not installed must be
# a *_private.h or be named in docs/design.md §9.1, which says why it is not public.
for h in $(cd "$src" && find libsequoia -name '*.h'; cd "$src" && ls planner/*.h); do
    case $h in *_private.h) continue ;; esac
    printf '%s\n' "$installed" | grep -qx "$h" && continue
    grep -qF "\`$h\`" "$src/docs/design.md" || {
        echo "FAIL: $h is neither installed (meson.build, sequoia_public_headers) nor listed as" \
             "internal in docs/design.md §9.1"; exit 1; }
done

: > "$scratch/all.cc"
for h in $installed; do
    printf '#include "%s"\n' "$h" > "$scratch/one.c"
    printf '#include "%s"\n' "$h" > "$scratch/one.cc"
    printf '#include "%s"\n' "$h" >> "$scratch/all.cc"
    # shellcheck disable=SC2086
    $cc -std=c11 -D_POSIX_C_SOURCE=200809L -Wall -Wextra -Werror $cflags -c "$scratch/one.c" \
        -o "$scratch/one.o" || { echo "FAIL: installed header $h does not compile alone"; exit 1; }
    # shellcheck disable=SC2086
    $cxx -std=c++11 -Wall -Wextra -pedantic -Werror $cflags -c "$scratch/one.cc" \
        -o "$scratch/one.o" || { echo "FAIL: installed header $h does not compile alone as C++"; exit 1; }
done
# shellcheck disable=SC2086
$cxx -std=c++11 -Wall -Wextra -pedantic -Werror $cflags -c "$scratch/all.cc" -o "$scratch/all.o" ||
    { echo "FAIL: the installed headers do not compile together as C++"; exit 1; }
echo "headers: $(printf '%s\n' "$installed" | wc -l) installed, each compiles alone as C and C++"

# Exported symbols: exactly the declarations of the installed headers, each marked SQ_API, all
# sq_* or SQ_* (tests/install/public_api.py). Not ours: the linker's _init, _fini, _edata, _end
# and __bss_start where it defines them, and AddressSanitizer's ODR indicator of each exported
# variable (__odr_asan.sq_x with gcc, __odr_asan_gen_sq_x with clang).
lib=$libdir/libsequoia.so
[ -e "$lib" ] || { echo "FAIL: $lib not installed"; exit 1; }
nm -D --defined-only "$lib" | awk 'NF >= 3 { print $3 }' | sed 's/@.*//' |
    grep -vxE '_init|_fini|_edata|_end|__bss_start|__odr_asan(\.|_gen_)(sq|SQ)_[A-Za-z0-9_]*' |
    sort -u > "$scratch/exported"
# shellcheck disable=SC2086
python3 "$src/tests/install/public_api.py" "$includedir/sequoia" "$scratch/exported" $installed ||
    exit 1

san=""
if [ "$sanitize" != "none" ] && [ -n "$sanitize" ]; then
    san="-fsanitize=$sanitize"
fi
# shellcheck disable=SC2086
$cc -std=c11 -Wall -Wextra -Werror $san $cflags "$src/tests/install/tiny.c" -o "$scratch/tiny" $libs
# shellcheck disable=SC2086
$cxx -std=c++11 -Wall -Wextra -pedantic -Werror $san $cflags "$src/tests/install/tiny.cc" \
    -o "$scratch/tiny-cxx" $libs

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
check() {  # check PROGRAM N D EXPECTED
    out=$(LD_LIBRARY_PATH="$libdir" "$scratch/$1" "$scratch/curves.json" "$2" "$3" "$scratch/$1-plan$2.json")
    echo "$1: $out"
    if ! printf '%s\n' "$out" | grep -qx "Best\[$2\]\[$3\] = $4"; then
        echo "FAIL: $1: expected Best[$2][$3] = $4"; status=1
    fi
}
for prog in tiny tiny-cxx; do
    check $prog 128 10 6.3194
    check $prog 16 10 4.5234
    check $prog 4 4 2.8333
done
# The C++ program's calls of the header-only mode table and of the verification rule.
want="mode greedy (draft-topk); probs 0.2500 0.7500 (2 tokens); status 65 is"
LD_LIBRARY_PATH="$libdir" "$scratch/tiny-cxx" "$scratch/curves.json" 4 4 "$scratch/cxx.json" |
    grep -q "^$want" || { echo "FAIL: tiny-cxx: no line '$want ...'"; status=1; }

# The programs did not pick up this source tree or the build tree: only the installed library.
for prog in tiny tiny-cxx; do
    if LD_LIBRARY_PATH="$libdir" ldd "$scratch/$prog" | grep -q "libsequoia"; then
        used=$(LD_LIBRARY_PATH="$libdir" ldd "$scratch/$prog" | sed -n 's/.*libsequoia[^ ]* => \([^ ]*\).*/\1/p')
        case $used in
            "$root"/*) echo "$prog: linked against $used" ;;
            *) echo "FAIL: $prog uses $used, not the installed library"; status=1 ;;
        esac
    else
        echo "FAIL: $prog is not linked against libsequoia"; status=1
    fi
done

# The installed sequoia-plan reads the plans the programs wrote, and both are the same.
plan_bin=$(find "$root" -type f -name sequoia-plan | head -n 1)
[ -x "$plan_bin" ] || { echo "FAIL: sequoia-plan not installed"; exit 1; }
for prog in tiny tiny-cxx; do
    choices=$("$plan_bin" --plan "$scratch/$prog-plan4.json" --export trtllm)
    echo "sequoia-plan --plan $prog-plan4.json --export trtllm: $choices"
    [ -n "$choices" ] || { echo "FAIL: empty export"; status=1; }
done
cmp -s "$scratch/tiny-plan128.json" "$scratch/tiny-cxx-plan128.json" ||
    { echo "FAIL: the C and C++ programs wrote different plans"; status=1; }

# Manual pages.
for t in sequoia-plan sequoia-accept sequoia-profile sequoia-run; do
    [ -n "$(find "$root" -path "*/man1/$t.1*")" ] || { echo "FAIL: man page $t.1 not installed"; status=1; }
done
exit $status
