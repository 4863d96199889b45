/* Fuzz harness: a Hugging Face config.json (runtime/config.h).
 * Oracle: a config that parses has consistent sizes (n_heads * head_dim within the caps: an
 * explicit head_dim may differ from dim / n_heads, issue 24; n_heads a multiple of n_kv_heads,
 * even head_dim, within the documented caps) and round-trips through sq_model_config_to_json
 * to the same config, family features included. */
#include <stdlib.h>
#include <string.h>

#include "libsequoia/base/json.h"
#include "runtime/config.h"
#include "tests/fuzz/fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fz_strndup(data, size);
    cJSON *root = NULL;
    sq_error err = {0};
    if (sq_json_parse("config.json", text, size, &root, &err) == SQ_OK) {
        sq_model_config cfg;
        memset(&cfg, 0, sizeof cfg);
        sq_error e2 = {0};
        if (sq_model_config_parse("config.json", root, &cfg, &e2) == SQ_OK) {
            if (cfg.dim < 1 || cfg.dim > SQ_MODEL_MAX_DIM || cfg.n_heads < 1 ||
                cfg.n_kv_heads < 1 || cfg.n_heads % cfg.n_kv_heads != 0 ||
                cfg.head_dim < 2 || (long long)cfg.head_dim * cfg.n_heads > SQ_MODEL_MAX_DIM ||
                cfg.head_dim % 2 != 0 ||
                cfg.n_layers < 1 || cfg.n_layers > SQ_MODEL_MAX_LAYERS || cfg.vocab_size < 1 ||
                cfg.vocab_size > SQ_MODEL_MAX_VOCAB || cfg.hidden_dim < 1 ||
                cfg.hidden_dim > SQ_MODEL_MAX_HIDDEN)
                abort();
            cJSON *out = sq_model_config_to_json(&cfg);
            if (!out)
                abort();
            sq_model_config cfg2;
            memset(&cfg2, 0, sizeof cfg2);
            sq_error e3 = {0};
            if (sq_model_config_parse("round.json", out, &cfg2, &e3) != SQ_OK)
                abort();
            if (cfg2.dim != cfg.dim || cfg2.hidden_dim != cfg.hidden_dim ||
                cfg2.n_layers != cfg.n_layers || cfg2.n_heads != cfg.n_heads ||
                cfg2.n_kv_heads != cfg.n_kv_heads || cfg2.vocab_size != cfg.vocab_size ||
                cfg2.tied_embeddings != cfg.tied_embeddings || cfg2.head_dim != cfg.head_dim ||
                cfg2.arch != cfg.arch || memcmp(&cfg2.rope, &cfg.rope, sizeof cfg.rope) != 0 ||
                cfg2.sliding_window != cfg.sliding_window ||
                memcmp(cfg2.layer_sliding, cfg.layer_sliding, sizeof cfg.layer_sliding) != 0 ||
                cfg2.attn_bias != cfg.attn_bias || cfg2.qk_norm != cfg.qk_norm ||
                cfg2.attn_softcap != cfg.attn_softcap || cfg2.final_softcap != cfg.final_softcap)
                abort();
            cJSON_Delete(out);
        } else if (!e2.msg[0]) {
            abort();
        }
        cJSON_Delete(root);
    } else if (!err.msg[0]) {
        abort();
    }
    free(text);
    return 0;
}
