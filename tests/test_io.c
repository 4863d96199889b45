/* Suite 'io' (issue 14): outputs never destroy anything (libsequoia/base/io.h).
 *
 * A device, FIFO or socket is written in place, never replaced by a renamed temporary file;
 * regular files are still replaced atomically, through an anonymous temporary file where the
 * file system has O_TMPFILE; `ulimit -f` is an I/O error, not death by SIGXFSZ; an output that
 * is an input, or two outputs on one file, are refused. Device nodes are private ones made with
 * mknod in a scratch folder: a test never writes to a real /dev path. */
#include <criterion/criterion.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "libsequoia/base/io.h"
#include "runtime/st_writer.h"
#include "tests/testutil.h"

/* A private character device in dir, or a skipped test. */
static char *private_device(const char *dir, const char *name, unsigned major, unsigned minor)
{
    char *p = tu_path(dir, name);
    int e = tu_mkchar(p, major, minor);
    if (e) {
        tu_rmtree(dir);
        cr_skip_test("mknod %s (%u, %u) is not allowed here (%s): device outputs not tested", p,
                     major, minor, strerror(e));
    }
    return p;
}

Test(io, char_device_output_is_written_in_place)
{
    char *dir = tu_tmpdir(), *dev = private_device(dir, "null", 1, 3);
    sq_error err = {0};
    cr_assert_eq(sq_out_is_direct(dev), 1);
    cr_assert_eq(sq_file_write_atomic(dev, "hello\n", 6, &err), SQ_OK, "%s", err.msg);
    cr_assert(tu_is_char_device(dev), "%s was replaced by a regular file", dev);
    /* the two-phase commit of a tool with several outputs, too */
    sq_out *o;
    cr_assert_eq(sq_out_open(&o, dev, &err), SQ_OK, "%s", err.msg);
    fputs("more\n", sq_out_stream(o));
    cr_assert_eq(sq_out_prepare(o, &err), SQ_OK, "%s", err.msg);
    cr_assert_eq(sq_out_commit(o, &err), SQ_OK, "%s", err.msg);
    cr_assert(tu_is_char_device(dev), "%s was replaced by a regular file", dev);
    cr_assert_eq(tu_count_entries(dir), 1, "no temporary file beside a device");
    tu_rmtree(dir);
}

Test(io, write_error_on_a_device_is_an_io_error)
{
    char *dir = tu_tmpdir(), *dev = private_device(dir, "full", 1, 7);
    sq_error err = {0};
    char big[70000];
    memset(big, 'x', sizeof big);
    cr_assert_eq(sq_file_write_atomic(dev, big, sizeof big, &err), SQ_EIO, "%s", err.msg);
    cr_assert(strstr(err.msg, dev) && strstr(err.msg, "write error"), "%s", err.msg);
    /* a small write only fails at the flush */
    cr_assert_eq(sq_file_write_atomic(dev, "x", 1, &err), SQ_EIO);
    cr_assert(tu_is_char_device(dev));
    tu_rmtree(dir);
}

Test(io, fifo_output_is_streamed)
{
    char *dir = tu_tmpdir(), *fifo = tu_path(dir, "pipe"), *got = tu_path(dir, "got");
    cr_assert_eq(mkfifo(fifo, 0600), 0, "%s", strerror(errno));
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        alarm(20); /* a FIFO replaced by a regular file would never be opened for writing */
        FILE *in = fopen(fifo, "r"), *out = fopen(got, "w");
        int c;
        while (in && out && (c = fgetc(in)) != EOF)
            fputc(c, out);
        _exit(in && out && fclose(out) == 0 ? 0 : 1);
    }
    sq_error err = {0};
    cr_assert_eq(sq_file_write_atomic(fifo, "through the pipe\n", 17, &err), SQ_OK, "%s", err.msg);
    int st;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    char *text = tu_read(got, NULL);
    cr_assert_str_eq(text, "through the pipe\n");
    struct stat sb;
    cr_assert(stat(fifo, &sb) == 0 && S_ISFIFO(sb.st_mode), "the FIFO is still a FIFO");
    free(text);
    tu_rmtree(dir);
}

