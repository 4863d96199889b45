/* File input and atomic file output.
 *
 * No tool ever leaves a half-written file behind (DESIGN.md §8): every output is written to a
 * temporary file in the destination's directory, flushed, fsynced and renamed over the
 * destination. On any failure, and on SIGINT/SIGTERM once sq_out_install_signal_handlers() has
 * run, the temporary file is unlinked and the old destination stays as it was. */
#ifndef SQ_BASE_IO_H
#define SQ_BASE_IO_H

#include <stddef.h>
#include <stdio.h>

#include "libsequoia/base/error.h"

/* Reads a whole regular file into a NUL-terminated buffer (*data, to free()). Refuses
 * directories and files larger than max_bytes. Errors: SQ_ENOINPUT, SQ_EDATA (too large, not a
 * regular file), SQ_EIO. */
int sq_file_read(const char *path, size_t max_bytes, char **data, size_t *len, sq_error *err);

typedef struct sq_out sq_out;

/* Starts an atomic write of `path`; "-" means standard output (written directly, and
 * checked at commit). Errors: SQ_ECANTCREAT. */
int sq_out_open(sq_out **out, const char *path, sq_error *err);

/* The stream to write to. */
FILE *sq_out_stream(sq_out *out);

/* Flushes, fsyncs and renames the temporary file over the destination, then frees `out`.
 * On failure the temporary file is removed. Errors: SQ_EIO, SQ_ECANTCREAT. */
int sq_out_commit(sq_out *out, sq_error *err);

/* The first half of a commit: flushes, fsyncs and closes the temporary file, without the
 * rename. A tool with several outputs prepares them all before committing any, so that a write
 * error (a full disk) on one leaves every destination as it was. On failure, abort `out`.
 * Errors: SQ_EIO. */
int sq_out_prepare(sq_out *out, sq_error *err);

/* Drops the temporary file and frees `out`. NULL is allowed. */
void sq_out_abort(sq_out *out);

/* Convenience: writes `len` bytes atomically. */
int sq_file_write_atomic(const char *path, const char *data, size_t len, sq_error *err);

/* SIGINT and SIGTERM unlink every temporary file still open, then the process dies of the
 * signal as it would have. Call once at the start of main(). */
void sq_out_install_signal_handlers(void);

/* Temporary files created by other libraries (HDF5 needs a file name, not a stream).
 * sq_temp_create makes an empty file "dir/.name.tmp-XXXXXX" beside `path` (mode 0600) and
 * registers it, so that a signal unlinks it; *tmp is malloc'd. sq_temp_commit gives it the mode a
 * plain fopen() would have, fsyncs it and renames it over `path` (unlinking it on failure);
 * sq_temp_discard unlinks it. Both unregister it; neither frees tmp.
 * Errors: SQ_ECANTCREAT, SQ_EIO. */
int sq_temp_create(const char *path, char **tmp, int *slot, sq_error *err);
int sq_temp_commit(const char *tmp, int slot, const char *path, sq_error *err);
void sq_temp_discard(const char *tmp, int slot);

#endif
