/* _GNU_SOURCE for O_TMPFILE and AT_EMPTY_PATH (Linux, open(2) and linkat(2)). */
#define _GNU_SOURCE
#include "libsequoia/base/io.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static const char *file_kind(mode_t m)
{
    if (S_ISDIR(m))
        return "a directory";
    if (S_ISFIFO(m))
        return "a FIFO";
    if (S_ISCHR(m))
        return "a character device";
    if (S_ISBLK(m))
        return "a block device";
    if (S_ISSOCK(m))
        return "a socket";
    return "not a file";
}

/* An anonymous pipe (`<(cmd)`, /dev/stdin on a pipe) is a FIFO to fstat, but no FIFO by name:
 * the name is a link to it. */
static const char *input_kind(const char *path, mode_t m)
{
    struct stat ls;
    if (S_ISFIFO(m) && (lstat(path, &ls) != 0 || !S_ISFIFO(ls.st_mode)))
        return "a pipe";
    return file_kind(m);
}

int sq_input_open(const char *path, const char *what, struct stat *stp, int *fdp, sq_error *err)
{
    *fdp = -1;
    /* the callers that read standard input for "-" handle it first: here it is an input that
     * is opened by name and read by seeking or mapping (issue 27: "-: cannot open: No such
     * file or directory") */
    if (strcmp(path, "-") == 0)
        return sq_error_set(err, SQ_EUSAGE, "-: standard input cannot be %s: this input is read "
                            "by seeking or mapping, not as a stream; save it to a file and name "
                            "that", what ? what : "this input");
    /* O_NONBLOCK: open() of a FIFO with no writer returns at once instead of waiting. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) {
        int e = errno;
        return sq_error_set(err, SQ_ENOINPUT, "%s: cannot open: %s", path, strerror(e));
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return sq_error_set(err, SQ_EIO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        if (S_ISDIR(st.st_mode) && what)
            return sq_error_set(err, SQ_EDATA, "%s: is a directory, expected %s", path, what);
        return sq_error_set(err, SQ_EDATA, "%s: not a regular file (%s): save it to a file, or "
                            "give '-' for standard input where the option reads one "
                            "(docs/robustness.md)", path, input_kind(path, st.st_mode));
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        int e = errno;
        close(fd);
        return sq_error_set(err, SQ_EIO, "%s: fcntl: %s", path, strerror(e));
    }
    if (stp)
        *stp = st;
    *fdp = fd;
    return SQ_OK;
}

int sq_input_check(const char *path, const char *what, sq_error *err)
{
    int fd;
    int rc = sq_input_open(path, what, NULL, &fd, err);
    if (rc)
        return rc;
    close(fd);
    return SQ_OK;
}

/* Reads fd to its end into a NUL-terminated buffer, at most max_bytes. */
static int read_all(int fd, const char *path, size_t max_bytes, size_t hint, char **data,
                    size_t *len, sq_error *err)
{
    size_t cap = hint ? hint : 65536, got = 0;
    char *buf = malloc(cap + 1);
    if (!buf)
        return sq_error_oom(err, path);
    for (;;) {
        if (got == cap) {
            if (hint)
                break; /* a regular file: read what its size said (it may have grown) */
            if (cap >= max_bytes) {
                /* one more byte tells "exactly the limit" from "more" */
                char extra;
                ssize_t r = read(fd, &extra, 1);
                if (r < 0 && errno == EINTR)
                    continue;
                if (r > 0) {
                    free(buf);
                    return sq_error_set(err, SQ_EDATA, "%s: more than the limit of %zu bytes",
                                        path, max_bytes);
                }
                break;
            }
            size_t nc = cap * 2 > max_bytes ? max_bytes : cap * 2;
            char *p = realloc(buf, nc + 1);
            if (!p) {
                free(buf);
                return sq_error_oom(err, path);
            }
            buf = p;
            cap = nc;
        }
        ssize_t r = read(fd, buf + got, cap - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            int e = errno;
            free(buf);
            return sq_error_set(err, SQ_EIO, "%s: read error: %s", path, strerror(e));
        }
        if (r == 0)
            break; /* the end (or a file that shrank while we read it: use what is there) */
        got += (size_t)r;
    }
    buf[got] = '\0';
    *data = buf;
    if (len)
        *len = got;
    return SQ_OK;
}

int sq_file_read(const char *path, size_t max_bytes, char **data, size_t *len, sq_error *err)
{
    *data = NULL;
    if (len)
        *len = 0;
    if (strcmp(path, "-") == 0) {
        /* a second "-" would read an empty stream and report an empty file (issue 27) */
        static atomic_int stdin_read;
        if (atomic_exchange(&stdin_read, 1))
            return sq_error_set(err, SQ_EUSAGE, "-: standard input was already read by another "
                                "input of this run; only one input can be '-'");
        return read_all(STDIN_FILENO, "standard input", max_bytes, 0, data, len, err);
    }
    struct stat st;
    int fd;
    int rc = sq_input_open(path, "a file", &st, &fd, err);
    if (rc)
        return rc;
    if ((unsigned long long)st.st_size > max_bytes) {
        close(fd);
        return sq_error_set(err, SQ_EDATA, "%s: file is %lld bytes, more than the limit of %zu",
                            path, (long long)st.st_size, max_bytes);
    }
    /* an empty regular file still reads to its end (hint 0 would mean a stream) */
    rc = st.st_size ? read_all(fd, path, max_bytes, (size_t)st.st_size, data, len, err)
                        : read_all(fd, path, max_bytes, 0, data, len, err);
    close(fd);
    return rc;
}

/* ---- temporary files that a signal must remove ---------------------------------------- */

#define SQ_MAX_PENDING 16
#define SQ_PATH_MAX 4096

static char pending[SQ_MAX_PENDING][SQ_PATH_MAX];
static volatile sig_atomic_t pending_used[SQ_MAX_PENDING];

/* SIGINT, SIGTERM and SIGHUP blocked around the creation and registration of a temporary
 * file, so that a signal never finds a file that exists but is not registered yet. */
static void signals_block(sigset_t *old)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGHUP);
    sigprocmask(SIG_BLOCK, &set, old);
}