Test(io, socket_output_is_streamed)
{
    char *dir = tu_tmpdir(), *sock = tu_path(dir, "s");
    int ls = socket(AF_UNIX, SOCK_STREAM, 0);
    cr_assert(ls >= 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    cr_assert(strlen(sock) < sizeof sa.sun_path);
    strcpy(sa.sun_path, sock);
    cr_assert_eq(bind(ls, (struct sockaddr *)&sa, sizeof sa), 0, "%s", strerror(errno));
    cr_assert_eq(listen(ls, 1), 0);
    sq_error err = {0};
    cr_assert_eq(sq_out_is_direct(sock), 1);
    cr_assert_eq(sq_file_write_atomic(sock, "over a socket\n", 14, &err), SQ_OK, "%s", err.msg);
    int c = accept(ls, NULL, NULL);
    cr_assert(c >= 0);
    char buf[64] = {0};
    size_t n = 0;
    ssize_t r;
    while (n < sizeof buf - 1 && (r = read(c, buf + n, sizeof buf - 1 - n)) > 0)
        n += (size_t)r;
    cr_assert_str_eq(buf, "over a socket\n");
    struct stat sb;
    cr_assert(stat(sock, &sb) == 0 && S_ISSOCK(sb.st_mode), "the socket is still a socket");
    close(c);
    close(ls);
    tu_rmtree(dir);
}

Test(io, regular_output_is_replaced_atomically_without_a_visible_temporary)
{
    char *dir = tu_tmpdir(), *path = tu_path(dir, "out.txt");
    tu_write(path, "old\n");
    sq_error err = {0};
    sq_out *o;
    cr_assert_eq(sq_out_is_direct(path), 0);
    cr_assert_eq(sq_out_open(&o, path, &err), SQ_OK, "%s", err.msg);
    fputs("new\n", sq_out_stream(o));
    /* ext4, xfs, btrfs and tmpfs have O_TMPFILE: nothing but the old file is visible */
    int during = tu_count_entries(dir);
    cr_assert_eq(sq_out_prepare(o, &err), SQ_OK, "%s", err.msg);
    char *old = tu_read(path, NULL);
    cr_assert_str_eq(old, "old\n", "prepared, not committed");
    cr_assert_eq(sq_out_commit(o, &err), SQ_OK, "%s", err.msg);
    char *now = tu_read(path, NULL);
    cr_assert_str_eq(now, "new\n");
    cr_assert_eq(tu_count_entries(dir), 1);
    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    mode_t mask = umask(0);
    umask(mask);
    cr_assert_eq(st.st_mode & 0777, 0666 & ~mask, "the mode a plain fopen() gives");
    if (during != 1)
        cr_log_warn("this file system has no O_TMPFILE: a named temporary file was used");
    /* an aborted write leaves the old file and nothing else */
    cr_assert_eq(sq_out_open(&o, path, &err), SQ_OK, "%s", err.msg);
    fputs("lost\n", sq_out_stream(o));
    sq_out_abort(o);
    free(now);
    now = tu_read(path, NULL);
    cr_assert_str_eq(now, "new\n");
    cr_assert_eq(tu_count_entries(dir), 1);
    free(old);
    free(now);
    tu_rmtree(dir);
}

/* In a child limited by `ulimit -f` (RLIMIT_FSIZE): SIGXFSZ is ignored once the tool's signal
 * handlers are installed, so the write fails with EFBIG and gives SQ_EIO. */
Test(io, file_size_limit_is_an_io_error_not_a_signal)
{
    char *dir = tu_tmpdir(), *path = tu_path(dir, "big.bin");
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        struct rlimit rl = {.rlim_cur = 8192, .rlim_max = RLIM_INFINITY};
        setrlimit(RLIMIT_FSIZE, &rl);
        sq_out_install_signal_handlers();
        static char big[100000];
        memset(big, 'x', sizeof big);
        sq_error err = {0};
        int rc = sq_file_write_atomic(path, big, sizeof big, &err);
        if (rc != SQ_EIO || !strstr(err.msg, "File too large"))
            fprintf(stderr, "rc %d: %s\n", rc, err.msg);
        _exit(rc);
    }
    int st;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    cr_assert(WIFEXITED(st), "died of signal %d", WIFSIGNALED(st) ? WTERMSIG(st) : 0);
    cr_assert_eq(WEXITSTATUS(st), SQ_EIO);
    cr_assert_eq(tu_count_entries(dir), 0, "the temporary file was removed");
    tu_rmtree(dir);
}

