#!/usr/bin/env python3
"""A float64 numpy forward of the decoder families of issue 24, from transformers' formulas.

    python3 tests/reference/ref_forward.py CHECKPOINT_DIR TOKENS_FILE [-o OUT.f32]

reads config.json and model.safetensors (F32/BF16/F16, read back exactly as stored), runs the
whole token sequence (positions 0..n-1, causal) and writes the logits, n rows of vocab float32
values, little-endian (or prints a summary without -o). Needs numpy only.

The formulas (transformers 4.56/5.0: models/{llama,mistral,qwen2,qwen3,gemma2,gemma3}/modeling_*.py
and modeling_rope_utils.py; restated in tests/reference/README.md, "The formulas"):
  * RMSNorm: x / sqrt(mean(x^2) + eps) * w; Gemma: * (1 + w) (also Gemma-3's q/k norms).
  * Gemma: embedding * sqrt(hidden) (the normalizer rounded to the weights' dtype); four norms per
    layer (input, post_attention, pre_feedforward, post_feedforward); MLP down(gelu_tanh(gate) * up).
    Others: two norms, MLP down(silu(gate) * up) (+ biases when mlp_bias).
  * Attention: q, k, v projections (+ biases: Qwen2 always q/k/v; Llama attention_bias q/k/v/o);
    Qwen3 / Gemma-3: per-head RMSNorm of q and k before RoPE; RoPE rotate_half with
    cos/sin = cat(f, f) of position * inv_freq, times the attention factor (YaRN); GQA (kv head
    h // (heads / kv_heads)); scores q.k * scaling, scaling = head_dim^-0.5, Gemma:
    query_pre_attn_scalar^-0.5; Gemma-2: scores = cap * tanh(scores / cap); causal mask, sliding
    layers also mask keys j with i - j >= window; softmax; o_proj.
  * Sliding layers: Mistral every layer when sliding_window is set; Qwen2 layers i >=
    max_window_layers when use_sliding_window; Gemma layer_types, or the pattern (Gemma-2 every
    2nd layer full, Gemma-3 every 6th: sliding iff (i + 1) % pattern).
  * RoPE inv_freq: default base^(-2i/d); linear / factor; dynamic: default while the sequence is
    within max_position_embeddings, else base * (factor * n / max_pos - (factor - 1))^(d/(d-2));
    llama3: per wavelength 2 pi / f: < orig/high_freq_factor keep, > orig/low_freq_factor f/factor,
    between ((1 - s) / factor + s) f with s = (orig / wavelen - low) / (high - low);
    yarn: low = floor(d ln(orig / (beta_fast 2 pi)) / (2 ln base)), high = ceil(same with
    beta_slow), clamped to [0, d - 1]; ramp r_i = clamp((i - low) / (high - low), 0, 1);
    f = f_interp * r + f_extrap * (1 - r) with f_interp = f_extrap / factor; attention factor =
    config's attention_factor or 0.1 ln(factor) + 1 (mscale/mscale_all_dim ratio when both).
    Gemma-3: sliding layers use rope_local_base_freq and no scaling; full layers rope_theta and
    rope_scaling. transformers 5's rope_parameters (rope_theta inside; possibly keyed by layer
    type) is read as the same.
  * Final norm, lm_head (tied: the embedding), Gemma-2 (and Gemma-3 when set): final soft cap.
"""
import argparse
import json
import math
import os
import struct
import sys

import numpy as np


