#include "libsequoia/base/io.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int sq_file_read(const char *path, size_t max_bytes, char **data, size_t *len, sq_error *err)
{
    *data = NULL;
    if (len)
        *len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return sq_error_set(err, SQ_ENOINPUT, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return sq_error_set(err, SQ_EIO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (S_ISDIR(st.st_mode)) {
        close(fd);
        return sq_error_set(err, SQ_EDATA, "%s: is a directory, expected a file", path);
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return sq_error_set(err, SQ_EDATA, "%s: not a regular file", path);
    }
    if ((unsigned long long)st.st_size > max_bytes) {
        close(fd);
        return sq_error_set(err, SQ_EDATA, "%s: file is %lld bytes, more than the limit of %zu",
                            path, (long long)st.st_size, max_bytes);
    }
    size_t cap = (size_t)st.st_size;
    char *buf = malloc(cap + 1);
    if (!buf) {
        close(fd);
        return sq_error_oom(err, path);
    }
    size_t got = 0;
    while (got < cap) {
        ssize_t r = read(fd, buf + got, cap - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            int e = errno;
            free(buf);
            close(fd);
            return sq_error_set(err, SQ_EIO, "%s: read error: %s", path, strerror(e));
        }
        if (r == 0)
            break; /* the file shrank while we read it: use what is there */
        got += (size_t)r;
    }
    close(fd);
    buf[got] = '\0';
    *data = buf;
    if (len)
        *len = got;
    return SQ_OK;
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
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_fatal_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
}

/* ---- atomic output ---------------------------------------------------------------------- */

struct sq_out {
    FILE *fp;
    int   is_stdout;
    int   slot;                 /* index in pending[], or -1 */
    char *path;                 /* destination                */
    char *tmp;                  /* temporary file beside it   */
};

int sq_out_open(sq_out **outp, const char *path, sq_error *err)
{
    *outp = NULL;
    sq_out *o = calloc(1, sizeof *o);
    if (!o)
        return sq_error_oom(err, "output");
    o->slot = -1;
    if (strcmp(path, "-") == 0) {
        o->fp = stdout;
        o->is_stdout = 1;
        *outp = o;
        return SQ_OK;
    }
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        free(o);
        return sq_error_set(err, SQ_ECANTCREAT, "%s: is a directory, expected a file path", path);
    }
    size_t n = strlen(path);
    if (n + 32 > SQ_PATH_MAX) {
        free(o);
        return sq_error_set(err, SQ_ECANTCREAT, "%s: path is too long", path);
    }
    o->path = strdup(path);
    o->tmp = malloc(n + 32);
    if (!o->path || !o->tmp) {
        free(o->path);
        free(o->tmp);
        free(o);
        return sq_error_oom(err, "output path");
    }
    /* "dir/name" -> "dir/.name.tmp-XXXXXX": same directory, so rename() is atomic. */
    const char *slash = strrchr(path, '/');
    size_t dirlen = slash ? (size_t)(slash - path) + 1 : 0;
    snprintf(o->tmp, n + 32, "%.*s.%s.tmp-XXXXXX", (int)dirlen, path, path + dirlen);
    sigset_t old;
    signals_block(&old);
    int fd = mkstemp(o->tmp);
    if (fd >= 0)
        o->slot = pending_add(o->tmp);
    signals_restore(&old);
    if (fd < 0) {
        int e = errno;
        free(o->path);
        free(o->tmp);
        free(o);
        return sq_error_set(err, SQ_ECANTCREAT, "%s: cannot create a temporary file beside it: %s",
                            path, strerror(e));
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
    if (!o->is_stdout) {
        if (o->fp)
            fclose(o->fp);
        unlink(o->tmp);
        pending_drop(o->slot);
    }
    out_free(o);
}

int sq_out_prepare(sq_out *o, sq_error *err)
{
    if (o->is_stdout) {
        if (ferror(stdout) || fflush(stdout) != 0)
            return sq_error_set(err, SQ_EIO, "standard output: write error: %s", strerror(errno));
        return SQ_OK;
    }
    if (!o->fp)
        return SQ_OK; /* prepared already */
    int rc = SQ_OK;
    if (ferror(o->fp) || fflush(o->fp) != 0)
        rc = sq_error_set(err, SQ_EIO, "%s: write error: %s", o->path, strerror(errno));
    if (rc == SQ_OK) {
        /* mkstemp makes the file 0600; give it the mode a plain fopen() would have. */
        mode_t mask = umask(0);
        umask(mask);
        if (fchmod(fileno(o->fp), 0666 & ~mask) != 0)
            rc = sq_error_set(err, SQ_EIO, "%s: chmod: %s", o->path, strerror(errno));
    }
    if (rc == SQ_OK && fsync(fileno(o->fp)) != 0 && errno != EINVAL)
        rc = sq_error_set(err, SQ_EIO, "%s: fsync: %s", o->path, strerror(errno));
    if (fclose(o->fp) != 0 && rc == SQ_OK)
        rc = sq_error_set(err, SQ_EIO, "%s: close: %s", o->path, strerror(errno));
    o->fp = NULL;
    return rc;
}

int sq_out_commit(sq_out *o, sq_error *err)
{
    if (o->is_stdout) {
        int bad = ferror(stdout) || fflush(stdout) != 0;
        out_free(o);
        if (bad)
            return sq_error_set(err, SQ_EIO, "standard output: write error: %s", strerror(errno));
        return SQ_OK;
    }
    int rc = sq_out_prepare(o, err);
    if (rc == SQ_OK && rename(o->tmp, o->path) != 0)
        rc = sq_error_set(err, SQ_ECANTCREAT, "%s: cannot rename the temporary file into place: %s",
                          o->path, strerror(errno));
    if (rc != SQ_OK)
        unlink(o->tmp);
    pending_drop(o->slot);
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

/* ---- temporary files written by other libraries ------------------------------------------ */

int sq_temp_create(const char *path, char **tmpp, int *slot, sq_error *err)
{
    *tmpp = NULL;
    *slot = -1;
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return sq_error_set(err, SQ_ECANTCREAT, "%s: is a directory, expected a file path", path);
    size_t n = strlen(path);
    if (n + 32 > SQ_PATH_MAX)
        return sq_error_set(err, SQ_ECANTCREAT, "%s: path is too long", path);
    char *tmp = malloc(n + 32);
    if (!tmp)
        return sq_error_oom(err, "temporary path");
    const char *slash = strrchr(path, '/');
    size_t dirlen = slash ? (size_t)(slash - path) + 1 : 0;
    snprintf(tmp, n + 32, "%.*s.%s.tmp-XXXXXX", (int)dirlen, path, path + dirlen);
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

void sq_temp_discard(const char *tmp, int slot)
{
    if (tmp)
        unlink(tmp);
    pending_drop(slot);
}

int sq_temp_commit(const char *tmp, int slot, const char *path, sq_error *err)
{
    int rc = SQ_OK;
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