Test(io, output_equal_to_an_input_is_refused)
{
    char *dir = tu_tmpdir(), *in = tu_path(dir, "c.h5"), *lnk = tu_path(dir, "link.h5");
    char *hard = tu_path(dir, "hard.h5"), *other = tu_path(dir, "other.json");
    tu_write(in, "corpus");
    cr_assert_eq(symlink("c.h5", lnk), 0);
    cr_assert_eq(link(in, hard), 0);
    sq_path_use inputs[] = {{"the corpus argument", in}, {"--tokens", NULL}, {"--plan", "-"}};
    const char *same[] = {in, lnk, hard};
    for (int i = 0; i < 3; i++) {
        sq_path_use outs[] = {{"-o", same[i]}};
        sq_error err = {0};
        cr_assert_eq(sq_paths_check(inputs, 3, outs, 1, &err), SQ_EUSAGE, "%s", same[i]);
        cr_assert(strstr(err.msg, "-o") && strstr(err.msg, same[i]) &&
                      strstr(err.msg, "the corpus argument") && strstr(err.msg, in),
                  "%s", err.msg);
    }
    sq_path_use ok[] = {{"-o", other}, {"--table", "-"}, {"--svg", NULL}};
    sq_error err = {0};
    cr_assert_eq(sq_paths_check(inputs, 3, ok, 3, &err), SQ_OK, "%s", err.msg);
    cr_assert_str_eq(tu_read(in, NULL), "corpus", "nothing was written");
    tu_rmtree(dir);
}

Test(io, two_outputs_on_one_file_are_refused)
{
    char *dir = tu_tmpdir(), *x = tu_path(dir, "x.json"), *dotx = tu_path(dir, "./x.json");
    char *up = tu_path(dir, "sub/../x.json"), *y = tu_path(dir, "y.json");
    char *sub = tu_path(dir, "sub");
    cr_assert_eq(mkdir(sub, 0700), 0);
    sq_error err = {0};
    /* absent files compare by directory and name */
    sq_path_use a[] = {{"-o", x}, {"--table", dotx}};
    cr_assert_eq(sq_paths_check(NULL, 0, a, 2, &err), SQ_EUSAGE);
    cr_assert(strstr(err.msg, "-o") && strstr(err.msg, "--table") && strstr(err.msg, "same file"),
              "%s", err.msg);
    sq_path_use b[] = {{"-o", x}, {"--svg", y}, {"--report", up}};
    memset(&err, 0, sizeof err);
    cr_assert_eq(sq_paths_check(NULL, 0, b, 3, &err), SQ_EUSAGE);
    cr_assert(strstr(err.msg, "-o") && strstr(err.msg, "--report"), "%s", err.msg);
    tu_write(x, "exists");
    memset(&err, 0, sizeof err);
    cr_assert_eq(sq_paths_check(NULL, 0, b, 3, &err), SQ_EUSAGE);
    sq_path_use c[] = {{"-o", x}, {"--svg", y}};
    cr_assert_eq(sq_paths_check(NULL, 0, c, 2, &err), SQ_OK);
    /* one device may take several outputs (-o NULLDEV --table NULLDEV) */
    char *dev = tu_path(dir, "null");
    if (tu_mkchar(dev, 1, 3) == 0) {
        sq_path_use d[] = {{"-o", dev}, {"--table", dev}};
        memset(&err, 0, sizeof err);
        cr_assert_eq(sq_paths_check(NULL, 0, d, 2, &err), SQ_OK, "%s", err.msg);
    } else {
        cr_log_warn("mknod not allowed: the device case of two outputs is not tested");
    }
    tu_rmtree(dir);
}

/* ---- progress lines (libsequoia/base/progress.h) ------------------------------------------ */

static char *random_model(const char *dir, const char *name, uint64_t seed)
{
    char *path = tu_path(dir, name);
    sq_random_model_params p = sq_random_model_default_params();
    p.seed = seed;
    p.config.vocab_size = 97;
    sq_error err = {0};
    cr_assert_eq(sq_model_write_random(path, &p, &err), 0, "%s", err.msg);
    return path;
}

/* argv run three ways: stderr on a terminal must show `line` (a progress line: redrawn after
 * "\r", ending at 100%); with -q added on a terminal, and with stderr in a file, no progress. */
