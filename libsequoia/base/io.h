/* File input and atomic file output (docs/robustness.md).
 *
 * No tool ever leaves a half-written file behind: an output that is absent or a regular file is
 * written to a temporary file in the destination's directory, flushed, fsynced and renamed over
 * the destination. The temporary file is anonymous (O_TMPFILE) where the file system allows, so
 * that even SIGKILL leaves nothing; otherwise it is named ".NAME.tmp-XXXXXX" and unlinked on any
 * failure, and on SIGINT/SIGTERM/SIGHUP once sq_out_install_signal_handlers() has run.
 * Anything else that exists (a character or block device, a FIFO, a socket) and "-" is written
 * directly, never replaced: `-o /dev/null` keeps /dev/null a device. A write error there is
 * still SQ_EIO. */
#ifndef SQ_BASE_IO_H
#define SQ_BASE_IO_H

#include <stddef.h>
#include <stdio.h>

#include "libsequoia/base/error.h"

/* Opens an input file for reading: the one place every tool opens a named input
 * (docs/robustness.md, "Inputs that are not files"). The open never blocks: it is made with
 * O_NONBLOCK (a FIFO without a writer would otherwise wait forever in open()), then anything
 * but a regular file is refused and O_NONBLOCK is cleared. A directory is "PATH: is a
 * directory, expected WHAT" (`what`, e.g. "a file"; NULL: "PATH: not a regular file (a
 * directory)"); a FIFO, device or socket is "PATH: not a regular file (a FIFO): ..." (a pipe,
 * "/dev/stdin" or "<(cmd)", is "(a pipe)"). "-" is SQ_EUSAGE: the callers that read standard
 * input handle "-" before, so here it names an input read by seeking or mapping. On success
 * *fd is the descriptor (O_CLOEXEC) and `st` (may be NULL) the file's status.
 * Errors: SQ_EUSAGE ("-"), SQ_ENOINPUT (missing, unreadable), SQ_EDATA (not a regular file),
 * SQ_EIO. */
struct stat;
int sq_input_open(const char *path, const char *what, struct stat *st, int *fd, sq_error *err);

/* sq_input_open for readers that open by name (HDF5): the same checks, the descriptor closed. */
int sq_input_check(const char *path, const char *what, sq_error *err);

/* Reads a whole regular file into a NUL-terminated buffer (*data, to free()). Refuses
 * directories, FIFOs and devices (sq_input_open) and files larger than max_bytes. "-" reads
 * standard input (a pipe or a file) to its end, with the same limit, once per process: a
 * second "-" is SQ_EUSAGE. Errors: SQ_EUSAGE, SQ_ENOINPUT, SQ_EDATA (too large, not a regular
 * file), SQ_EIO. */
int sq_file_read(const char *path, size_t max_bytes, char **data, size_t *len, sq_error *err);

typedef struct sq_out sq_out;

/* Starts an atomic write of `path`; "-" means standard output (written directly, and
 * checked at commit), and so is a path that exists and is neither a regular file nor a
 * directory. Errors: SQ_ECANTCREAT. */
int sq_out_open(sq_out **out, const char *path, sq_error *err);

/* 1 when sq_out_open would write `path` directly ("-", a device, FIFO or socket). */
int sq_out_is_direct(const char *path);

/* The stream to write to. */
FILE *sq_out_stream(sq_out *out);

/* The destination as given to sq_out_open ("-" for standard output). */
const char *sq_out_path(const sq_out *out);

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

/* SIGINT, SIGTERM and SIGHUP unlink every named temporary file still open, then the process
 * dies of the signal as it would have; SIGXFSZ is ignored, so that a write past `ulimit -f`
 * fails with EFBIG (SQ_EIO, temporary removed), and so is SIGPIPE, so that a pipe or FIFO
 * whose reader exited fails with EPIPE ("F: write error: Broken pipe", SQ_EIO) instead of
 * killing the tool. Call once at the start of main(). */
void sq_out_install_signal_handlers(void);

/* Temporary files created by other libraries (HDF5 needs a file name, not a stream).
 * sq_temp_create makes an empty file beside `path` and puts a name for it in *tmp (malloc'd):
 * an anonymous file's /proc/self/fd/N where O_TMPFILE works, else "dir/.name.tmp-XXXXXX"
 * (mode 0600), registered so that a signal unlinks it. *slot is opaque. sq_temp_commit gives it the mode a
 * plain fopen() would have, fsyncs it and renames it over `path` (unlinking it on failure);
 * sq_temp_discard unlinks it. Both unregister it; neither frees tmp.
 * Errors: SQ_ECANTCREAT, SQ_EIO. */
int sq_temp_create(const char *path, char **tmp, int *slot, sq_error *err);
int sq_temp_commit(const char *tmp, int slot, const char *path, sq_error *err);
void sq_temp_discard(const char *tmp, int slot);
/* 1 when the temporary file of `slot` is anonymous (named by its /proc/self/fd link). */
int sq_temp_is_anonymous(int slot);

/* A symlink at `path` whose target is missing or that loops: SQ_ENOINPUT, "PATH: dangling
 * symlink (-> TARGET: ...)" or "PATH: symlink loop (...)". SQ_OK for anything else (absent,
 * a good link, a plain file), so that callers can tell "no file" from "a broken one". */
int sq_path_broken_link(const char *path, sq_error *err);

/* Outputs that would destroy something. Each use is an option name ("-o", "--table", "the
 * corpus argument") and a path (NULL or "-" entries are skipped). Refuses an output that is
 * the same file as an input (device and inode, symlinks followed), and two outputs that would
 * be the same file (an absent one compares by directory and name). Devices and FIFOs may be
 * named several times. Called before any work. Errors: SQ_EUSAGE naming both options. */
typedef struct sq_path_use {
    const char *option;
    const char *path;
} sq_path_use;
int sq_paths_check(const sq_path_use *inputs, int n_in, const sq_path_use *outputs, int n_out,
                   sq_error *err);

/* Inputs that are pooled (a merge): two that are the same regular file (device and inode,
 * symlinks followed) would count it twice. Errors: SQ_EUSAGE "A and B: name the same file; it
 * would count twice". Entries that do not exist or are not regular files are skipped (reading
 * them reports the problem). */
int sq_paths_distinct(const sq_path_use *inputs, int n, sq_error *err);

#endif
