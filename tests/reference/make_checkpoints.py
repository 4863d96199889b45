#!/usr/bin/env python3
"""Tiny random Hugging Face checkpoints of every family and variant of issue 24.

    python3 tests/reference/make_checkpoints.py OUTDIR [--only NAME ...] [--list]

writes OUTDIR/<variant>-<dtype>/{config.json, model.safetensors} for every variant below and
dtype in (f32, bf16), plus OUTDIR/<variant>.tokens (the token ids the reference logits are
computed over, whitespace-separated text as runtime/tokens.h reads it).

Pure Python 3 (no numpy, no torch): the values come from splitmix64, seeded per tensor from the
variant's seed and the tensor's name, so the files are byte-identical on every machine and every
Python; tests/data/families/manifest.json records each file's SHA-256 and check_logits.py
--verify-checkpoints compares them. The BF16 checkpoint holds the F32 values rounded to nearest
even; both reference implementations read the stored values back from model.safetensors.

config.json is written as transformers' save_pretrained writes it for the architecture (sorted
keys, two-space indent, the fields the family uses; "transformers_version" of the release whose
config form is imitated). docs: tests/reference/README.md.
"""
import argparse
import hashlib
import json
import math
import os
import struct
import sys
from array import array

MASK64 = (1 << 64) - 1

# ---------------------------------------------------------------------------------------------
# deterministic values


def _fnv1a64(s):
    h = 0xcbf29ce484222325
    for b in s.encode("utf-8"):
        h ^= b
        h = (h * 0x100000001b3) & MASK64
    return h


def uniform(seed, name, n):
    """n values uniform in [-1, 1) from splitmix64 seeded by (seed, name)."""
    x = (seed * 0x9E3779B97F4A7C15 ^ _fnv1a64(name)) & MASK64
    out = [0.0] * n
    inv = 1.0 / (1 << 53)
    for i in range(n):
        x = (x + 0x9E3779B97F4A7C15) & MASK64
        z = x
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        z ^= z >> 31
        out[i] = (z >> 11) * inv * 2.0 - 1.0
    return out


# ---------------------------------------------------------------------------------------------
# safetensors


def _f32_bytes(vals):
    a = array("f", vals)
    if sys.byteorder != "little":
        a.byteswap()
    return a.tobytes()


def _bf16_bytes(vals):
    a = array("f", vals)
    bits = array("I")
    bits.frombytes(a.tobytes())
    out = array("H", [0] * len(bits))
    for i, b in enumerate(bits):
        # round to nearest even (the values are finite)
        out[i] = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) & 0xFFFF
    if sys.byteorder != "little":
        out.byteswap()
    return out.tobytes()


def write_safetensors(path, tensors, dtype):
    """tensors: list of (name, shape, values as Python floats); dtype 'F32' or 'BF16'.
    Format: u64 LE header length N, N bytes of JSON (padded with spaces to a multiple of 8),
    then the raw little-endian data, each tensor at its data_offsets."""
    header = {"__metadata__": {"format": "pt"}}
    blobs = []
    off = 0
    for name, shape, vals in sorted(tensors, key=lambda t: t[0]):
        raw = _f32_bytes(vals) if dtype == "F32" else _bf16_bytes(vals)
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


# ---------------------------------------------------------------------------------------------
# the variants

VOCAB = 256
HIDDEN = 64
INTER = 128
HEADS = 4
KV_HEADS = 2
N_TOKENS = 24          # longer than every sliding window below (8)
WINDOW = 8


