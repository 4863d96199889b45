/* Scratch files for the fuzz harnesses: see fuzz_util.h. */
#include "tests/fuzz/fuzz_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char scratch_dir[4096];

static void scratch_cleanup(void)
{
    if (!scratch_dir[0])
        return;
    DIR *d = opendir(scratch_dir);
    if (d) {
        struct dirent *e;
        char p[8192];
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
                continue;
            snprintf(p, sizeof p, "%s/%s", scratch_dir, e->d_name);
            unlink(p);
        }
        closedir(d);
    }
    rmdir(scratch_dir);
}

const char *fz_scratch_dir(void)
{
    if (scratch_dir[0])
        return scratch_dir;
    const char *base = getenv("TMPDIR");
    if (!base || !*base)
        base = "/tmp";
    snprintf(scratch_dir, sizeof scratch_dir, "%s/sq-fuzz-XXXXXX", base);
    if (!mkdtemp(scratch_dir)) {
        perror("fuzz: mkdtemp");
        abort();
    }
    atexit(scratch_cleanup);
    return scratch_dir;
}

const char *fz_scratch_file(const char *name, const uint8_t *data, size_t size)
{
    static char path[8192];
    snprintf(path, sizeof path, "%s/%s", fz_scratch_dir(), name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) {
        perror("fuzz: open scratch file");
        abort();
    }
    size_t done = 0;
    while (done < size) {
        ssize_t w = write(fd, data + done, size - done);
        if (w <= 0) {
            perror("fuzz: write scratch file");
            abort();
        }
        done += (size_t)w;
    }
    close(fd);
    return path;
}

char *fz_strndup(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s)
        abort();
    if (size)
        memcpy(s, data, size);
    s[size] = '\0';
    return s;
}
