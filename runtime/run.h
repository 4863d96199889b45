/* The run of sequoia-run (docs/runtime.md, "sequoia-run" and "Batches"): B prompts decoded
 * together with one plan by tree speculative decoding (runtime/specdec.h), timed against the
 * same prompts decoded by the target alone, optionally validated (runtime/validate.h), written
 * as token ids, as text (issue 25) and as a report (runtime/report.h, sequoia-run-report v2). A single run is a
 * batch of one: one setup, one decoding, one set of checks, one report and one summary serve
 * every B. */
#ifndef SQ_RUNTIME_RUN_H
#define SQ_RUNTIME_RUN_H

#include "libsequoia/base/error.h"
#include "runtime/specdec.h"

typedef struct sq_run_opts {
    const char       *prog;          /* prefix of the messages on stderr                      */
    const char       *draft_dir, *target_dir, *plan_file, *prompt_file;
    /* instead of prompt_file: UTF-8 text made into ids with the target's tokenizer, the whole
     * file one prompt; with batch, one prompt per document (runtime/tokens.h) */
    const char       *prompt_text_file;
    const char       *out_file;      /* one line of token ids per sequence; NULL or "-": stdout */
    /* the generated text (the target's tokenizer, special tokens skipped), written atomically
     * with the other outputs; a single run: the text as it is; batch: JSON Lines, one
     * {"sequence": k, "text": ...} per sequence in order; NULL: none */
    const char       *text_file;
    /* 0: when the target's directory has a tokenizer with end-of-sequence ids, a sequence stops
     * at the first it generates (Hugging Face's generation); 1: always max_new tokens */
    int               ignore_eos;
    const char       *report_file;   /* JSON report, or NULL                                  */
    /* 0: one sequence, every token of the prompt file; B >= 1 (--batch B): B sequences,
     * sequence k reading the file's sequence k mod S (empty lines or HDF5 /seq_offsets
     * separate them), the summary in tokens/s over the batch */
    int               batch;
    int               max_new;       /* new tokens per sequence                               */
    int               baseline;      /* also decode with the target alone (the speedup)       */
    int               validate;
    int               samples;       /* --validate-samples: seeds (draws) of the distribution test */
    int               quiet;         /* no progress line                                      */
    sq_specdec_params prm;           /* mode, sampling, seed, context, backend, threads, ...  */
    /* instead of plan_file: an engine's dynamic tree (runtime/dyntree.h; docs/runtime.md,
     * "Dynamic trees (SGLang, TensorRT-LLM)"): engine "sglang" or "trtllm-dynamic" and the
     * envelope L,K,N (env_steps, env_topk, env_nodes); NULL: the plan's static tree */
    const char       *engine;
    int               env_steps, env_topk, env_nodes;
} sq_run_opts;

/* SQ_EUSAGE with the message when the options cannot run together: --validate in greedy mode
 * compares with the target-only decoding, so it needs the baseline (the sampled modes' test
 * does not use it, with or without a batch); an engine's dynamic tree needs a known engine, an
 * envelope within its rules (sq_dyntree_check) and a mode other than specinfer. */
int sq_run_check(const sq_run_opts *o, sq_error *err);

/* Runs it: opens every output first (an unwritable path fails before any work), loads the
 * plan, the models and the prompts, decodes, writes the token ids and the report (both
 * written before either is renamed into place), prints the summary on stderr. Returns the
 * exit status, the message printed: SQ_EFAIL (1) when a --validate check failed.
 *
 * validate: the tree attention of sequence 0's decoder (sq_validate_attention, alone); greedy:
 * every sequence's output equals the target's greedy decoding, and with B > 1 also the
 * sequence's own run alone (the single-sequence decoder), token for token; sampled modes: the
 * chi-square test of the first two tokens (B > 1: drawn inside the batch,
 * sq_validate_distribution_batch). */
int sq_run(const sq_run_opts *o);

#endif
