/* sequoia-run --batch B: B prompts decoded together with one plan (runtime/specdec.h's
 * sq_specdec_batch), timed against plain decoding of the same batch with the target alone. */
#ifndef SQ_RUNTIME_BATCHRUN_H
#define SQ_RUNTIME_BATCHRUN_H

#include "libsequoia/base/error.h"
#include "runtime/specdec.h"

typedef struct sq_batch_run_opts {
    const char       *prog;
    const char       *draft_dir, *target_dir, *plan_file, *prompt_file;
    const char       *out_file;      /* one line of token ids per sequence ("-": stdout)     */
    const char       *report_file;   /* JSON report, or NULL                                 */
    int               batch, max_new, baseline, validate;
    sq_specdec_params prm;
    int               samples;       /* --validate-samples: draws of the distribution test   */
    int               quiet;
} sq_batch_run_opts;

/* The prompt file's sequences (an empty line, or HDF5 /seq_offsets, separates them) are the
 * prompts: sequence k of the batch reads prompt k mod S. Writes the outputs, prints the summary
 * on stderr; returns the exit status (the message printed).
 *
 * validate: the tree attention of sequence 0's decoder (sq_validate_attention, alone); greedy:
 * every sequence's output equals the target's greedy decoding and the sequence's own run
 * alone (the single-sequence decoder), token for token; sampled modes: the chi-square test of
 * the first two tokens drawn inside the batch (sq_validate_distribution_batch). */
int sq_batch_run(const sq_batch_run_opts *o);

#endif