static void check_progress(char **argv, int argc, const char *line)
{
    char *tty = NULL, *se = NULL;
    int st = tu_run_tty(argv, NULL, &tty);
    cr_assert_eq(st, 0, "exit %d: %s", st, tty);
    cr_assert(strstr(tty, line) && strstr(tty, "(100%)"), "no progress line \"%s\" on a terminal: %s",
              line + 1, tty);
    st = tu_run(argv, NULL, &se);
    cr_assert_eq(st, 0, "%s", se);
    cr_assert(!strchr(se, '\r') && !strstr(se, "(100%)"), "progress on a file: %s", se);
    argv[argc] = "-q";
    argv[argc + 1] = NULL;
    free(tty);
    st = tu_run_tty(argv, NULL, &tty);
    cr_assert_eq(st, 0, "%s", tty);
    cr_assert(!strstr(tty, "(100%)") && !strstr(tty, line), "progress with --quiet: %s", tty);
    argv[argc] = NULL;
    free(tty);
    free(se);
}

Test(io, progress_line_of_sequoia_run_dump_and_validate, .timeout = 120)
{
    char *dir = tu_tmpdir(), *toks = tu_path(dir, "t.txt"), *out = tu_path(dir, "c.h5");
    char *draft = random_model(dir, "draft", 2), *target = random_model(dir, "target", 1);
    FILE *fp = fopen(toks, "w");
    for (int i = 0; i < 600; i++)
        fprintf(fp, "%d%c", (i * 31) % 97, i % 200 == 199 ? '\n' : ' ');
    fclose(fp);
    char *a1[20] = {getenv("SQ_RUN_BIN"), "dump", "--draft", draft, "--target", target,
                    "--tokens", toks, "-o", out, "--context", "128", "--threads", "1", NULL};
    check_progress(a1, 14, "\rsequoia-run: ");
    char *plan = tu_path(dir, "plan.json"), *prompt = tu_path(dir, "p.txt");
    char *ap[] = {getenv("SQ_PLAN_BIN"), "-q", "--budget", "4", "--depth", "3", "-o", plan, NULL};
    char *se = NULL;
    cr_assert_eq(tu_run(ap, NULL, &se), 0, "%s", se);
    free(se);
    tu_write(prompt, "5 17 42 8\n");
    char *a2[24] = {getenv("SQ_RUN_BIN"), "--draft", draft, "--target", target, "--plan", plan,
                    "--prompt", prompt, "-n", "8", "--threads", "1", "--validate",
                    "--validate-samples", "200", "--no-baseline", "-o", tu_path(dir, "o.txt"), NULL};
    check_progress(a2, 19, "\rsequoia-run: validate: ");
    tu_rmtree(dir);
}

Test(io, progress_line_of_sequoia_accept)
{
    char *dir = tu_tmpdir(), *toks = tu_path(dir, "t.txt"), *corpus = tu_path(dir, "c.h5");
    char *draft = random_model(dir, "draft", 2), *target = random_model(dir, "target", 1);
    tu_write(toks, "1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20\n");
    char *a0[] = {getenv("SQ_RUN_BIN"), "dump", "--draft", draft, "--target", target, "--tokens",
                  toks, "-o", corpus, "-q", NULL};
    char *se = NULL;
    cr_assert_eq(tu_run(a0, NULL, &se), 0, "%s", se);
    free(se);
    char *a1[12] = {getenv("SQ_ACCEPT_BIN"), corpus, "--samples", "8", "--threads", "1", "-o",
                    tu_path(dir, "curves.json"), NULL};
    check_progress(a1, 8, "\rsequoia-accept: c.h5 (1/1): ");
    tu_rmtree(dir);
}

/* sequoia-plan draws its line only for solves past a second; SQ_PROGRESS_DELAY_MS=0 shows it
 * for a small one. The line counts DP columns. */
Test(io, progress_line_of_sequoia_plan_solves)
{
    setenv("SQ_PROGRESS_DELAY_MS", "0", 1);
    char *dir = tu_tmpdir();
    char *a[12] = {getenv("SQ_PLAN_BIN"), "-n", "64", "-d", "8", "-o", tu_path(dir, "p.json"),
                   NULL};
    check_progress(a, 7, "\rsequoia-plan: solve: ");
    /* without the override, a 1 ms solve shows nothing */
    unsetenv("SQ_PROGRESS_DELAY_MS");
    char *tty = NULL;
    cr_assert_eq(tu_run_tty(a, NULL, &tty), 0, "%s", tty);
    cr_assert(!strstr(tty, "solve:"), "a quick solve drew a progress line: %s", tty);
    free(tty);
    tu_rmtree(dir);
}