static void signals_restore(const sigset_t *old)
{
    sigprocmask(SIG_SETMASK, old, NULL);
}

static int pending_add(const char *tmp)
{
    for (int i = 0; i < SQ_MAX_PENDING; i++) {
        if (!pending_used[i]) {
            snprintf(pending[i], SQ_PATH_MAX, "%s", tmp);
            pending_used[i] = 1;
            return i;
        }
    }
    return -1;
}

static void pending_drop(int slot)
{
    if (slot >= 0)
        pending_used[slot] = 0;
}

static void on_fatal_signal(int sig)
{
    for (int i = 0; i < SQ_MAX_PENDING; i++)
        if (pending_used[i])
            unlink(pending[i]);
    signal(sig, SIG_DFL);
    raise(sig);
}

void sq_out_install_signal_handlers(void)
{
    /* Past `ulimit -f`, a write fails with EFBIG (an I/O error, exit 74, the temporary file
     * removed) instead of killing the process with SIGXFSZ. */
    signal(SIGXFSZ, SIG_IGN);
    /* A pipe or FIFO whose reader went away: the write fails with EPIPE, reported as a write
     * error naming the output (exit 74), instead of death by SIGPIPE (141). */
    signal(SIGPIPE, SIG_IGN);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_fatal_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
}

/* ---- atomic output ----------------------------------------------------------------------
 *
 * Three ways to write, chosen when the output is opened (docs/robustness.md):
 *   - "-" and every path that exists and is neither a regular file nor a directory (a character
 *     or block device, a FIFO, a socket) are written directly: /dev/null must stay a device,
 *     and a pipe has no directory to put a temporary file in. A write error is still SQ_EIO.
 *   - otherwise an anonymous file (O_TMPFILE) in the destination's directory, given a name
 *     only at commit (linkat, then rename over the destination): a process killed with
 *     SIGKILL leaves nothing behind, because the file never had a name;
 *   - where the file system has no O_TMPFILE, a named temporary "dir/.name.tmp-XXXXXX", which
 *     SIGINT/SIGTERM/SIGHUP and every failure remove (SIGKILL cannot be caught: it stays). */

enum out_kind { OUT_STDOUT, OUT_DIRECT, OUT_ANON, OUT_NAMED };

struct sq_out {
    FILE *fp;
    int   kind;                 /* enum out_kind              */
    int   prepared;             /* OUT_ANON: flushed, fsynced */
    int   slot;                 /* index in pending[], or -1 */
    char *path;                 /* destination                */
    char *tmp;                  /* OUT_NAMED: the temporary file beside it */
};

