#!/usr/bin/env python3
"""Runs llama.cpp's own convert_hf_to_gguf.py on a tokenizer-less checkpoint.

    python3 tests/reference/convert_gguf.py LLAMA_CPP_SRC CHECKPOINT_DIR OUT.gguf {f32|bf16}

Everything llama.cpp's converter does to the weights and the metadata is its own code (the
model classes of LLAMA_CPP_SRC/conversion/, gguf-py); this driver changes three things around
it, nothing inside a model class:

 0. transformers (not installable here): the converter imports AutoConfig at module level and
    reads the config through it, falling back to the raw config.json when it raises. A stub
    module whose AutoConfig.from_pretrained raises takes that fallback; our config.json files
    spell out every field the converter reads (the defaults AutoConfig would fill in are
    written explicitly by make_checkpoints.py).

 1. torch: the converter needs torch only as a tensor container. Debian 12's python3-torch is
    1.13, which lacks dtypes the converter names in class bodies (float8_e4m3fn, float8_e5m2,
    uint16/32/64); they are added as distinct placeholder objects (no tensor of ours has them).
 2. the vocabulary: our checkpoints have no tokenizer (the runtime works on ids), and the
    converter's tokenizer readers need transformers or sentencepiece. Every model class's
    set_vocab is replaced by the converter's own _set_vocab_none() ("tokenizer.ggml.model" =
    "none") plus "<arch>.vocab_size", which makes llama.cpp create vocab_size dummy tokens.
 3. Gemma-3's converter trims the embedding to the tokenizer's length, read from
    tokenizer.json: the checkpoint's files are linked into a temporary directory with a
    tokenizer.json of vocab_size entries, so nothing is trimmed.
"""
import json
import os
import runpy
import shutil
import sys
import tempfile


def main():
    if len(sys.argv) != 5 or sys.argv[4] not in ("f32", "bf16"):
        sys.stderr.write(__doc__)
        return 64
    src, ckpt, out, outtype = sys.argv[1:]
    src = os.path.abspath(src)

    import torch
    for name in ("float8_e4m3fn", "float8_e5m2", "uint16", "uint32", "uint64"):
        if not hasattr(torch, name):
            setattr(torch, name, type("missing_torch_dtype_" + name, (), {})())

    import types
    tf = types.ModuleType("transformers")

    class AutoConfig:
        @staticmethod
        def from_pretrained(*a, **k):
            raise RuntimeError("transformers is not installed (stub); reading config.json")
    tf.AutoConfig = AutoConfig
    sys.modules["transformers"] = tf

    sys.path.insert(0, src)
    sys.path.insert(1, os.path.join(src, "gguf-py"))
    import conversion

    def set_vocab_none(self):
        self._set_vocab_none()
        key = "%s.vocab_size" % self.gguf_writer.arch
        if not any(key in kv for kv in self.gguf_writer.kv_data):
            self.gguf_writer.add_vocab_size(self.hparams["vocab_size"])

    real_get = conversion.get_model_class

    def get_model_class(name, mmproj=False):
        cls = real_get(name, mmproj)
        cls.set_vocab = set_vocab_none
        return cls
    conversion.get_model_class = get_model_class

    tmp = tempfile.mkdtemp(prefix="sq-convert-")
    try:
        for f in os.listdir(ckpt):
            os.symlink(os.path.abspath(os.path.join(ckpt, f)), os.path.join(tmp, f))
        with open(os.path.join(ckpt, "config.json")) as f:
            cfg = json.load(f)
        n = cfg.get("text_config", cfg)["vocab_size"]
        with open(os.path.join(tmp, "tokenizer.json"), "w") as f:
            json.dump({"model": {"vocab": {"<%d>" % i: i for i in range(n)}},
                       "added_tokens": []}, f)
        sys.argv = [os.path.join(src, "convert_hf_to_gguf.py"), "--outtype", outtype,
                    "--outfile", out, tmp]
        runpy.run_path(os.path.join(src, "convert_hf_to_gguf.py"), run_name="__main__")
    finally:
        shutil.rmtree(tmp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
