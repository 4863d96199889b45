/* Small helpers shared by the criterion suites: scratch directories, files, running a tool and
 * capturing what it printed. */
#ifndef SQ_TESTS_TESTUTIL_H
#define SQ_TESTS_TESTUTIL_H

#include <stddef.h>

/* A fresh directory under $TMPDIR (or /tmp); the path is static storage per call site use. */
char *tu_tmpdir(void);

/* "dir/name", malloc'd. */
char *tu_path(const char *dir, const char *name);

/* Writes text to a file (aborts on failure). */
void tu_write(const char *path, const char *text);

/* Reads a whole file, or NULL when it does not exist. */
char *tu_read(const char *path, size_t *len);

int tu_exists(const char *path);

/* Number of entries in a directory, "." and ".." excluded. */
int tu_count_entries(const char *dir);

/* $SQ_SOURCE_ROOT/rel, malloc'd. */
char *tu_source_path(const char *rel);

/* Runs `argv` (argv[0] is a path) with stdout and stderr captured; returns the exit status
 * (128 + signal when killed). *out and *err are malloc'd strings (may be NULL args). */
int tu_run(char *const argv[], char **out, char **err);

/* tu_run with standard error on a pseudo-terminal (so that isatty(2) is true), standard output
 * to a file: *out and *tty (what the terminal showed, carriage returns kept) are malloc'd. */
int tu_run_tty(char *const argv[], char **out, char **tty);

/* A private character device node at `path` (mknod in a scratch folder; tests never write to
 * a real /dev path): (1, 3) reads and writes like /dev/null, (1, 7) like /dev/full. Returns 0,
 * or errno when mknod is not allowed (the caller skips with a message). */
int tu_mkchar(const char *path, unsigned major, unsigned minor);

/* 1 when path is (still) a character device. */
int tu_is_char_device(const char *path);

/* Removes a directory tree. */
void tu_rmtree(const char *dir);

#endif
