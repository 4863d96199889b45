/* posix_openpt, grantpt, unlockpt, ptsname (X/Open) for tu_run_tty. */
#define _XOPEN_SOURCE 700
#include "tests/testutil.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

char *tu_tmpdir(void)
{
    const char *base = getenv("TMPDIR");
    char *tmpl = malloc(4096);
    if (!tmpl)
        abort();
    snprintf(tmpl, 4096, "%s/sqtest-XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(tmpl))
        abort();
    return tmpl;
}

char *tu_path(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (!p)
        abort();
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

void tu_write(const char *path, const char *text)
{
    FILE *fp = fopen(path, "w");
    if (!fp)
        abort();
    fputs(text, fp);
    if (fclose(fp) != 0)
        abort();
}

char *tu_read(const char *path, size_t *len)
{
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return NULL;
    char *buf = NULL;
    size_t cap = 0, n = 0;
    for (;;) {
        if (n + 4096 + 1 > cap) {
            cap = cap ? cap * 2 : 8192;
            buf = realloc(buf, cap);
            if (!buf)
                abort();
        }
        size_t r = fread(buf + n, 1, 4096, fp);
        n += r;
        if (r == 0)
            break;
    }
    fclose(fp);
    buf[n] = '\0';
    if (len)
        *len = n;
    return buf;
}

int tu_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

int tu_count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            n++;
    closedir(d);
    return n;
}

char *tu_source_path(const char *rel)
{
    const char *root = getenv("SQ_SOURCE_ROOT");
    return tu_path(root ? root : ".", rel);
}

static char *slurp_fd(int fd)
{
    char *buf = NULL;
    size_t cap = 0, n = 0;
    for (;;) {
        if (n + 4096 + 1 > cap) {
            cap = cap ? cap * 2 : 8192;
            buf = realloc(buf, cap);
            if (!buf)
                abort();
        }
        ssize_t r = read(fd, buf + n, 4096);
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    buf[n] = '\0';
    return buf;
}

int tu_run(char *const argv[], char **out, char **err)
{
    char *dir = tu_tmpdir();
    char *po = tu_path(dir, "stdout"), *pe = tu_path(dir, "stderr");
    pid_t pid = fork();
    if (pid < 0)
        abort();
    if (pid == 0) {
        int fo = open(po, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        int fe = open(pe, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        int fi = open("/dev/null", O_RDONLY);
        if (fo < 0 || fe < 0 || fi < 0)
            _exit(127);
        dup2(fi, 0);
        dup2(fo, 1);
        dup2(fe, 2);
        execv(argv[0], argv);
        _exit(127);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0)
        ;
    int fo = open(po, O_RDONLY), fe = open(pe, O_RDONLY);
    char *o = slurp_fd(fo), *e = slurp_fd(fe);
    close(fo);
    close(fe);
    if (out)
        *out = o;
    else
        free(o);
    if (err)
        *err = e;
    else
        free(e);
    unlink(po);
    unlink(pe);
    rmdir(dir);
    free(po);
    free(pe);
    free(dir);
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    return 128 + WTERMSIG(status);
}

void tu_rmtree(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) {
        unlink(dir);
        return;
    }
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        char *p = tu_path(dir, e->d_name);
        struct stat st;
        if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode))
            tu_rmtree(p);
        else
            unlink(p);
        free(p);
    }
    closedir(d);
    rmdir(dir);
}

int tu_mkchar(const char *path, unsigned major, unsigned minor)
{
    if (mknod(path, S_IFCHR | 0666, makedev(major, minor)) != 0)
        return errno;
    return 0;
}

int tu_is_char_device(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISCHR(st.st_mode);
}

int tu_run_tty(char *const argv[], char **out, char **tty)
{
    int master = posix_openpt(O_RDWR | O_NOCTTY);
    if (master < 0 || grantpt(master) != 0 || unlockpt(master) != 0)
        abort();
    const char *slave = ptsname(master);
    if (!slave)
        abort();
    char *dir = tu_tmpdir();
    char *po = tu_path(dir, "stdout");
    pid_t pid = fork();
    if (pid < 0)
        abort();
    if (pid == 0) {
        setsid();
        int fs = open(slave, O_RDWR);
        int fo = open(po, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        int fi = open("/dev/null", O_RDONLY);
        if (fs < 0 || fo < 0 || fi < 0)
            _exit(127);
        close(master);
        dup2(fi, 0);
        dup2(fo, 1);
        dup2(fs, 2);
        execv(argv[0], argv);
        _exit(127);
    }
    /* read the terminal until the child has closed it (EIO on Linux) */
    char *buf = NULL;
    size_t cap = 0, n = 0;
    for (;;) {
        if (n + 4096 + 1 > cap) {
            cap = cap ? cap * 2 : 8192;
            buf = realloc(buf, cap);
            if (!buf)
                abort();
        }
        ssize_t r = read(master, buf + n, 4096);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    buf[n] = '\0';
    close(master);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0)
        ;
    int fo = open(po, O_RDONLY);
    char *o = slurp_fd(fo);
    close(fo);
    if (out)
        *out = o;
    else
        free(o);
    if (tty)
        *tty = buf;
    else
        free(buf);
    unlink(po);
    rmdir(dir);
    free(po);
    free(dir);
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    return 128 + WTERMSIG(status);
}