def _llama_cfg(**kw):
    c = {
        "architectures": ["LlamaForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "head_dim": HIDDEN // HEADS,
        "hidden_act": "silu",
        "hidden_size": HIDDEN,
        "initializer_range": 0.02,
        "intermediate_size": INTER,
        "max_position_embeddings": 128,
        "mlp_bias": False,
        "model_type": "llama",
        "num_attention_heads": HEADS,
        "num_hidden_layers": 3,
        "num_key_value_heads": KV_HEADS,
        "pretraining_tp": 1,
        "rms_norm_eps": 1e-05,
        "rope_scaling": None,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "transformers_version": "4.56.1",
        "use_cache": True,
        "vocab_size": VOCAB,
    }
    c.update(kw)
    return c


def _v5(c):
    """transformers 5's form: rope_parameters (with rope_theta inside) instead of rope_scaling +
    rope_theta, "dtype" instead of "torch_dtype"."""
    c = dict(c)
    rp = dict(c.pop("rope_scaling") or {"rope_type": "default"})
    rp["rope_theta"] = c.pop("rope_theta")
    c["rope_parameters"] = rp
    c["dtype"] = c.pop("torch_dtype")
    c["transformers_version"] = "5.0.0"
    return c


def _mistral_cfg(**kw):
    c = {
        "architectures": ["MistralForCausalLM"],
        "attention_dropout": 0.0,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "head_dim": 32,
        "hidden_act": "silu",
        "hidden_size": HIDDEN,
        "initializer_range": 0.02,
        "intermediate_size": INTER,
        "max_position_embeddings": 128,
        "model_type": "mistral",
        "num_attention_heads": HEADS,
        "num_hidden_layers": 3,
        "num_key_value_heads": KV_HEADS,
        "rms_norm_eps": 1e-05,
        "rope_theta": 1000000.0,
        "sliding_window": None,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "transformers_version": "4.56.1",
        "use_cache": True,
        "vocab_size": VOCAB,
    }
    c.update(kw)
    return c


def _qwen2_cfg(**kw):
    c = {
        "architectures": ["Qwen2ForCausalLM"],
        "attention_dropout": 0.0,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "hidden_act": "silu",
        "hidden_size": HIDDEN,
        "initializer_range": 0.02,
        "intermediate_size": INTER,
        "max_position_embeddings": 128,
        "max_window_layers": 3,
        "model_type": "qwen2",
        "num_attention_heads": HEADS,
        "num_hidden_layers": 3,
        "num_key_value_heads": KV_HEADS,
        "rms_norm_eps": 1e-06,
        "rope_scaling": None,
        "rope_theta": 1000000.0,
        "sliding_window": 128,
        "tie_word_embeddings": True,
        "torch_dtype": "float32",
        "transformers_version": "4.56.1",
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": VOCAB,
    }
    c.update(kw)
    return c


def _qwen3_cfg(**kw):
    c = {
        "architectures": ["Qwen3ForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "head_dim": 32,
        "hidden_act": "silu",
        "hidden_size": HIDDEN,
        "initializer_range": 0.02,
        "intermediate_size": INTER,
        "max_position_embeddings": 128,
        "max_window_layers": 3,
        "model_type": "qwen3",
        "num_attention_heads": HEADS,
        "num_hidden_layers": 3,
        "num_key_value_heads": KV_HEADS,
        "rms_norm_eps": 1e-06,
        "rope_scaling": None,
        "rope_theta": 1000000.0,
        "sliding_window": None,
        "tie_word_embeddings": True,
        "torch_dtype": "float32",
        "transformers_version": "4.56.1",
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": VOCAB,
    }
    c.update(kw)
    return c


def _gemma2_cfg(**kw):
    c = {
        "architectures": ["Gemma2ForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "attn_logit_softcapping": 3.0,
        "bos_token_id": 2,
        "cache_implementation": "hybrid",
        "eos_token_id": 1,
        "final_logit_softcapping": 3.0,
        "head_dim": 16,
        "hidden_act": "gelu_pytorch_tanh",
        "hidden_activation": "gelu_pytorch_tanh",
        "hidden_size": HIDDEN,
        "initializer_range": 0.02,
        "intermediate_size": INTER,
        "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
        "max_position_embeddings": 128,
        "model_type": "gemma2",
        "num_attention_heads": HEADS,
        "num_hidden_layers": 4,
        "num_key_value_heads": KV_HEADS,
        "pad_token_id": 0,
        "query_pre_attn_scalar": 16,
        "rms_norm_eps": 1e-06,
        "rope_theta": 10000.0,
        "sliding_window": WINDOW,
        "torch_dtype": "float32",
        "transformers_version": "4.56.1",
        "use_cache": True,
        "vocab_size": VOCAB,
    }
    c.update(kw)
    return c


def _gemma3_layer_types(n, pattern=6):
    return ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(n)]


def _gemma3_cfg(**kw):
    c = {
        "architectures": ["Gemma3ForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "attn_logit_softcapping": None,
        "bos_token_id": 2,
        "cache_implementation": "hybrid",
        "eos_token_id": 1,
        "final_logit_softcapping": None,
        "head_dim": 32,
        "hidden_activation": "gelu_pytorch_tanh",
        "hidden_size": HIDDEN,
        "initializer_range": 0.02,
        "intermediate_size": INTER,
        "layer_types": _gemma3_layer_types(7),
        "max_position_embeddings": 128,
        "model_type": "gemma3_text",
        "num_attention_heads": HEADS,
        "num_hidden_layers": 7,
        "num_key_value_heads": KV_HEADS,
        "pad_token_id": 0,
        "query_pre_attn_scalar": 32,
        "rms_norm_eps": 1e-06,
        "rope_local_base_freq": 10000.0,
        "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
        "rope_theta": 1000000.0,
        "sliding_window": WINDOW,
        "sliding_window_pattern": 6,
        "torch_dtype": "float32",
        "transformers_version": "4.56.1",
        "use_cache": True,
        "vocab_size": VOCAB,
    }
    c.update(kw)
    return c


def _variants():
    v = []

    def add(name, cfg, seed, note, llama_cpp=True, why_not=None, witness=None):
        v.append({"name": name, "config": cfg, "seed": seed, "note": note,
                  "llama_cpp": llama_cpp, "why_not": why_not, "witness": witness})

    add("llama-default", _llama_cfg(), 101, "Llama, rope_scaling null (transformers 4.x form)")
    add("llama-llama3", _llama_cfg(rope_theta=500000.0, rope_scaling={
        "factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
        "original_max_position_embeddings": 64, "rope_type": "llama3"}), 102,
        "Llama-3.1 rope scaling; original 64: every frequency is scaled or smoothed")
    add("llama-linear", _llama_cfg(rope_scaling={"factor": 2.0, "rope_type": "linear"}), 103,
        "linear (position interpolation) factor 2")
    add("llama-dynamic", _llama_cfg(rope_scaling={"factor": 2.0, "rope_type": "dynamic"}), 104,
        "dynamic NTK, factor 2: identical to default up to max_position_embeddings (128 > 24)")
    add("llama-yarn", _llama_cfg(rope_scaling={
        "beta_fast": 32.0, "beta_slow": 1.0, "factor": 4.0,
        "original_max_position_embeddings": 32, "rope_type": "yarn"}), 105,
        "YaRN factor 4 over 32 positions: ramp between the corrections dims, attention factor "
        "0.1 ln 4 + 1")
    add("llama-yarn-v5", _v5(_llama_cfg(rope_scaling={
        "beta_fast": 32.0, "beta_slow": 1.0, "factor": 3.0,
        "original_max_position_embeddings": 32, "rope_type": "yarn"},
        max_position_embeddings=96)), 106,
        "YaRN in transformers 5's rope_parameters form (rope_theta inside), factor 3")
    add("llama-yarn-params", _llama_cfg(rope_scaling={
        "attention_factor": 1.25, "beta_fast": 16.0, "beta_slow": 2.0, "factor": 3.0,
        "original_max_position_embeddings": 32, "rope_type": "yarn"},
        max_position_embeddings=96), 109,
        "YaRN with beta_fast 16, beta_slow 2 and an explicit attention_factor 1.25",
        llama_cpp=False,
        why_not="llama.cpp's LLAMA architecture reads neither yarn_beta_fast/slow nor "
        "yarn_attn_factor from the GGUF (it uses 32/1 and 0.1 ln(factor) + 1; measured: with "
        "those values the numpy forward matches llama.cpp to 2e-6)",
        witness={"args": ["--yarn-beta-fast=16", "--yarn-beta-slow=2"],
                 "numpy_rope_drop": ["attention_factor"],
                 "how": "llama.cpp given beta 16/2 through llama_context_params vs the numpy "
                 "forward without the explicit attention_factor (llama.cpp's 0.1 ln 3 + 1)"})
    add("llama-bias-hd-tied", _llama_cfg(attention_bias=True, mlp_bias=True, head_dim=32,
                                         tie_word_embeddings=True), 107,
        "attention_bias + mlp_bias, head_dim 32 (heads*head_dim 128 != hidden 64), tied")
    add("llama-v5-llama3", _v5(_llama_cfg(rope_theta=500000.0, rope_scaling={
        "factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
        "original_max_position_embeddings": 128, "rope_type": "llama3"},
        tie_word_embeddings=True, head_dim=16)), 108,
        "Llama-3.2 form in transformers 5: rope_parameters with rope_theta inside, tied")
    add("mistral", _mistral_cfg(), 201,
        "Mistral-7B-v0.3 form: head_dim 32 explicit (128 != 64), sliding_window null")
    add("mistral-swa", _mistral_cfg(sliding_window=WINDOW), 202,
        "Mistral-7B-v0.1 form: sliding_window 8 on every layer", llama_cpp=False,
        why_not="llama.cpp's LLAMA architecture (used for MistralForCausalLM) has no sliding window")
    add("qwen2", _qwen2_cfg(), 301,
        "Qwen2.5 form: q/k/v biases, use_sliding_window false, tied")
    add("qwen2-swa", _qwen2_cfg(use_sliding_window=True, sliding_window=WINDOW,
                                max_window_layers=1, tie_word_embeddings=False), 302,
        "use_sliding_window true, max_window_layers 1: layers 1 and 2 slide (window 8)",
        llama_cpp=False,
        why_not="llama.cpp's QWEN2 architecture ignores use_sliding_window/max_window_layers")
    add("qwen3", _qwen3_cfg(), 401, "Qwen3: q_norm/k_norm, head_dim 32 (128 != 64), tied")
    add("qwen3-untied", _qwen3_cfg(tie_word_embeddings=False, num_key_value_heads=1,
                                   head_dim=16, rope_theta=10000.0), 402,
        "Qwen3-8B form: untied, one KV head, head_dim 16")
    add("gemma2", _gemma2_cfg(), 501,
        "Gemma-2: soft caps (3, 3), query_pre_attn_scalar = head_dim, sliding/full alternating")
    add("gemma2-qpas", _gemma2_cfg(query_pre_attn_scalar=24), 502,
        "Gemma-2 with query_pre_attn_scalar 24 != head_dim 16", llama_cpp=False,
        why_not="llama.cpp takes Gemma-2's attention scale from the layer count (46 layers: "
        "hidden/heads, else 1/sqrt(head_dim)), never from query_pre_attn_scalar")
    add("gemma3", _gemma3_cfg(), 601,
        "Gemma-3 text (4B form): q/k norms, 7 layers of pattern 6, local base 10000 on sliding "
        "layers, linear factor 8 on global layers only")
    add("gemma3-1b", _gemma3_cfg(rope_scaling=None, num_key_value_heads=1, head_dim=16,
                                 query_pre_attn_scalar=16, final_logit_softcapping=None), 602,
        "Gemma-3-1B form: no scaling, one KV head")
    add("gemma3-layer-types", _gemma3_cfg(num_hidden_layers=4, layer_types=[
        "full_attention", "sliding_attention", "full_attention", "sliding_attention"],
        query_pre_attn_scalar=20), 603,
        "explicit layer_types not of the pattern, query_pre_attn_scalar 20 != head_dim 32",
        llama_cpp=False,
        why_not="llama.cpp's converter writes no per-layer pattern for Gemma-3 (llama.cpp uses "
        "period 6) and its Gemma-3 attention scale ignores query_pre_attn_scalar")
    # the language model inside a multimodal checkpoint: same weights (seed) as "gemma3", so the
    # same logits; tensors under language_model.model.* as the Gemma-3 4B/12B/27B hub files
    cg = {
        "architectures": ["Gemma3ForConditionalGeneration"],
        "boi_token_index": 255,
        "eoi_token_index": 254,
        "eos_token_id": [1, 106],
        "image_token_index": 253,
        "initializer_range": 0.02,
        "mm_tokens_per_image": 4,
        "model_type": "gemma3",
        "text_config": {k: val for k, val in _gemma3_cfg().items()
                        if k not in ("architectures", "torch_dtype", "transformers_version")},
        "torch_dtype": "float32",
        "transformers_version": "4.56.1",
        "vision_config": {"hidden_size": 32, "image_size": 32, "intermediate_size": 64,
                          "model_type": "siglip_vision_model", "num_attention_heads": 2,
                          "num_hidden_layers": 1, "patch_size": 16, "vision_use_head": False},
    }
    add("gemma3-cg", cg, 601,
        "Gemma3ForConditionalGeneration: the gemma3 weights as language_model.model.*, "
        "config under text_config, no vision tensors; logits equal gemma3's")
    return v


VARIANTS = _variants()


def tokens_for(seed):
    u = uniform(seed, "tokens", N_TOKENS)
    return [min(VOCAB - 1, int((x + 1.0) * 0.5 * VOCAB)) for x in u]


def family(cfg):
    return cfg["architectures"][0]


def tensor_list(cfg, seed):
    """(name, shape, values) of every tensor of the checkpoint, HF names."""
    if "text_config" in cfg:
        inner = dict(cfg["text_config"], architectures=["Gemma3ForCausalLM"])
        return [("language_model." + n, sh, vals) for n, sh, vals in tensor_list(inner, seed)]
    arch = family(cfg)
    gemma = arch.startswith("Gemma")
    h = cfg["hidden_size"]
    nh = cfg["num_attention_heads"]
    nkv = cfg.get("num_key_value_heads", nh)
    hd = cfg.get("head_dim") or h // nh
    inter = cfg["intermediate_size"]
    vocab = cfg["vocab_size"]
    L = cfg["num_hidden_layers"]
    out = []

    def t(name, shape, scale, offset=0.0):
        n = 1
        for s in shape:
            n *= s
        u = uniform(seed, name, n)
        out.append((name, shape, [offset + scale * x for x in u]))

    def lin(name, n_out, n_in):
        t(name, (n_out, n_in), 2.0 / math.sqrt(n_in))

    def norm(name, n):
        # Gemma stores w of (1 + w); the others store the gain itself
        if gemma:
            t(name, (n,), 0.2)
        else:
            t(name, (n,), 0.2, 1.0)

    attn_bias = arch == "Qwen2ForCausalLM" or cfg.get("attention_bias", False)
    mlp_bias = cfg.get("mlp_bias", False)
    qk_norm = arch in ("Qwen3ForCausalLM", "Gemma3ForCausalLM")
    # Gemma multiplies the embedding by sqrt(hidden) = 8: a smaller scale keeps the layers'
    # (normalized) outputs from being drowned in the residual stream
    t("model.embed_tokens.weight", (vocab, h), 0.25 if gemma else 1.0)
    for i in range(L):
        p = "model.layers.%d." % i
        norm(p + "input_layernorm.weight", h)
        norm(p + "post_attention_layernorm.weight", h)
        if gemma:
            norm(p + "pre_feedforward_layernorm.weight", h)
            norm(p + "post_feedforward_layernorm.weight", h)
        lin(p + "self_attn.q_proj.weight", nh * hd, h)
        lin(p + "self_attn.k_proj.weight", nkv * hd, h)
        lin(p + "self_attn.v_proj.weight", nkv * hd, h)
        lin(p + "self_attn.o_proj.weight", h, nh * hd)
        if attn_bias:
            t(p + "self_attn.q_proj.bias", (nh * hd,), 0.5)
            t(p + "self_attn.k_proj.bias", (nkv * hd,), 0.5)
            t(p + "self_attn.v_proj.bias", (nkv * hd,), 0.5)
            if arch != "Qwen2ForCausalLM":
                t(p + "self_attn.o_proj.bias", (h,), 0.5)
        if qk_norm:
            norm(p + "self_attn.q_norm.weight", hd)
            norm(p + "self_attn.k_norm.weight", hd)
        lin(p + "mlp.gate_proj.weight", inter, h)
        lin(p + "mlp.up_proj.weight", inter, h)
        lin(p + "mlp.down_proj.weight", h, inter)
        if mlp_bias:
            t(p + "mlp.gate_proj.bias", (inter,), 0.5)
            t(p + "mlp.up_proj.bias", (inter,), 0.5)
            t(p + "mlp.down_proj.bias", (h,), 0.5)
    norm("model.norm.weight", h)
    tied = cfg.get("tie_word_embeddings", gemma)
    if not tied:
        lin("lm_head.weight", vocab, h)
    return out


def config_json(cfg, dtype):
    c = dict(cfg)
    key = "dtype" if "dtype" in c else "torch_dtype"
    c[key] = "float32" if dtype == "f32" else "bfloat16"
    return json.dumps(c, indent=2, sort_keys=True) + "\n"


def write_variant(outdir, v, dtypes=("f32", "bf16")):
    tensors = tensor_list(v["config"], v["seed"])
    paths = []
    for dt in dtypes:
        d = os.path.join(outdir, "%s-%s" % (v["name"], dt))
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "config.json"), "w") as f:
            f.write(config_json(v["config"], dt))
        write_safetensors(os.path.join(d, "model.safetensors"), tensors,
                          "F32" if dt == "f32" else "BF16")
        paths.append(d)
    with open(os.path.join(outdir, v["name"] + ".tokens"), "w") as f:
        f.write(" ".join(str(x) for x in tokens_for(v["seed"])) + "\n")
    return paths


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        h.update(f.read())
    return h.hexdigest()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("outdir", nargs="?")
    ap.add_argument("--only", action="append", default=[], help="variant name (repeatable)")
    ap.add_argument("--list", action="store_true", help="print the variants and exit")
    a = ap.parse_args(argv)
    if a.list:
        for v in VARIANTS:
            print("%-20s %s" % (v["name"], v["note"]))
        return 0
    if not a.outdir:
        ap.error("OUTDIR is required")
    names = {v["name"] for v in VARIANTS}
    for n in a.only:
        if n not in names:
            ap.error("unknown variant %r (see --list)" % n)
    os.makedirs(a.outdir, exist_ok=True)
    for v in VARIANTS:
        if a.only and v["name"] not in a.only:
            continue
        write_variant(a.outdir, v)
    return 0


if __name__ == "__main__":
    sys.exit(main())
