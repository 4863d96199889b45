/* libsequoia/base/cli: the parsers' ranges and messages, and the multi-output commit. */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "libsequoia/base/cli.h"
#include "tests/testutil.h"

Test(cli, int_parses_and_checks_the_range, .init = cr_redirect_stderr)
{
    int v = -7;
    cr_assert_eq(sq_cli_int("t", "--n", "42", 1, 100, &v), SQ_OK);
    cr_assert_eq(v, 42);
    cr_assert_eq(sq_cli_int("t", "--n", "-3", INT_MIN, INT_MAX, &v), SQ_OK);
    cr_assert_eq(v, -3);
    const char *bad[] = {"", "12x", "x", "1.5", "99999999999", " ", "0x10",
                         "-99999999999", "99999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        v = 5;
        cr_assert_eq(sq_cli_int("t", "--n", bad[i], INT_MIN, INT_MAX, &v), SQ_EUSAGE, "'%s'",
                     bad[i]);
        cr_assert_eq(v, 5, "'%s' changed the value", bad[i]);
    }
    cr_assert_eq(sq_cli_int("t", "--n", "0", 1, INT_MAX, &v), SQ_EUSAGE);
    cr_assert_eq(sq_cli_int("t", "--n", "101", 1, 100, &v), SQ_EUSAGE);
    cr_assert_eq(sq_cli_int("t", "--n", "100", 1, 100, &v), SQ_OK);
    fflush(stderr);
    cr_assert_stderr_eq_str("t: --n: '' is not an integer\n"
                            "t: --n: '12x' is not an integer\n"
                            "t: --n: 'x' is not an integer\n"
                            "t: --n: '1.5' is not an integer\n"
                            "t: --n: '99999999999' is out of range (at most 2147483647)\n"
                            "t: --n: ' ' is not an integer\n"
                            "t: --n: '0x10' is not an integer\n"
                            "t: --n: '-99999999999' is out of range (at least -2147483648)\n"
                            "t: --n: '99999999999999999999' is out of range (at most "
                            "2147483647)\n"
                            "t: --n: 0, must be at least 1\n"
                            "t: --n: 101, must be between 1 and 100\n");
}

Test(cli, u64_and_double, .init = cr_redirect_stderr)
{
    uint64_t u = 0;
    double d = 0;
    cr_assert_eq(sq_cli_u64("t", "--seed", "18446744073709551615", UINT64_MAX, &u), SQ_OK);
    cr_assert_eq(u, UINT64_MAX);
    cr_assert_eq(sq_cli_u64("t", "--seed", "-1", UINT64_MAX, &u), SQ_EUSAGE);
    cr_assert_eq(sq_cli_u64("t", "--seed", " -1", UINT64_MAX, &u), SQ_EUSAGE);
    cr_assert_eq(sq_cli_u64("t", "--seed", "11", 10, &u), SQ_EUSAGE);
    cr_assert_eq(sq_cli_u64("t", "--seed", "10", 10, &u), SQ_OK);
    cr_assert_eq(u, 10);
    cr_assert_eq(sq_cli_u64("t", "--seed", "18446744073709551616", UINT64_MAX, &u), SQ_EUSAGE);
    cr_assert_eq(u, 10);
    cr_assert_eq(sq_cli_double("t", "--x", "0.25", &d), SQ_OK);
    cr_assert_eq(d, 0.25);
    cr_assert_eq(sq_cli_double("t", "--x", "inf", &d), SQ_EUSAGE);
    cr_assert_eq(sq_cli_double("t", "--x", "nan", &d), SQ_EUSAGE);
    cr_assert_eq(sq_cli_double("t", "--x", "1e999", &d), SQ_EUSAGE);
    cr_assert_eq(sq_cli_double("t", "--x", "2,5", &d), SQ_EUSAGE);
    cr_assert_eq(d, 0.25);
    /* an underflow is the number typed, to the nearest double (a subnormal, or 0) */
    cr_assert_eq(sq_cli_double("t", "--x", "4.9e-324", &d), SQ_OK);
    cr_assert(d > 0 && d < 1e-323, "%g", d);
    cr_assert_eq(sq_cli_double("t", "--x", "1e-400", &d), SQ_OK);
    cr_assert_eq(d, 0.0);
    fflush(stderr);
    cr_assert_stderr_eq_str("t: --seed: '-1' is not a non-negative integer\n"
                            "t: --seed: ' -1' is not a non-negative integer\n"
                            "t: --seed: 11, must be at most 10\n"
                            "t: --seed: '18446744073709551616' is out of range (at most "
                            "18446744073709551615)\n"
                            "t: --x: 'inf' is not a finite number\n"
                            "t: --x: 'nan' is not a finite number\n"
                            "t: --x: '1e999' is not a finite number\n"
                            "t: --x: '2,5' is not a finite number\n");
}

