#!/usr/bin/python3
"""Train the shipped draft/target pair: two byte-level Llama decoders on the King James Bible.

The text comes from Debian's bible-kjv-text (read through the `bible` program of the
bible-kjv package), one verse per line with the "Ge1:1 " references removed. Token id = byte
value; the vocabulary is the 256 bytes and there are no special tokens.

The last 5% of the text is held out: the split is the first byte after the first newline at
or after floor(0.95 * len(text)), so the held-out text starts at the beginning of a verse.
Training windows are drawn from the text before it only.

The models are implemented here by hand, computing exactly what Hugging Face's
LlamaForCausalLM computes (RMSNorm with eps, RoPE with rope_theta and the rotate_half
convention on [first half, second half] of each head, grouped-query attention, SwiGLU MLP,
no biases), so that any runtime with Llama semantics reproduces the logits. They are written
as Hugging Face directories (config.json + model.safetensors, the latter by the small writer
below that follows the published safetensors layout).

Deterministic given --seed and --threads (torch.manual_seed, one torch.Generator for the data
order, deterministic algorithms). Meant for a shared 2-core machine:

    nice -n 19 /usr/bin/python3 examples/train_pair.py --out data/models --heldout data/heldout.txt

Held-out bits per byte are computed in float32, with the weights rounded to the stored dtype,
over the first --eval-bytes of the held-out text cut into non-overlapping windows of
--eval-window bytes; every byte of a window but the first is predicted from the bytes before
it in the same window. The figures go to <out>/metrics.json.
"""

import argparse
import hashlib
import json
import math
import os
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import torch.nn.functional as F

VOCAB = 256

# name: (hidden_size, intermediate_size, layers, heads, kv_heads, tied)
SIZES = {
    "draft": dict(hidden_size=96, intermediate_size=256, num_hidden_layers=2,
                  num_attention_heads=3, num_key_value_heads=3, tie_word_embeddings=True),
    "target": dict(hidden_size=256, intermediate_size=640, num_hidden_layers=3,
                   num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False),
    # The CPU-speedup target: ~18M parameters, 72 MB as float32 at run time, well past a
    # 32 MB L3 cache, so that its one-token decode is bound by memory bandwidth.
    "large": dict(hidden_size=512, intermediate_size=1408, num_hidden_layers=6,
                  num_attention_heads=8, num_key_value_heads=4, tie_word_embeddings=False),
}
SEED_OFFSET = {"draft": (0, 7), "target": (1, 11), "large": (2, 13)}


# --------------------------------------------------------------------------------------------
# Text


def fail(code, msg):
    """Exit codes as the C tools: 64 usage, 65 data, 66 no input, 73 can't create."""
    print("train_pair.py: " + msg, file=sys.stderr)
    sys.exit(code)


def load_text(path):
    """The KJV as bytes: from a file if given, else dumped with `bible` (package bible-kjv)."""
    if path:
        try:
            with open(path, "rb") as f:
                return f.read()
        except OSError as e:
            fail(66, "%s: cannot read: %s" % (path, e.strerror))
    try:
        raw = subprocess.run(["bible", "-f", "Gen1:1-Rev22:21"], check=True,
                             stdout=subprocess.PIPE).stdout
    except FileNotFoundError:
        fail(66, "bible: not found; install Debian's bible-kjv (apt-get install bible-kjv) or "
                 "pass --text FILE")
    except subprocess.CalledProcessError as e:
        fail(66, "bible: exited with status %d" % e.returncode)
    lines = []
    for line in raw.split(b"\n"):
        if not line:
            continue
        ref, sep, verse = line.partition(b" ")
        if not sep or b":" not in ref:
            fail(65, "bible output: unexpected line %r" % line[:60])
        lines.append(verse)
    return b"\n".join(lines) + b"\n"


def split_text(text, frac=0.95):
    cut = int(len(text) * frac)
    nl = text.find(b"\n", cut)
    start = nl + 1 if nl >= 0 else cut
    return start


# --------------------------------------------------------------------------------------------
# Model: Hugging Face LlamaForCausalLM semantics