def load_safetensors(path):
    with open(path, "rb") as f:
        buf = f.read()
    (n,) = struct.unpack("<Q", buf[:8])
    header = json.loads(buf[8:8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        raw = buf[base + b:base + e]
        dt = info["dtype"]
        if dt == "F32":
            a = np.frombuffer(raw, dtype="<f4").astype(np.float64)
        elif dt == "F16":
            a = np.frombuffer(raw, dtype="<f2").astype(np.float64)
        elif dt == "BF16":
            u = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
            a = u.view(np.float32).astype(np.float64)
        else:
            raise ValueError("%s: %s: dtype %s not supported" % (path, name, dt))
        out[name] = a.reshape(info["shape"])
    return out


def load(dirpath):
    with open(os.path.join(dirpath, "config.json")) as f:
        cfg = json.load(f)
    if "text_config" in cfg:          # Gemma3ForConditionalGeneration
        tc = dict(cfg["text_config"])
        tc.setdefault("architectures", cfg["architectures"])
        cfg = tc
    w = load_safetensors(os.path.join(dirpath, "model.safetensors"))
    # the language model inside a Gemma3ForConditionalGeneration checkpoint
    ren = {}
    for k, v in w.items():
        for pre in ("language_model.model.", "model.language_model."):
            if k.startswith(pre):
                k = "model." + k[len(pre):]
        if k.startswith("language_model.lm_head."):
            k = k[len("language_model."):]
        ren[k] = v
    return cfg, ren


# ---------------------------------------------------------------------------------------------


def rope_params(cfg, layer_type):
    """(base, scaling dict or None) for a layer of the given type."""
    arch = cfg["architectures"][0]
    if "rope_parameters" in cfg:
        rp = cfg["rope_parameters"]
        if layer_type in rp and isinstance(rp[layer_type], dict):
            rp = rp[layer_type]
        elif "full_attention" in rp or "sliding_attention" in rp:
            rp = rp.get("full_attention", {})
        rp = dict(rp)
        base = rp.pop("rope_theta")
        t = rp.get("rope_type", rp.get("type", "default"))
        return base, (None if t == "default" else rp)
    if arch.startswith("Gemma3") and layer_type == "sliding_attention":
        return cfg.get("rope_local_base_freq", 10000.0), None
    base = cfg.get("rope_theta", 10000.0)
    rs = cfg.get("rope_scaling")
    if rs is not None:
        t = rs.get("rope_type", rs.get("type", "default"))
        if t == "default":
            rs = None
    return base, rs


def inv_freq_and_factor(cfg, base, rs, dim, seq_len):
    inv = 1.0 / base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    if rs is None:
        return inv, 1.0
    t = rs.get("rope_type", rs.get("type"))
    factor = float(rs.get("factor", 1.0))
    if t == "linear":
        return inv / factor, 1.0
    if t == "dynamic":
        mp = cfg.get("max_position_embeddings", 2048)
        if seq_len > mp:
            b = base * ((factor * seq_len / mp) - (factor - 1)) ** (dim / (dim - 2))
            inv = 1.0 / b ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
        return inv, 1.0
    if t == "llama3":
        low = rs.get("low_freq_factor", 1.0)
        high = rs.get("high_freq_factor", 4.0)
        orig = rs.get("original_max_position_embeddings", 8192)
        lw, hw = orig / low, orig / high
        wl = 2 * math.pi / inv
        out = np.where(wl > lw, inv / factor, inv)
        s = (orig / wl - low) / (high - low)
        smooth = (1 - s) * out / factor + s * out
        medium = ~(wl < hw) & ~(wl > lw)
        return np.where(medium, smooth, out), 1.0
    if t == "yarn":
        orig = rs.get("original_max_position_embeddings") or cfg.get("max_position_embeddings")
        af = rs.get("attention_factor")
        ms, msa = rs.get("mscale"), rs.get("mscale_all_dim")

        def get_mscale(scale, m=1.0):
            return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0
        if af is None:
            af = get_mscale(factor, ms) / get_mscale(factor, msa) if (ms and msa) \
                else get_mscale(factor)
        bf = rs.get("beta_fast") or 32
        bs = rs.get("beta_slow") or 1

        def cdim(rot):
            return dim * math.log(orig / (rot * 2 * math.pi)) / (2 * math.log(base))
        lo, hi = cdim(bf), cdim(bs)
        if rs.get("truncate", True):
            lo, hi = math.floor(lo), math.ceil(hi)
        lo, hi = max(lo, 0), min(hi, dim - 1)
        if lo == hi:
            hi += 0.001
        ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - lo) / (hi - lo), 0, 1)
        extrap = 1 - ramp
        return inv / factor * (1 - extrap) + inv * extrap, float(af)
    raise ValueError("rope type %r not in the reference" % t)


