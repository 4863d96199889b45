/* A plain driver for the fuzz harnesses, for builds without libFuzzer (gcc, CI): every argument
 * is a file or a directory (read recursively, entries in name order); each file's bytes go
 * through LLVMFuzzerTestOneInput once. A crash, a sanitizer report or a hang is the failure;
 * the harnesses themselves never fail on bad input. Exit 0 when at least one file ran. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tests/fuzz/fuzz_util.h"

static long n_run;

static int run_file(const char *path)
{
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        fprintf(stderr, "replay: %s: cannot open\n", path);
        return -1;
    }
    size_t cap = 4096, len = 0;
    unsigned char *buf = malloc(cap);
    if (!buf)
        abort();
    size_t got;
    while ((got = fread(buf + len, 1, cap - len, fp)) > 0) {
        len += got;
        if (len == cap) {
            cap *= 2;
            buf = realloc(buf, cap);
            if (!buf)
                abort();
        }
    }
    int bad = ferror(fp);
    fclose(fp);
    if (bad) {
        free(buf);
        fprintf(stderr, "replay: %s: read error\n", path);
        return -1;
    }
    /* Exactly `len` bytes, as libFuzzer hands them over (an ASan build sees overreads). */
    unsigned char *exact = malloc(len ? len : 1);
    if (!exact)
        abort();
    if (len)
        memcpy(exact, buf, len);
    free(buf);
    printf("replay: %s (%zu bytes)\n", path, len);
    fflush(stdout);
    LLVMFuzzerTestOneInput(exact, len);
    free(exact);
    n_run++;
    return 0;
}

static int by_name(const struct dirent **a, const struct dirent **b)
{
    return strcmp((*a)->d_name, (*b)->d_name);
}

static int run_path(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        fprintf(stderr, "replay: %s: does not exist\n", path);
        return -1;
    }
    if (!S_ISDIR(st.st_mode))
        return run_file(path);
    struct dirent **names;
    int n = scandir(path, &names, NULL, by_name);
    if (n < 0) {
        fprintf(stderr, "replay: %s: cannot list\n", path);
        return -1;
    }
    int rc = 0;
    for (int i = 0; i < n; i++) {
        const char *nm = names[i]->d_name;
        if (nm[0] != '.') {
            size_t l = strlen(path) + strlen(nm) + 2;
            char *child = malloc(l);
            if (!child)
                abort();
            snprintf(child, l, "%s/%s", path, nm);
            if (run_path(child))
                rc = -1;
            free(child);
        }
        free(names[i]);
    }
    free(names);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s FILE|DIR...\n", argv[0]);
        return 64;
    }
    int rc = 0;
    for (int i = 1; i < argc; i++)
        if (run_path(argv[i]))
            rc = 1;
    printf("replay: %ld inputs\n", n_run);
    if (n_run == 0)
        rc = 1;
    return rc;
}