/* "dir/name" -> the directory part with its slash ("dir/", or "" for a bare name). */
static size_t dir_len(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? (size_t)(slash - path) + 1 : 0;
}

/* Opens an anonymous file in path's directory; -1 with errno when the file system (or the
 * kernel) cannot. */
static int anon_open(const char *path)
{
#ifdef O_TMPFILE
    size_t dl = dir_len(path);
    char dir[SQ_PATH_MAX];
    if (dl == 0)
        snprintf(dir, sizeof dir, ".");
    else
        snprintf(dir, sizeof dir, "%.*s", (int)dl, path);
    /* The mode is applied with the umask, as a plain fopen() would create the file. */
    return open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0666);
#else
    (void)path;
    errno = EOPNOTSUPP;
    return -1;
#endif
}

/* Fills the trailing "XXXXXX" of name with random letters. */
static void random_suffix(char *name)
{
    static const char set[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    static unsigned long counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    unsigned long long x = (unsigned long long)ts.tv_nsec ^ ((unsigned long long)getpid() << 20) ^
                           (unsigned long long)(++counter * 0x9e3779b97f4a7c15ULL);
    unsigned char rnd[6];
    if (getrandom(rnd, sizeof rnd, GRND_NONBLOCK) == (ssize_t)sizeof rnd)
        for (int i = 0; i < 6; i++)
            x ^= (unsigned long long)rnd[i] << (8 * i);
    char *p = name + strlen(name) - 6;
    for (int i = 0; i < 6; i++) {
        p[i] = set[x % (sizeof set - 1)];
        x /= sizeof set - 1;
    }
}

/* Gives the anonymous file fd the name `path` (which must not exist): linkat by descriptor
 * where the process may (CAP_DAC_READ_SEARCH), else through /proc/self/fd (linkat(2)). */
static int anon_link(int fd, const char *path)
{
#ifdef AT_EMPTY_PATH
    if (linkat(fd, "", AT_FDCWD, path, AT_EMPTY_PATH) == 0)
        return 0;
#endif
    char proc[64];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
    return linkat(AT_FDCWD, proc, AT_FDCWD, path, AT_SYMLINK_FOLLOW);
}

/* Names the anonymous file fd and renames it over `path`. SIGINT/SIGTERM/SIGHUP stay blocked
 * for the few system calls in between, so that the name never outlives the process. */
static int anon_commit(int fd, const char *path, sq_error *err)
{
    size_t n = strlen(path) + 32;
    char *tmp = malloc(n);
    if (!tmp)
        return sq_error_oom(err, "temporary path");
    size_t dl = dir_len(path);
    sigset_t old;
    signals_block(&old);
    int rc = SQ_OK, linked = 0;
    for (int attempt = 0; attempt < 100 && !linked; attempt++) {
        snprintf(tmp, n, "%.*s.%s.tmp-XXXXXX", (int)dl, path, path + dl);
        random_suffix(tmp);
        if (anon_link(fd, tmp) == 0)
            linked = 1;
        else if (errno != EEXIST)
            break;
    }
    if (!linked)
        rc = sq_error_set(err, SQ_ECANTCREAT, "%s: cannot give the new file a name: %s", path,
                          strerror(errno));
    else if (rename(tmp, path) != 0) {
        rc = sq_error_set(err, SQ_ECANTCREAT, "%s: cannot rename the temporary file into place: %s",
                          path, strerror(errno));
        unlink(tmp);
    }
    signals_restore(&old);
    free(tmp);
    return rc;
}

/* Connects to a listening Unix socket at path, for writing. */
static int socket_open(const char *path)
{
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    if (strlen(path) >= sizeof sa.sun_path) {
        errno = ENAMETOOLONG;
        return -1;
    }
    memcpy(sa.sun_path, path, strlen(path) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

int sq_out_is_direct(const char *path)
{
    if (strcmp(path, "-") == 0)
        return 1;
    struct stat st;
    return stat(path, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode);
}

int sq_out_open(sq_out **outp, const char *path, sq_error *err)
{
    *outp = NULL;
    sq_out *o = calloc(1, sizeof *o);
    if (!o)
        return sq_error_oom(err, "output");
    o->slot = -1;
    if (strcmp(path, "-") == 0) {
        o->fp = stdout;
        o->kind = OUT_STDOUT;
        *outp = o;
        return SQ_OK;
    }
    size_t n = strlen(path);
    if (n + 32 > SQ_PATH_MAX) {
        free(o);
        return sq_error_set(err, SQ_ECANTCREAT, "%s: path is too long", path);
    }
    o->path = strdup(path);
    if (!o->path) {
        free(o);
        return sq_error_oom(err, "output path");
    }
    struct stat st;
    int fd = -1;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        free(o->path);
        free(o);
        return sq_error_set(err, SQ_ECANTCREAT, "%s: is a directory, expected a file path", path);
    }
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
        /* A device, FIFO or socket: written in place, never replaced. */
        o->kind = OUT_DIRECT;
        fd = S_ISSOCK(st.st_mode) ? socket_open(path)
                                  : open(path, O_WRONLY | O_CLOEXEC | O_NOCTTY);
        if (fd < 0) {
            int e = errno;
            free(o->path);
            free(o);
            return sq_error_set(err, SQ_ECANTCREAT, "%s: cannot open for writing: %s", path,
                                strerror(e));
        }
    } else {
        fd = anon_open(path);
        if (fd >= 0) {
            o->kind = OUT_ANON;
        } else {
            o->kind = OUT_NAMED;
            o->tmp = malloc(n + 32);
            if (!o->tmp) {
                free(o->path);
                free(o);
                return sq_error_oom(err, "output path");
            }
            /* "dir/name" -> "dir/.name.tmp-XXXXXX": same directory, so rename() is atomic. */
            size_t dl = dir_len(path);
            snprintf(o->tmp, n + 32, "%.*s.%s.tmp-XXXXXX", (int)dl, path, path + dl);
            sigset_t old;
            signals_block(&old);
            fd = mkstemp(o->tmp);
            if (fd >= 0)
                o->slot = pending_add(o->tmp);
            signals_restore(&old);
            if (fd < 0) {
                int e = errno;
                free(o->path);
                free(o->tmp);
                free(o);
                return sq_error_set(err, SQ_ECANTCREAT,
                                    "%s: cannot create a temporary file beside it: %s", path,
                                    strerror(e));
            }
        }
    }
    o->fp = fdopen(fd, "w");
    if (!o->fp) {
        int e = errno;
        close(fd);
        sq_out_abort(o);
        return sq_error_set(err, SQ_ECANTCREAT, "%s: cannot open a stream: %s", path, strerror(e));
    }
    *outp = o;
    return SQ_OK;
}

FILE *sq_out_stream(sq_out *out)
{
    return out->fp;
}

const char *sq_out_path(const sq_out *out)
{
    return out->kind == OUT_STDOUT ? "-" : out->path;
}

static void out_free(sq_out *o)
{
    free(o->path);
    free(o->tmp);
    free(o);
}

void sq_out_abort(sq_out *o)
{
    if (!o)
        return;
    if (o->kind != OUT_STDOUT) {
        if (o->fp)
            fclose(o->fp); /* an anonymous file vanishes with its last descriptor */
        if (o->kind == OUT_NAMED) {
            unlink(o->tmp);
            pending_drop(o->slot);
        }
    }
    out_free(o);
}

/* Flushes the stream; SQ_EIO naming `what` when anything written so far failed. */
static int flush_checked(FILE *fp, const char *what, sq_error *err)
{
    int bad = ferror(fp);
    int e = bad ? errno : 0;
    if (fflush(fp) != 0) {
        bad = 1;
        e = errno;
    }
    if (bad)
        return sq_error_set(err, SQ_EIO, "%s: write error: %s", what,
                            e ? strerror(e) : "the stream failed");
    return SQ_OK;
}

int sq_out_prepare(sq_out *o, sq_error *err)
{
    if (o->kind == OUT_STDOUT)
        return flush_checked(stdout, "standard output", err);
    if (!o->fp || o->prepared)
        return SQ_OK; /* prepared already */
    int rc = flush_checked(o->fp, o->path, err);
    if (o->kind == OUT_DIRECT)
        return rc; /* nothing to sync on a device, FIFO or socket */
    if (rc == SQ_OK && o->kind == OUT_NAMED) {
        /* mkstemp makes the file 0600; give it the mode a plain fopen() would have. */
        mode_t mask = umask(0);
        umask(mask);
        if (fchmod(fileno(o->fp), 0666 & ~mask) != 0)
            rc = sq_error_set(err, SQ_EIO, "%s: chmod: %s", o->path, strerror(errno));
    }
    if (rc == SQ_OK && fsync(fileno(o->fp)) != 0 && errno != EINVAL)
        rc = sq_error_set(err, SQ_EIO, "%s: fsync: %s", o->path, strerror(errno));
    if (o->kind == OUT_ANON) {
        /* The descriptor stays open until the commit: closing it would drop the file. */
        o->prepared = rc == SQ_OK;
        return rc;
    }
    if (fclose(o->fp) != 0 && rc == SQ_OK)
        rc = sq_error_set(err, SQ_EIO, "%s: close: %s", o->path, strerror(errno));
    o->fp = NULL;
    return rc;
}

int sq_out_commit(sq_out *o, sq_error *err)
{
    if (o->kind == OUT_STDOUT) {
        int rc = flush_checked(stdout, "standard output", err);
        out_free(o);
        return rc;
    }
    int rc = sq_out_prepare(o, err);
    if (o->kind == OUT_DIRECT) {
        if (fclose(o->fp) != 0 && rc == SQ_OK)
            rc = sq_error_set(err, SQ_EIO, "%s: write error: %s", o->path, strerror(errno));
        o->fp = NULL;
    } else if (o->kind == OUT_ANON) {
        if (rc == SQ_OK)
            rc = anon_commit(fileno(o->fp), o->path, err);
        fclose(o->fp);
        o->fp = NULL;
    } else {
        if (rc == SQ_OK && rename(o->tmp, o->path) != 0)
            rc = sq_error_set(err, SQ_ECANTCREAT,
                              "%s: cannot rename the temporary file into place: %s", o->path,
                              strerror(errno));
        if (rc != SQ_OK)
            unlink(o->tmp);
        pending_drop(o->slot);
    }
    out_free(o);
    return rc;
}

int sq_file_write_atomic(const char *path, const char *data, size_t len, sq_error *err)
{
    sq_out *o;
    int rc = sq_out_open(&o, path, err);
    if (rc)
        return rc;
    if (len && fwrite(data, 1, len, sq_out_stream(o)) != len) {
        int e = errno;
        sq_out_abort(o);
        return sq_error_set(err, SQ_EIO, "%s: write error: %s", path, strerror(e));
    }
    return sq_out_commit(o, err);
}

/* ---- temporary files written by other libraries ------------------------------------------
 *
 * HDF5 wants a file name. Where the file system has O_TMPFILE, the name handed out is the
 * anonymous file's /proc/self/fd/N link (opening it reopens the same file, proc(5)), and the
 * slot is -2 - N, so that a killed process leaves nothing; otherwise a named temporary file,
 * registered for the signal handler, with slot >= -1. */

static int slot_fd(int slot)
{
    return slot <= -2 ? -2 - slot : -1;
}

int sq_temp_is_anonymous(int slot)
{
    return slot_fd(slot) >= 0;
}

/* The directory for the temporary file of `path`: beside it, except for a device or FIFO
 * (HDF5 cannot write those in place: it seeks and reads back), whose file is built in $TMPDIR
 * (or /tmp) and streamed to it at commit. */
static const char *temp_base(const char *path, char *buf, size_t cap)
{
    if (!sq_out_is_direct(path))
        return path;
    const char *t = getenv("TMPDIR");
    snprintf(buf, cap, "%s/sq-output", t && *t ? t : "/tmp");
    return buf;
}

int sq_temp_create(const char *path, char **tmpp, int *slot, sq_error *err)
{
    *tmpp = NULL;
    *slot = -1;
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return sq_error_set(err, SQ_ECANTCREAT, "%s: is a directory, expected a file path", path);
    char basebuf[SQ_PATH_MAX];
    const char *base = temp_base(path, basebuf, sizeof basebuf);
    size_t n = strlen(base);
    if (n + 32 > SQ_PATH_MAX)
        return sq_error_set(err, SQ_ECANTCREAT, "%s: path is too long", path);
    char *tmp = malloc(n + 32);
    if (!tmp)
        return sq_error_oom(err, "temporary path");
    int afd = anon_open(base);
    if (afd >= 0) {
        snprintf(tmp, n + 32, "/proc/self/fd/%d", afd);
        struct stat pst;
        if (stat(tmp, &pst) == 0 && S_ISREG(pst.st_mode)) {
            *slot = -2 - afd;
            *tmpp = tmp;
            return SQ_OK;
        }
        close(afd); /* no /proc: fall back to a named file */
    }
    size_t dl = dir_len(base);
    snprintf(tmp, n + 32, "%.*s.%s.tmp-XXXXXX", (int)dl, base, base + dl);
    sigset_t old;
    signals_block(&old);
    int fd = mkstemp(tmp);
    if (fd >= 0)
        *slot = pending_add(tmp);
    signals_restore(&old);
    if (fd < 0) {
        int e = errno;
        free(tmp);
        return sq_error_set(err, SQ_ECANTCREAT, "%s: cannot create a temporary file beside it: %s",
                            path, strerror(e));
    }
    close(fd);
    *tmpp = tmp;
    return SQ_OK;
}

/* Streams the finished temporary file (descriptor fd) to the device, FIFO or socket `path`. */
static int copy_to_direct(int fd, const char *path, sq_error *err)
{
    sq_out *o;
    int rc = sq_out_open(&o, path, err);
    if (rc)
        return rc;
    FILE *dst = sq_out_stream(o);
    char buf[1 << 16];
    ssize_t r;
    off_t at = 0;
    while ((r = pread(fd, buf, sizeof buf, at)) > 0) {
        if (fwrite(buf, 1, (size_t)r, dst) != (size_t)r)
            break;
        at += r;
    }
    if (r < 0) {
        int e = errno;
        sq_out_abort(o);
        return sq_error_set(err, SQ_EIO, "%s: cannot read back the temporary file: %s", path,
                            strerror(e));
    }
    return sq_out_commit(o, err);
}

void sq_temp_discard(const char *tmp, int slot)
{
    int afd = slot_fd(slot);
    if (afd >= 0) {
        close(afd);
        return;
    }
    if (tmp)
        unlink(tmp);
    pending_drop(slot);
}

int sq_temp_commit(const char *tmp, int slot, const char *path, sq_error *err)
{
    int rc = SQ_OK;
    int afd = slot_fd(slot);
    if (sq_out_is_direct(path)) {
        /* built in $TMPDIR: stream it to the device, then drop it */
        int fd = afd >= 0 ? afd : open(tmp, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            rc = sq_error_set(err, SQ_EIO, "%s: cannot reopen the temporary file %s: %s", path,
                              tmp, strerror(errno));
        else
            rc = copy_to_direct(fd, path, err);
        if (fd >= 0)
            close(fd);
        if (afd < 0) {
            unlink(tmp);
            pending_drop(slot);
        }
        return rc;
    }
    if (afd >= 0) {
        if (fsync(afd) != 0 && errno != EINVAL)
            rc = sq_error_set(err, SQ_EIO, "%s: fsync: %s", path, strerror(errno));
        if (rc == SQ_OK)
            rc = anon_commit(afd, path, err);
        close(afd);
        return rc;
    }
    int fd = open(tmp, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        rc = sq_error_set(err, SQ_EIO, "%s: cannot reopen the temporary file %s: %s", path, tmp,
                          strerror(errno));
    if (rc == SQ_OK) {
        mode_t mask = umask(0);
        umask(mask);
        if (fchmod(fd, 0666 & ~mask) != 0)
            rc = sq_error_set(err, SQ_EIO, "%s: chmod: %s", path, strerror(errno));
    }
    if (rc == SQ_OK && fsync(fd) != 0 && errno != EINVAL)
        rc = sq_error_set(err, SQ_EIO, "%s: fsync: %s", path, strerror(errno));
    if (fd >= 0 && close(fd) != 0 && rc == SQ_OK)
        rc = sq_error_set(err, SQ_EIO, "%s: close: %s", path, strerror(errno));
    if (rc == SQ_OK && rename(tmp, path) != 0)
        rc = sq_error_set(err, SQ_ECANTCREAT, "%s: cannot rename the temporary file into place: %s",
                          path, strerror(errno));
    if (rc != SQ_OK)
        unlink(tmp);
    pending_drop(slot);
    return rc;
}

/* ---- outputs that would destroy an input or each other ------------------------------------ */

/* What a path will be once written: the file it names when that exists (symlinks followed),
 * else the name inside its (existing) directory. */
typedef struct path_id {
    int    exists;
    int    regular;
    dev_t  dev;
    ino_t  ino;
    const char *base;    /* exists == 0: the last component */
} path_id;

static int path_identify(const char *path, path_id *id)
{
    memset(id, 0, sizeof *id);
    struct stat st;
    if (stat(path, &st) == 0) {
        id->exists = 1;
        id->regular = S_ISREG(st.st_mode);
        id->dev = st.st_dev;
        id->ino = st.st_ino;
        return 0;
    }
    /* Absent: identify its directory, so that "x", "./x" and "d/../x" compare equal. */
    size_t dl = dir_len(path);
    char dir[SQ_PATH_MAX];
    if (dl >= sizeof dir)
        return -1;
    if (dl == 0)
        snprintf(dir, sizeof dir, ".");
    else
        snprintf(dir, sizeof dir, "%.*s", (int)dl, path);
    if (stat(dir, &st) != 0)
        return -1;
    id->dev = st.st_dev;
    id->ino = st.st_ino;
    id->base = path + dl;
    id->regular = 1;
    return 0;
}

static int path_id_same(const path_id *a, const path_id *b)
{
    if (a->exists != b->exists || a->dev != b->dev || a->ino != b->ino)
        return 0;
    return a->exists || strcmp(a->base, b->base) == 0;
}

int sq_paths_check(const sq_path_use *inputs, int n_in, const sq_path_use *outputs, int n_out,
                   sq_error *err)
{
    for (int i = 0; i < n_out; i++) {
        const sq_path_use *o = &outputs[i];
        if (!o->path || strcmp(o->path, "-") == 0)
            continue;
        path_id oid;
        if (path_identify(o->path, &oid) != 0 || !oid.regular)
            continue; /* a device or FIFO may take several streams; a bad path fails later */
        for (int j = 0; j < n_in; j++) {
            const sq_path_use *in = &inputs[j];
            if (!in->path || strcmp(in->path, "-") == 0)
                continue;
            path_id iid;
            if (oid.exists && path_identify(in->path, &iid) == 0 && path_id_same(&oid, &iid))
                return sq_error_set(err, SQ_EUSAGE,
                                    "%s %s: is the same file as the input %s %s; refusing to "
                                    "overwrite an input", o->option, o->path, in->option,
                                    in->path);
        }
        for (int j = 0; j < i; j++) {
            const sq_path_use *p = &outputs[j];
            if (!p->path || strcmp(p->path, "-") == 0)
                continue;
            path_id pid;
            if (path_identify(p->path, &pid) == 0 && path_id_same(&oid, &pid))
                return sq_error_set(err, SQ_EUSAGE,
                                    "%s %s and %s %s: name the same file; one output would be "
                                    "lost", p->option, p->path, o->option, o->path);
        }
    }
    return SQ_OK;
}

int sq_paths_distinct(const sq_path_use *inputs, int n, sq_error *err)
{
    for (int i = 0; i < n; i++) {
        path_id a;
        if (!inputs[i].path || path_identify(inputs[i].path, &a) != 0 || !a.exists || !a.regular)
            continue;
        for (int j = 0; j < i; j++) {
            path_id b;
            if (inputs[j].path && path_identify(inputs[j].path, &b) == 0 && path_id_same(&a, &b))
                return sq_error_set(err, SQ_EUSAGE, "%s %s and %s %s: name the same file; it "
                                    "would count twice", inputs[j].option, inputs[j].path,
                                    inputs[i].option, inputs[i].path);
        }
    }
    return SQ_OK;
}

int sq_path_broken_link(const char *path, sq_error *err)
{
    struct stat st;
    if (lstat(path, &st) != 0 || !S_ISLNK(st.st_mode) || stat(path, &st) == 0)
        return SQ_OK;
    int e = errno;
    char target[SQ_PATH_MAX];
    ssize_t n = readlink(path, target, sizeof target - 1);
    target[n > 0 ? n : 0] = '\0';
    if (e == ELOOP)
        return sq_error_set(err, SQ_ENOINPUT, "%s: symlink loop (-> %s: %s)", path, target,
                            strerror(e));
    return sq_error_set(err, SQ_ENOINPUT, "%s: dangling symlink (-> %s: %s)", path, target,
                        strerror(e));
}
