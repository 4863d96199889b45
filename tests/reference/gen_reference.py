#!/usr/bin/env python3
"""Makes tests/data/families/: the reference logits of every variant of make_checkpoints.py.

    /usr/bin/python3 tests/reference/gen_reference.py --work DIR \\
        [--llama-cpp SRC --llama-build BUILD] [--out tests/data/families]

For every variant and dtype (f32, bf16):
  * the float64 numpy forward (ref_forward.py) of the checkpoint, stored as float32;
  * with --llama-cpp: the checkpoint converted by llama.cpp's convert_hf_to_gguf.py
    (convert_gguf.py drives it) and evaluated by llama_logits.c on llama.cpp's C API, for the
    variants llama.cpp implements (the others carry the reason in the manifest);
  * the effect of the variant's feature: the numpy logits again with the feature switched off
    (no window, no rope scaling, ...), to show the reference data can tell the difference.
Writes OUT/manifest.json and OUT/<variant>-<dtype>.{numpy,llamacpp}.f32 (n_tokens x vocab
little-endian float32). Needs numpy; the llama.cpp part needs torch (Debian's python3-torch) and
python3-tqdm for the converter. docs: tests/reference/README.md.
"""
import argparse
import copy
import hashlib
import json
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_checkpoints as MC  # noqa: E402
import ref_forward as RF  # noqa: E402