class Llama(torch.nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        d = cfg["hidden_size"]
        h = cfg["intermediate_size"]
        self.n_heads = cfg["num_attention_heads"]
        self.n_kv = cfg["num_key_value_heads"]
        self.hd = d // self.n_heads
        self.eps = cfg["rms_norm_eps"]
        std = 0.02
        P = torch.nn.Parameter
        self.embed = P(torch.randn(VOCAB, d) * std)                   # (vocab, dim)
        self.layers = torch.nn.ModuleList()
        for _ in range(cfg["num_hidden_layers"]):
            layer = torch.nn.Module()
            layer.wq = P(torch.randn(self.n_heads * self.hd, d) * std)  # (n_heads*hd, dim)
            layer.wk = P(torch.randn(self.n_kv * self.hd, d) * std)     # (n_kv*hd, dim)
            layer.wv = P(torch.randn(self.n_kv * self.hd, d) * std)     # (n_kv*hd, dim)
            layer.wo = P(torch.randn(d, self.n_heads * self.hd) * std
                         / math.sqrt(2 * cfg["num_hidden_layers"]))    # (dim, n_heads*hd)
            layer.w_gate = P(torch.randn(h, d) * std)                  # (hidden, dim)
            layer.w_up = P(torch.randn(h, d) * std)                    # (hidden, dim)
            layer.w_down = P(torch.randn(d, h) * std
                             / math.sqrt(2 * cfg["num_hidden_layers"]))  # (dim, hidden)
            layer.norm_attn = P(torch.ones(d))                         # (dim)
            layer.norm_mlp = P(torch.ones(d))                          # (dim)
            self.layers.append(layer)
        self.norm = P(torch.ones(d))                                    # (dim)
        self.lm_head = None if cfg["tie_word_embeddings"] else P(torch.randn(VOCAB, d) * std)
        inv_freq = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, self.hd, 2).float() / self.hd))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def rmsnorm(self, x, w):
        var = x.pow(2).mean(-1, keepdim=True)
        return w * (x * torch.rsqrt(var + self.eps))

    @staticmethod
    def rotate_half(x):
        half = x.shape[-1] // 2
        return torch.cat((-x[..., half:], x[..., :half]), dim=-1)

    def forward(self, tokens):
        """tokens: (B, T) int64, positions 0..T-1. Returns logits (B, T, vocab)."""
        B, T = tokens.shape
        x = self.embed[tokens]
        pos = torch.arange(T, dtype=torch.float32, device=tokens.device)
        freqs = torch.outer(pos, self.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos(), emb.sin()                                # (T, hd)
        mask = torch.full((T, T), float("-inf"), device=tokens.device).triu(1)
        rep = self.n_heads // self.n_kv
        for L in self.layers:
            a = self.rmsnorm(x, L.norm_attn)
            q = (a @ L.wq.t()).view(B, T, self.n_heads, self.hd).transpose(1, 2)
            k = (a @ L.wk.t()).view(B, T, self.n_kv, self.hd).transpose(1, 2)
            v = (a @ L.wv.t()).view(B, T, self.n_kv, self.hd).transpose(1, 2)
            q = q * cos + self.rotate_half(q) * sin
            k = k * cos + self.rotate_half(k) * sin
            if rep > 1:  # query head i reads kv head i // rep, as HF's repeat_kv
                k = k.repeat_interleave(rep, dim=1)
                v = v.repeat_interleave(rep, dim=1)
            s = (q @ k.transpose(-1, -2)) / math.sqrt(self.hd) + mask
            o = torch.softmax(s, dim=-1) @ v
            o = o.transpose(1, 2).reshape(B, T, self.n_heads * self.hd)
            x = x + o @ L.wo.t()
            m = self.rmsnorm(x, L.norm_mlp)
            x = x + (F.silu(m @ L.w_gate.t()) * (m @ L.w_up.t())) @ L.w_down.t()
        x = self.rmsnorm(x, self.norm)
        head = self.embed if self.lm_head is None else self.lm_head
        return x @ head.t()

    def hf_tensors(self):
        """(name, tensor) in Hugging Face naming, weights as [out_features, in_features]."""
        out = [("model.embed_tokens.weight", self.embed)]
        for i, L in enumerate(self.layers):
            p = "model.layers.%d." % i
            out += [(p + "self_attn.q_proj.weight", L.wq), (p + "self_attn.k_proj.weight", L.wk),
                    (p + "self_attn.v_proj.weight", L.wv), (p + "self_attn.o_proj.weight", L.wo),
                    (p + "mlp.gate_proj.weight", L.w_gate), (p + "mlp.up_proj.weight", L.w_up),
                    (p + "mlp.down_proj.weight", L.w_down),
                    (p + "input_layernorm.weight", L.norm_attn),
                    (p + "post_attention_layernorm.weight", L.norm_mlp)]
        out.append(("model.norm.weight", self.norm))
        if self.lm_head is not None:
            out.append(("lm_head.weight", self.lm_head))
        return out


def count_params(model):
    return sum(p.numel() for p in model.parameters())


# --------------------------------------------------------------------------------------------
# safetensors writer: u64 little-endian header length N, N bytes of JSON header (padded with
# spaces to a multiple of 8), then the tensors' bytes, row-major little-endian, at the
# [begin, end) offsets the header gives relative to the end of the header.

DTYPES = {"F32": (np.float32, "float32"), "F16": (np.float16, "float16"),
          "BF16": (None, "bfloat16")}


def to_bytes(t, dtype):
    t = t.detach().contiguous().float()
    if dtype == "BF16":
        # round to nearest even on the upper 16 bits of the float32 pattern
        u = t.numpy().view(np.uint32).astype(np.uint64)
        u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
        return u.astype("<u2").tobytes()
    return t.numpy().astype(np.dtype(DTYPES[dtype][0]).newbyteorder("<")).tobytes()


def round_to_dtype(t, dtype):
    """The float32 values a reader gets back from the stored dtype."""
    raw = to_bytes(t, dtype)
    if dtype == "F32":
        a = np.frombuffer(raw, "<f4")
    elif dtype == "F16":
        a = np.frombuffer(raw, "<f2").astype(np.float32)
    else:
        a = (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32)
    return torch.from_numpy(a.copy()).view(t.shape)


def write_safetensors(path, tensors, dtype, metadata=None):
    header = {}
    blobs = []
    off = 0
    for name, t in tensors:
        b = to_bytes(t, dtype)
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    if metadata:
        header["__metadata__"] = {k: str(v) for k, v in metadata.items()}
    hjson = json.dumps(header, separators=(",", ":")).encode()
    hjson += b" " * (-len(hjson) % 8)
    write_atomic(path, [struct.pack("<Q", len(hjson)), hjson] + blobs)


def write_atomic(path, chunks):
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            for c in chunks:
                f.write(c)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def hf_config(cfg, dtype):
    c = {"architectures": ["LlamaForCausalLM"], "model_type": "llama"}
    c.update({k: cfg[k] for k in ("hidden_size", "intermediate_size", "num_hidden_layers",
                                  "num_attention_heads", "num_key_value_heads", "rms_norm_eps",
                                  "rope_theta", "vocab_size", "max_position_embeddings",
                                  "tie_word_embeddings")})
    c.update({"head_dim": cfg["hidden_size"] // cfg["num_attention_heads"], "hidden_act": "silu",
              "attention_bias": False, "mlp_bias": False, "rope_scaling": None,
              "initializer_range": 0.02, "torch_dtype": DTYPES[dtype][1],
              "bos_token_id": None, "eos_token_id": None})
    return c


# --------------------------------------------------------------------------------------------
# Training and evaluation


@torch.no_grad()
def heldout_bpb(model, held, nbytes, window):
    data = torch.tensor(list(held[:nbytes - nbytes % window]), dtype=torch.long).view(-1, window)
    total, count = 0.0, 0
    for i in range(0, data.shape[0], 16):
        x = data[i:i + 16]
        logp = torch.log_softmax(model(x[:, :-1]).float(), dim=-1)
        nll = -logp.gather(-1, x[:, 1:, None]).squeeze(-1)
        total += nll.double().sum().item()
        count += nll.numel()
    return total / count / math.log(2), count


def lr_at(step, steps, lr, warmup):
    if step < warmup:
        return lr * (step + 1) / warmup
    t = (step - warmup) / max(1, steps - warmup)
    return lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))