def rms(x, w, eps, gemma):
    y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    return y * ((1.0 + w) if gemma else w)


def rotate(x, cos, sin):
    h = x.shape[-1] // 2
    rh = np.concatenate([-x[..., h:], x[..., :h]], axis=-1)
    return x * cos + rh * sin


def gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def gelu_tanh_ggml_fp16(x):
    """ggml's CPU GELU (GGML_GELU_FP16): the fp16 table entry of the fp16-rounded input; used
    only to explain llama.cpp's Gemma differences (gen_reference.py), never as the reference."""
    xh = x.astype(np.float16).astype(np.float64)
    y = gelu_tanh(xh).astype(np.float16).astype(np.float64)
    return np.where(x <= -10, 0.0, np.where(x >= 10, x, y))


def silu(x):
    return x / (1 + np.exp(-x))


def layer_types(cfg):
    arch = cfg["architectures"][0]
    L = cfg["num_hidden_layers"]
    if arch.startswith("Gemma"):
        if cfg.get("layer_types"):
            return list(cfg["layer_types"])
        pat = 2 if arch.startswith("Gemma2") else cfg.get("sliding_window_pattern", 6)
        return ["sliding_attention" if (i + 1) % pat else "full_attention" for i in range(L)]
    if arch == "MistralForCausalLM":
        return ["sliding_attention" if cfg.get("sliding_window") else "full_attention"] * L
    if arch in ("Qwen2ForCausalLM", "Qwen3ForCausalLM"):
        sw = cfg.get("sliding_window") if cfg.get("use_sliding_window") else None
        mwl = cfg.get("max_window_layers", L)
        return ["sliding_attention" if sw is not None and i >= mwl else "full_attention"
                for i in range(L)]
    return ["full_attention"] * L