DTYPES = ("f32", "bf16")


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def git_head(src):
    try:
        return subprocess.run(["git", "-C", src, "rev-parse", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def ablations(cfg):
    """(label, mutated config) pairs: the variant's features switched off one at a time."""
    out = []
    arch = cfg["architectures"][0]

    def mut(label, **kw):
        c = copy.deepcopy(cfg)
        for k, v in kw.items():
            if v is KeyError:
                c.pop(k, None)
            else:
                c[k] = v
        out.append((label, c))
    if "rope_parameters" in cfg:
        rp = cfg["rope_parameters"]
        if rp.get("rope_type", "default") != "default":
            mut("rope_parameters default", rope_parameters={"rope_type": "default",
                                                            "rope_theta": rp["rope_theta"]})
    elif cfg.get("rope_scaling"):
        mut("rope_scaling null", rope_scaling=None)
    if arch == "MistralForCausalLM" and cfg.get("sliding_window"):
        mut("sliding_window null", sliding_window=None)
    if arch == "Qwen2ForCausalLM" and cfg.get("use_sliding_window"):
        mut("use_sliding_window false", use_sliding_window=False)
    if arch.startswith("Gemma"):
        mut("sliding_window 1000", sliding_window=1000)
        hd = cfg["head_dim"]
        if cfg.get("query_pre_attn_scalar") != hd:
            mut("query_pre_attn_scalar = head_dim", query_pre_attn_scalar=hd)
        if cfg.get("attn_logit_softcapping"):
            mut("attn_logit_softcapping null", attn_logit_softcapping=None)
        if cfg.get("final_logit_softcapping"):
            mut("final_logit_softcapping null", final_logit_softcapping=None)
        if arch.startswith("Gemma3"):
            mut("rope_local_base_freq = rope_theta", rope_local_base_freq=cfg["rope_theta"])
    return out


def build_llama_logits(src, build, workdir):
    exe = os.path.join(workdir, "llama_logits")
    bindir = os.path.join(build, "bin")
    cmd = ["cc", "-std=c11", "-O2", "-Wall", "-Wextra", os.path.join(HERE, "llama_logits.c"),
           "-I", os.path.join(src, "include"), "-I", os.path.join(src, "ggml", "include"),
           "-L", bindir, "-lllama", "-lggml", "-lggml-base", "-lm",
           "-Wl,-rpath," + bindir, "-o", exe]
    subprocess.run(cmd, check=True)
    return exe


def rel_err(a, b):
    """max |a - b| / max |b| (the row-independent relative error used for the tolerances)."""
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", required=True, help="scratch directory (checkpoints, GGUFs)")
    ap.add_argument("--out", default=os.path.join(HERE, "..", "data", "families"))
    ap.add_argument("--llama-cpp", help="llama.cpp source tree")
    ap.add_argument("--llama-build", help="its cmake build directory (bin/libllama.so)")
    ap.add_argument("--only", action="append", default=[])
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    os.makedirs(a.out, exist_ok=True)
    exe = None
    if a.llama_cpp:
        exe = build_llama_logits(a.llama_cpp, a.llama_build, a.work)
    man_path = os.path.join(a.out, "manifest.json")
    old = {}
    if os.path.exists(man_path):
        with open(man_path) as f:
            old = {v["name"]: v for v in json.load(f)["variants"]}
    variants = []
    for v in MC.VARIANTS:
        if a.only and v["name"] not in a.only:
            if v["name"] in old:
                variants.append(old[v["name"]])
            continue
        MC.write_variant(a.work, v)
        toks = MC.tokens_for(v["seed"])
        ent = {"name": v["name"], "architecture": v["config"]["architectures"][0],
               "note": v["note"], "seed": v["seed"], "tokens": toks,
               "n_tokens": len(toks),
               "vocab": v["config"].get("text_config", v["config"])["vocab_size"],
               "llama_cpp": bool(v["llama_cpp"] and exe), "dtypes": {}}
        if not v["llama_cpp"]:
            ent["llama_cpp_absent"] = v["why_not"]
        tokfile = os.path.join(a.work, v["name"] + ".tokens")
        for dt in DTYPES:
            d = os.path.join(a.work, "%s-%s" % (v["name"], dt))
            cfg, w = RF.load(d)
            ref = RF.forward(cfg, w, toks, RF.bf16_round if dt == "bf16" else float)
            base = "%s-%s" % (v["name"], dt)
            ref.astype("<f4").tofile(os.path.join(a.out, base + ".numpy.f32"))
            de = {"config_sha256": sha256(os.path.join(d, "config.json")),
                  "safetensors_sha256": sha256(os.path.join(d, "model.safetensors")),
                  "numpy": base + ".numpy.f32",
                  "max_abs_logit": float(np.max(np.abs(ref)))}
            if dt == "f32":
                eff = {}
                for label, c2 in ablations(cfg):
                    alt = RF.forward(c2, w, toks)
                    eff[label] = round(float(np.max(np.abs(alt - ref))), 6)
                de["feature_effect_max_abs"] = eff
            wit = v.get("witness")
            if exe and wit and dt == "f32":
                # a partial outside witness for a variant llama.cpp cannot run as configured
                gg = os.path.join(a.work, base + ".gguf")
                subprocess.run([sys.executable, os.path.join(HERE, "convert_gguf.py"),
                                a.llama_cpp, d, gg, dt], check=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                wf = os.path.join(a.work, base + ".witness.f32")
                r = subprocess.run([exe, gg, tokfile, wf] + wit["args"], capture_output=True,
                                   text=True)
                if r.returncode != 0:
                    sys.stderr.write(r.stderr)
                    raise SystemExit("llama_logits failed on %s" % gg)
                c2 = copy.deepcopy(cfg)
                rp = c2.get("rope_parameters") or c2.get("rope_scaling")
                for k in wit["numpy_rope_drop"]:
                    rp.pop(k, None)
                alt = RF.forward(c2, w, toks)
                lc = np.fromfile(wf, dtype="<f4").astype(np.float64).reshape(ref.shape)
                de["llamacpp_witness"] = {"how": wit["how"],
                                          "max_abs": float(np.max(np.abs(lc - alt)))}
                print("%-22s %-4s witness: max abs %.3g" % (v["name"], dt,
                                                            de["llamacpp_witness"]["max_abs"]))
            if ent["llama_cpp"]:
                gg = os.path.join(a.work, base + ".gguf")
                subprocess.run([sys.executable, os.path.join(HERE, "convert_gguf.py"),
                                a.llama_cpp, d, gg, dt], check=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                lf = os.path.join(a.out, base + ".llamacpp.f32")
                r = subprocess.run([exe, gg, tokfile, lf], capture_output=True, text=True)
                if r.returncode != 0:
                    sys.stderr.write(r.stderr)
                    raise SystemExit("llama_logits failed on %s" % gg)
                lc = np.fromfile(lf, dtype="<f4").astype(np.float64).reshape(ref.shape)
                de["llamacpp"] = base + ".llamacpp.f32"
                de["llamacpp_vs_numpy_max_abs"] = float(np.max(np.abs(lc - ref)))
                de["llamacpp_vs_numpy_rel"] = rel_err(lc, ref)
                de["llamacpp_argmax_agree"] = int(np.sum(lc.argmax(1) == ref.argmax(1)))
                de["llamacpp_batch_vs_single"] = float(r.stderr.strip().split("max |diff| ")[-1])
                if dt == "f32" and "gelu" in str(cfg.get("hidden_activation",
                                                          cfg.get("hidden_act"))):
                    # ggml's CPU GELU reads an fp16 table at the fp16-rounded input: with that
                    # emulated, llama.cpp's remaining difference is rounding-boundary flips
                    emu = RF.forward(cfg, w, toks, RF.bf16_round if dt == "bf16" else float,
                                     gelu=RF.gelu_tanh_ggml_fp16)
                    de["llamacpp_vs_numpy_fp16_gelu_max_abs"] = float(np.max(np.abs(lc - emu)))
                print("%-22s %-4s llama.cpp vs numpy: max abs %.3g rel %.3g argmax %d/%d" % (
                    v["name"], dt, de["llamacpp_vs_numpy_max_abs"],
                    de["llamacpp_vs_numpy_rel"], de["llamacpp_argmax_agree"], len(toks)))
            ent["dtypes"][dt] = de
        variants.append(ent)
    man = {"format": "sequoia reference logits v1 (tests/reference/README.md)",
           "generator": "tests/reference/gen_reference.py",
           "llama_cpp_commit": git_head(a.llama_cpp) if a.llama_cpp else None,
           "variants": variants}
    if a.llama_cpp and os.path.exists(os.path.join(a.llama_cpp, ".source-commit")):
        with open(os.path.join(a.llama_cpp, ".source-commit")) as f:
            man["llama_cpp_commit"] = f.read().strip()
    with open(man_path, "w") as f:
        json.dump(man, f, indent=1, sort_keys=True)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