def save_checkpoint(path, state):
    """torch.save to a temporary file in the same folder, then rename: a kill loses nothing."""
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=d, prefix="tmp-", suffix=".pt")
    os.close(fd)
    try:
        torch.save(state, tmp)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def train(name, cfg, train_ids, args, log):
    torch.manual_seed(args.seed + SEED_OFFSET[name][0])
    gen = torch.Generator().manual_seed(args.seed * 1000 + SEED_OFFSET[name][1])
    model = Llama(cfg).to(args.device)
    steps = getattr(args, name + "_steps")
    lr = getattr(args, name + "_lr")
    decay = [p for p in model.parameters() if p.dim() == 2]
    keep = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": keep, "weight_decay": 0.0}],
                            lr=lr, betas=(0.9, 0.95), eps=1e-8)
    T = args.seq_len
    n = train_ids.numel() - T - 1
    t0, c0 = time.time(), time.process_time()
    ema = None
    first = 0
    ckpt = os.path.join(args.checkpoint, name + ".pt") if args.checkpoint else None
    if ckpt and os.path.exists(ckpt):
        st = torch.load(ckpt, map_location=args.device)
        if st["steps"] != steps or st["cfg"] != cfg:
            fail(65, "%s: checkpoint of another run (steps or model shape differ)" % ckpt)
        model.load_state_dict(st["model"])
        opt.load_state_dict(st["opt"])  # map_location below keeps tensors on args.device
        gen.set_state(st["gen"].cpu())
        first, ema = st["step"], st["ema"]
        t0 -= st["wall"]
        c0 -= st["cpu"]
        log("%s: resumed from %s at step %d" % (name, ckpt, first))
    done = steps
    for step in range(first, steps):
        if args.max_seconds and time.time() - t0 > args.max_seconds:
            done = step
            log("%s: --max-seconds %g reached after %d of %d steps; stopping here" % (
                name, args.max_seconds, step, steps))
            break
        for g in opt.param_groups:
            g["lr"] = lr_at(step, steps, lr, args.warmup)
        starts = torch.randint(0, n, (args.batch,), generator=gen)
        idx = starts[:, None] + torch.arange(T + 1)[None, :]
        batch = train_ids[idx].to(args.device)
        logits = model(batch[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), batch[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        ema = loss.item() if ema is None else 0.95 * ema + 0.05 * loss.item()
        if ckpt and ((step + 1) % args.checkpoint_every == 0 or step == steps - 1):
            save_checkpoint(ckpt, {"steps": steps, "cfg": cfg, "step": step + 1, "ema": ema,
                                   "model": model.state_dict(), "opt": opt.state_dict(),
                                   "gen": gen.get_state(), "wall": time.time() - t0,
                                   "cpu": time.process_time() - c0})
        if step % args.log_every == 0 or step == steps - 1:
            log("%s step %d/%d loss %.4f (%.3f bits/byte) lr %.2e %.0fs wall %.0fs cpu" % (
                name, step, steps, ema, ema / math.log(2), opt.param_groups[0]["lr"],
                time.time() - t0, time.process_time() - c0))
    args.steps_done[name] = done
    return model, time.time() - t0, time.process_time() - c0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="example: nice -n 19 /usr/bin/python3 "
                                        "examples/train_pair.py --out data/models "
                                        "--heldout data/heldout.txt")
    ap.add_argument("--out", required=True, help="directory for draft/, target/, metrics.json")
    ap.add_argument("--text", help="KJV text file (default: dump it with `bible`)")
    ap.add_argument("--heldout", help="also write the held-out text to this file")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    ap.add_argument("--seq-len", type=int, default=256, help="training window in bytes")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--draft-steps", type=int, default=650)
    ap.add_argument("--target-steps", type=int, default=1000)
    ap.add_argument("--draft-lr", type=float, default=3e-3)
    ap.add_argument("--target-lr", type=float, default=2e-3)
    ap.add_argument("--large-steps", type=int, default=1200)
    ap.add_argument("--large-lr", type=float, default=1e-3)
    ap.add_argument("--checkpoint", metavar="DIR",
                    help="save <DIR>/<model>.pt every --checkpoint-every steps and resume from it")
    ap.add_argument("--checkpoint-every", type=int, default=20)
    ap.add_argument("--max-seconds", type=float, default=0,
                    help="stop training after this much wall time (0: no limit) and write the "
                         "model of the steps done; metrics record them")
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--dtype", choices=["F32", "F16", "BF16"], default="F16")
    ap.add_argument("--max-position", type=int, default=1024,
                    help="max_position_embeddings written to config.json")
    ap.add_argument("--eval-bytes", type=int, default=16384)
    ap.add_argument("--eval-window", type=int, default=256)
    ap.add_argument("--only", choices=["draft", "target", "large"],
                    help="train one model only (large: only when named here)")
    ap.add_argument("--log-every", type=int, default=50)
    ap.add_argument("--device", default="cpu",
                    help="torch device to train on (default cpu; 'cuda' where a GPU is lent: "
                         "same script and data order, but not bit-identical to a CPU run)")
    def usage_error(msg):
        ap.print_usage(sys.stderr)
        fail(64, msg)

    ap.error = usage_error
    args = ap.parse_args()
    args.steps_done = {}

    torch.set_num_threads(args.threads)
    if args.device.startswith("cuda"):
        # deterministic cuBLAS needs a fixed workspace (PyTorch's reproducibility notes)
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True, warn_only=args.device != "cpu")
    names = [args.only] if args.only else ["draft", "target"]
    for d in [args.out] + [os.path.join(args.out, n) for n in names] + (
            [args.checkpoint] if args.checkpoint else []):
        try:
            os.makedirs(d, exist_ok=True)
        except OSError as e:
            fail(73, "%s: cannot create: %s" % (d, e.strerror))

    def log(msg):
        print(msg, flush=True)

    text = load_text(args.text)
    split = split_text(text)
    held = text[split:]
    sha = hashlib.sha256(text).hexdigest()
    log("text: %d bytes, sha256 %s; train [0, %d), held out [%d, %d) = %d bytes" % (
        len(text), sha, split, split, len(text), len(held)))
    if args.heldout:
        write_atomic(args.heldout, [held])
    train_ids = torch.tensor(np.frombuffer(text[:split], dtype=np.uint8).astype(np.int64))

    mpath = os.path.join(args.out, "metrics.json")
    metrics = {}
    if os.path.exists(mpath):
        with open(mpath) as f:
            metrics = json.load(f)
    metrics.update({
        "format": "sequoia-train-metrics", "version": 1,
        "text": {"source": "Debian bible-kjv-text via `bible -f Gen1:1-Rev22:21`, verse "
                           "references removed, one verse per line",
                 "bytes": len(text), "sha256": sha, "train_bytes": [0, split],
                 "heldout_bytes": [split, len(text)],
                 "heldout_sha256": hashlib.sha256(held).hexdigest()},
        "eval": {"slice": "first eval_bytes of the held-out text, non-overlapping windows of "
                          "eval_window bytes from position 0; every byte but a window's first "
                          "is predicted", "eval_bytes": args.eval_bytes,
                 "eval_window": args.eval_window},
    })
    metrics.setdefault("models", {})

    for name in names:
        cfg = dict(SIZES[name], rms_norm_eps=1e-5, rope_theta=10000.0, vocab_size=VOCAB,
                   max_position_embeddings=args.max_position)
        model, secs, cpu = train(name, cfg, train_ids, args, log)
        model = model.cpu()   # evaluation and writing happen on the CPU, whatever trained
        # Evaluate what a reader of the file gets: weights rounded to the stored dtype.
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(round_to_dtype(p, args.dtype))
        bpb, count = heldout_bpb(model, held, args.eval_bytes, args.eval_window)
        nparams = count_params(model)
        log("%s: %d parameters, %.0f s wall, %.0f s cpu, held-out %.4f bits/byte over %d bytes" % (
            name, nparams, secs, cpu, bpb, count))
        d = os.path.join(args.out, name)
        write_safetensors(os.path.join(d, "model.safetensors"), model.hf_tensors(), args.dtype,
                          {"format": "pt"})
        write_atomic(os.path.join(d, "config.json"),
                     [(json.dumps(hf_config(cfg, args.dtype), indent=2) + "\n").encode()])
        if os.path.exists(mpath):  # another process may have trained the other model meanwhile
            with open(mpath) as f:
                metrics["models"] = json.load(f).get("models", {})
        metrics["models"][name] = {
            "parameters": nparams, "dtype": args.dtype, "train_seconds": round(secs, 1),
            "train_cpu_seconds": round(cpu, 1),
            "threads": args.threads, "steps": args.steps_done.get(name, getattr(args, name + "_steps")),
            "planned_steps": getattr(args, name + "_steps"),
            "lr": getattr(args, name + "_lr"), "batch": args.batch, "seq_len": args.seq_len,
            "seed": args.seed, "device": args.device, "command": "python3 examples/train_pair.py " + " ".join(sys.argv[1:]),
            "heldout_bits_per_byte": round(bpb, 6),
            "heldout_predicted_bytes": count}
        write_atomic(mpath, [(json.dumps(metrics, indent=2) + "\n").encode()])


if __name__ == "__main__":
    main()
