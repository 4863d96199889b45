/* Helpers shared by the libFuzzer harnesses of tests/fuzz/ (issue 9).
 *
 * Each harness defines LLVMFuzzerTestOneInput. Built with clang and -Dfuzz=true they link
 * libFuzzer; otherwise replay_main.c drives them over the committed corpora (suite 'fuzz-replay').
 * Readers that want a file name (mmap, HDF5, CSV) get the input through a scratch file in a
 * per-process directory. */
#ifndef SQ_TESTS_FUZZ_UTIL_H
#define SQ_TESTS_FUZZ_UTIL_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A per-process scratch file "DIR/name" (DIR: $TMPDIR or /tmp, made once and removed at exit)
 * holding exactly `size` bytes of `data`. Returns a static path; aborts on I/O failure (the
 * harness cannot go on, and that is not a finding about the code under test). */
const char *fz_scratch_file(const char *name, const uint8_t *data, size_t size);

/* The scratch directory itself (created on first use). */
const char *fz_scratch_dir(void);

/* A NUL-terminated copy of the input (malloc'd; aborts when out of memory). */
char *fz_strndup(const uint8_t *data, size_t size);

#endif
