# Where an example script writes (sourced by ladder.sh, pipeline.sh, speedup.sh, stepcost.sh and
# dynamic_grid.sh; issue 27, D5):
#
#   . "$(dirname "$0")/out_dir.sh"
#   example_out_dir NAME "${1:-}"        # sets OUT
#
# OUT_DIR, the script's argument, is relative to the caller's directory, never the
# repository's (the scripts then move to the repository's root). Without it the script writes
# to a fresh folder under $TMPDIR, and says so: it never overwrites a tracked folder by default.
# PRINT_OUT=1 in the environment prints the folder and exits (tests/test_hostile.c, D5).

# A path as seen from the caller's directory, made absolute.
example_abs() {
    case $1 in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac
}

example_out_dir() {   # NAME [OUT_DIR]
    if [ -n "${2:-}" ]; then
        OUT=$(example_abs "$2")
    else
        OUT=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX")
        echo "$1.sh: writing to $OUT" >&2
    fi
    if [ "${PRINT_OUT:-0}" = 1 ]; then
        echo "$OUT"
        exit 0
    fi
}