Test(cli, clock_is_monotonic)
{
    double a = sq_now_ms(), b = sq_now_ms();
    cr_assert_geq(b, a);
    cr_assert_gt(a, 0);
}

/* Three outputs, a write error on the middle one: none is renamed, no temporary is left. */
Test(cli, commit_is_all_or_nothing_on_a_write_error)
{
    char *dir = tu_tmpdir();
    char *p[3] = {tu_path(dir, "a.txt"), tu_path(dir, "b.txt"), tu_path(dir, "c.txt")};
    tu_write(p[0], "old a\n");
    sq_out *o[4] = {NULL, NULL, NULL, NULL};
    sq_error err = {0};
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(sq_out_open(&o[i], p[i], &err), 0, "%s", err.msg);
        fprintf(sq_out_stream(o[i]), "new %d\n", i);
    }
    /* reading a write-only stream sets its error indicator, as a failed write would */
    cr_assert_eq(fgetc(sq_out_stream(o[1])), EOF);
    cr_assert(ferror(sq_out_stream(o[1])));
    cr_assert_eq(sq_cli_commit(o, 4, &err), SQ_EIO);
    cr_assert(strstr(err.msg, "b.txt"), "%s", err.msg);
    for (int i = 0; i < 4; i++)
        cr_assert_null(o[i]);
    char *a = tu_read(p[0], NULL);
    cr_assert_str_eq(a, "old a\n", "a was committed although b failed");
    cr_assert(!tu_exists(p[1]) && !tu_exists(p[2]));
    cr_assert_eq(tu_count_entries(dir), 1, "a.txt only, no temporary file");
    free(a);
    tu_rmtree(dir);
    for (int i = 0; i < 3; i++)
        free(p[i]);
}

/* A rename that fails (b's directory moved away after the write): the outputs before it are in
 * place, the ones after it are dropped, no temporary is left beside them. */
Test(cli, commit_stops_at_a_failed_rename)
{
    char *dir = tu_tmpdir();
    char *sub = tu_path(dir, "sub");
    cr_assert_eq(mkdir(sub, 0700), 0);
    char *p[3] = {tu_path(dir, "a.txt"), tu_path(sub, "b.txt"), tu_path(dir, "c.txt")};
    sq_out *o[3];
    sq_error err = {0};
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(sq_out_open(&o[i], p[i], &err), 0, "%s", err.msg);
        fprintf(sq_out_stream(o[i]), "new %d\n", i);
    }
    char *moved = tu_path(dir, "moved");
    cr_assert_eq(rename(sub, moved), 0);
    cr_assert_eq(sq_cli_commit(o, 3, &err), SQ_ECANTCREAT);
    char *a = tu_read(p[0], NULL);
    cr_assert_str_eq(a, "new 0\n");
    cr_assert(!tu_exists(p[2]));
    cr_assert_eq(tu_count_entries(dir), 2, "a.txt and moved/ only");
    free(a);
    tu_rmtree(dir);
    for (int i = 0; i < 3; i++)
        free(p[i]);
    free(sub);
    free(moved);
}

/* When every output is fine, all are renamed. */
Test(cli, commit_renames_every_output)
{
    char *dir = tu_tmpdir();
    char *q[2] = {tu_path(dir, "x.txt"), tu_path(dir, "y.txt")};
    sq_out *o2[2];
    sq_error err = {0};
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(sq_out_open(&o2[i], q[i], &err), 0, "%s", err.msg);
        fprintf(sq_out_stream(o2[i]), "ok %d\n", i);
    }
    cr_assert_eq(sq_cli_commit(o2, 2, &err), SQ_OK, "%s", err.msg);
    for (int i = 0; i < 2; i++) {
        char *t = tu_read(q[i], NULL);
        char want[16];
        snprintf(want, sizeof want, "ok %d\n", i);
        cr_assert_str_eq(t, want);
        free(t);
        free(q[i]);
    }
    tu_rmtree(dir);
}
