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
    /* which of prm's mode, temperature and top_p the caller gave (sequoia-run: on the command
     * line); a dynamic plan's own settle the others (sq_run_resolve_plan) */
    int               mode_given, temperature_given, top_p_given;
} sq_run_opts;

/* --plan of a dynamic plan (a sequoia-dynamic-plan, libsequoia/format/dynplan.h) settles the
 * run: its engine, envelope, mode, temperature and top_p are the run's. One the caller also
 * gave (engine non-NULL, env_steps > 0, mode_given, temperature_given, top_p_given) must equal
 * the plan's, else SQ_EUSAGE naming the file and both values (top_p is not compared for a greedy
 * plan, which ignores it); the plan's are then written into *o, marked given, so that a second
 * call changes nothing. A static plan with engine or an envelope is SQ_EUSAGE; a file that
 * cannot be read, or that is not a dynamic plan, is left to the run's loader (SQ_OK). A dynamic
 * plan that fails its reader's checks is that error (SQ_EDATA naming the file and the field).
 * sq_run calls it on its own copy of the options; sequoia-run calls it first, so that its
 * checks of mode and temperature see the plan's. */
int sq_run_resolve_plan(sq_run_opts *o, sq_error *err);

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