def forward(cfg, w, tokens, stored_dtype=float, gelu=None):
    arch = cfg["architectures"][0]
    gemma = arch.startswith("Gemma")
    g3 = arch.startswith("Gemma3")
    h = cfg["hidden_size"]
    nh = cfg["num_attention_heads"]
    nkv = cfg.get("num_key_value_heads") or nh
    hd = cfg.get("head_dim") or h // nh
    eps = cfg.get("rms_norm_eps", 1e-6)
    L = cfg["num_hidden_layers"]
    n = len(tokens)
    types = layer_types(cfg)
    window = cfg.get("sliding_window")
    emb = w["model.embed_tokens.weight"]
    x = emb[np.asarray(tokens)]
    if gemma:
        x = x * float(stored_dtype(math.sqrt(h)))
    scaling = cfg["query_pre_attn_scalar"] ** -0.5 if gemma else hd ** -0.5
    attn_cap = cfg.get("attn_logit_softcapping") if arch.startswith("Gemma2") else None
    pos = np.arange(n, dtype=np.float64)
    i_idx = np.arange(n)[:, None]
    j_idx = np.arange(n)[None, :]
    causal = j_idx <= i_idx

    def lin(name, v):
        y = v @ w[name + ".weight"].T
        b = w.get(name + ".bias")
        return y if b is None else y + b

    for li in range(L):
        p = "model.layers.%d." % li
        lt = types[li]
        base, rs = rope_params(cfg, lt)
        inv, af = inv_freq_and_factor(cfg, base, rs, hd, n)
        fr = pos[:, None] * inv[None, :]
        emb_f = np.concatenate([fr, fr], axis=-1)
        cos, sin = np.cos(emb_f) * af, np.sin(emb_f) * af

        r = x
        a = rms(x, w[p + "input_layernorm.weight"], eps, gemma)
        q = lin(p + "self_attn.q_proj", a).reshape(n, nh, hd)
        k = lin(p + "self_attn.k_proj", a).reshape(n, nkv, hd)
        v = lin(p + "self_attn.v_proj", a).reshape(n, nkv, hd)
        if p + "self_attn.q_norm.weight" in w:
            q = rms(q, w[p + "self_attn.q_norm.weight"], eps, g3)
            k = rms(k, w[p + "self_attn.k_norm.weight"], eps, g3)
        q = rotate(q, cos[:, None, :], sin[:, None, :])
        k = rotate(k, cos[:, None, :], sin[:, None, :])
        mask = causal.copy()
        if lt == "sliding_attention" and window:
            mask &= (i_idx - j_idx) < window
        o = np.empty((n, nh, hd))
        grp = nh // nkv
        for hh in range(nh):
            kh = hh // grp
            s = (q[:, hh, :] @ k[:, kh, :].T) * scaling
            if attn_cap:
                s = attn_cap * np.tanh(s / attn_cap)
            s = np.where(mask, s, -np.inf)
            s = s - s.max(axis=-1, keepdims=True)
            e = np.exp(s)
            pr = e / e.sum(axis=-1, keepdims=True)
            o[:, hh, :] = pr @ v[:, kh, :]
        a = lin(p + "self_attn.o_proj", o.reshape(n, nh * hd))
        if gemma:
            a = rms(a, w[p + "post_attention_layernorm.weight"], eps, True)
            x = r + a
            r = x
            m = rms(x, w[p + "pre_feedforward_layernorm.weight"], eps, True)
            m = lin(p + "mlp.down_proj",
                    (gelu or gelu_tanh)(lin(p + "mlp.gate_proj", m)) * lin(p + "mlp.up_proj", m))
            m = rms(m, w[p + "post_feedforward_layernorm.weight"], eps, True)
            x = r + m
        else:
            x = r + a
            r = x
            m = rms(x, w[p + "post_attention_layernorm.weight"], eps, False)
            m = lin(p + "mlp.down_proj",
                    silu(lin(p + "mlp.gate_proj", m)) * lin(p + "mlp.up_proj", m))
            x = r + m
    x = rms(x, w["model.norm.weight"], eps, gemma)
    tied = cfg.get("tie_word_embeddings", True if gemma else False)
    head = emb if tied or "lm_head.weight" not in w else w["lm_head.weight"]
    logits = x @ head.T
    cap = cfg.get("final_logit_softcapping")
    if gemma and cap:
        logits = cap * np.tanh(logits / cap)
    return logits


def read_tokens(path):
    with open(path) as f:
        return [int(t) for t in f.read().split()]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkpoint")
    ap.add_argument("tokens")
    ap.add_argument("-o", "--out")
    a = ap.parse_args(argv)
    cfg, w = load(a.checkpoint)
    with open(os.path.join(a.checkpoint, "config.json")) as f:
        raw = json.load(f)
    dt = raw.get("torch_dtype") or raw.get("dtype") or "float32"
    # transformers multiplies Gemma's embedding by sqrt(hidden) as a tensor of the weights' dtype
    logits = forward(cfg, w, read_tokens(a.tokens),
                     bf16_round if dt == "bfloat16" else float)
    if a.out:
        logits.astype("<f4").tofile(a.out)
    else:
        print("logits %s, row 0 max %.6f at %d" % (logits.shape, logits[0].max(),
                                                    int(logits[0].argmax())))
    return 0


def bf16_round(v):
    b = int(np.float32(v).view(np.uint32))
    b = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) << 16
    return float(np.uint32(b).view(np.float32))


if __name__ == "__main__":
    sys.exit(main())
