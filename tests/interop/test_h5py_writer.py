#!/usr/bin/env python3
"""Interop: corpora written by examples/dump_corpus.py (h5py + numpy) load in the C reader.

Writes dense float16, dense float32 and sparse top-K corpora with the Python writer, checks the
HDF5 layout with h5py, then streams each file through sq-corpus-check (the C reader) and
compares every row's argmax and logit sums with what numpy computes from the arrays written.
Also: the module imports without torch/transformers, the CLI's --synthetic mode, atomic output,
and a NaN written by h5py reported by the C reader with its dataset and first row.

Run by meson (suite planner) with SQ_SOURCE_ROOT and SQ_CORPUS_CHECK_BIN set. Exits 77 (skip)
when h5py or numpy is missing.
"""

import os
import subprocess
import sys
import tempfile

try:
    import h5py
    import numpy as np
except ImportError as e:  # pragma: no cover
    print(f"skip: {e}")
    sys.exit(77)

ROOT = os.environ.get("SQ_SOURCE_ROOT", os.path.join(os.path.dirname(__file__), "..", ".."))
CHECK = os.environ.get("SQ_CORPUS_CHECK_BIN")
sys.path.insert(0, os.path.join(ROOT, "examples"))
import dump_corpus  # noqa: E402

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print(f"not ok: {what}")


def run_check(path, block=None):
    argv = [CHECK, path] + ([str(block)] if block else [])
    p = subprocess.run(argv, capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def parse(out):
    head, rows = {}, []
    for line in out.splitlines():
        k, _, v = line.partition(" ")
        if k == "row":
            f = v.split()
            rows.append((int(f[0]), int(f[1]), int(f[2]), float(f[3]), float(f[4]), int(f[5])))
        else:
            head[k] = v
    return head, rows


def make_sequences(rng, lens, vocab, with_tokens):
    seqs = []
    for n in lens:
        t = (rng.standard_normal((n, vocab)) * 4).astype(np.float32)
        d = (t + rng.standard_normal((n, vocab))).astype(np.float32)
        tok = rng.integers(0, vocab, n).astype(np.int32) if with_tokens else None
        seqs.append((t, d, tok))
    return seqs


def expected_rows(seqs, vocab, dtype, topk):
    """What the C reader must see: values as stored (float16 rounding, or top-K with the rest
    at -inf), then argmax and sum of finite values in double."""
    out = []
    r = 0
    for t, d, tok in seqs:
        stats = []
        for x in (t, d):
            if topk:
                keep = np.full(x.shape, -np.inf)
                idx = np.argsort(-x, axis=1, kind="stable")[:, :topk]
                np.put_along_axis(keep, idx, np.take_along_axis(x, idx, axis=1), axis=1)
                y = keep
            else:
                y = x.astype(dtype).astype(np.float64)
            fin = np.where(np.isfinite(y), y, 0.0)
            stats.append((np.argmax(y, axis=1), fin.sum(axis=1)))
        for i in range(t.shape[0]):
            out.append((r, int(stats[0][0][i]), int(stats[1][0][i]), float(stats[0][1][i]),
                        float(stats[1][1][i]), int(tok[i]) if tok is not None else -1))
            r += 1
    return out


def compare(name, path, seqs, vocab, dtype, topk, block=None):
    rc, out, err = run_check(path, block)
    check(rc == 0, f"{name}: sq-corpus-check exit {rc}: {err.strip()}")
    if rc != 0:
        return
    head, rows = parse(out)
    lens = [s[0].shape[0] for s in seqs]
    n = sum(lens)
    check(head.get("rows") == str(n), f"{name}: rows {head.get('rows')} != {n}")
    check(head.get("vocab") == str(vocab), f"{name}: vocab {head.get('vocab')}")
    check(head.get("sparse") == ("1" if topk else "0"), f"{name}: sparse flag")
    check(head.get("topk") == str(topk), f"{name}: topk {head.get('topk')}")
    check(head.get("sequences") == str(len(lens)), f"{name}: sequences {head.get('sequences')}")
    offs = " ".join(str(x) for x in np.concatenate([[0], np.cumsum(lens)]))
    check(head.get("offsets") == offs, f"{name}: offsets {head.get('offsets')} != {offs}")
    check(head.get("draft") == "py-draft" and head.get("target") == "py-target", f"{name}: names")
    want = expected_rows(seqs, vocab, dtype, topk)
    check(len(rows) == len(want), f"{name}: {len(rows)} rows printed")
    bad = 0
    for got, exp in zip(rows, want):
        ok = (got[0] == exp[0] and got[1] == exp[1] and got[2] == exp[2] and got[5] == exp[5]
              and abs(got[3] - exp[3]) <= 1e-9 * max(1.0, abs(exp[3])) + 1e-6
              and abs(got[4] - exp[4]) <= 1e-9 * max(1.0, abs(exp[4])) + 1e-6)
        if not ok and bad < 3:
            print(f"  {name}: row differs: C {got} numpy {exp}")
        bad += not ok
    check(bad == 0, f"{name}: {bad} rows differ between the C reader and numpy")


def main():
    check("torch" not in sys.modules and "transformers" not in sys.modules,
          "importing dump_corpus must not import torch or transformers")
    check(CHECK and os.access(CHECK, os.X_OK), "SQ_CORPUS_CHECK_BIN is set and executable")
    if failures:
        return 1
    rng = np.random.default_rng(7)
    tmp = tempfile.mkdtemp(prefix="sq-interop-")
    vocab = 50
    cases = [
        ("dense-f16", "float16", 0, [13, 1, 30], True),
        ("dense-f32", "float32", 0, [25, 20], False),
        ("sparse-k5", "float32", 5, [9, 17, 4], True),
    ]
    for name, dtype, topk, lens, with_tokens in cases:
        path = os.path.join(tmp, name + ".h5")
        seqs = make_sequences(rng, lens, vocab, with_tokens)
        n = dump_corpus.write_corpus(path, iter(seqs), vocab, draft="py-draft", target="py-target",
                                     dtype=dtype, topk=topk, chunk_rows=8)
        check(n == sum(lens), f"{name}: write_corpus returned {n}")
        with h5py.File(path, "r") as f:
            check(f.attrs["format"] == "sequoia-corpus", f"{name}: format attribute")
            check(int(f.attrs["version"]) == 1, f"{name}: version attribute")
            check(int(f.attrs["vocab_size"]) == vocab, f"{name}: vocab_size attribute")
            for m in ("target", "draft"):
                ds = f[f"/{m}/topk_logits" if topk else f"/{m}/logits"]
                check(ds.shape == (sum(lens), topk or vocab), f"{name}: {ds.name} shape {ds.shape}")
                check(ds.chunks is not None and ds.chunks[0] == 8, f"{name}: {ds.name} chunked")
                check(ds.compression == "gzip", f"{name}: {ds.name} compressed")
                check(ds.dtype == np.dtype(dtype if not topk else "float32"),
                      f"{name}: {ds.name} dtype {ds.dtype}")
            check(("tokens" in f) == with_tokens, f"{name}: /tokens presence")
        for block in (None, 1, 7, 100):
            compare(f"{name} block {block}", path, seqs, vocab, dtype, topk, block)

    # The command-line synthetic mode (what sequoia-accept's tests call).
    out = os.path.join(tmp, "cli.h5")
    p = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "dump_corpus.py"),
                        "--synthetic", out, "--rows", "300", "--vocab", "32", "--seed", "3",
                        "--sequences", "3", "--quiet"], capture_output=True, text=True)
    check(p.returncode == 0, f"--synthetic exit {p.returncode}: {p.stderr.strip()}")
    rc, text, err = run_check(out)
    check(rc == 0, f"--synthetic file: sq-corpus-check exit {rc}: {err.strip()}")
    head, rows = parse(text)
    check(head.get("rows") == "300" and head.get("sequences") == "3" and head.get("tokens") == "1",
          f"--synthetic file header {head}")
    seqs = list(dump_corpus.synthetic_sequences(300, 32, 3, 3))
    agree = sum(r[1] == r[2] for r in rows) / max(1, len(rows))
    check(0.2 < agree < 1.0, f"--synthetic: draft and target argmax agree on {agree:.2f} of rows")
    check(rows and rows[17][5] == int(np.concatenate([s[2] for s in seqs])[17]),
          "--synthetic is deterministic for a seed")

    # Atomic output: an exception inside the writer leaves no file at all.
    before = set(os.listdir(tmp))
    try:
        with dump_corpus.CorpusWriter(os.path.join(tmp, "aborted.h5"), vocab) as w:
            w.append(*make_sequences(rng, [3], vocab, False)[0][:2])
            raise RuntimeError("interrupted")
    except RuntimeError:
        pass
    check(set(os.listdir(tmp)) == before, "an aborted write leaves no file")
    bad = np.zeros((2, vocab), dtype=np.float32)
    bad[1, 3] = np.nan
    try:
        dump_corpus.write_corpus(os.path.join(tmp, "nan.h5"), [(bad, bad, None)], vocab)
        check(False, "write_corpus accepts NaN")
    except ValueError as e:
        check("row 1" in str(e), f"write_corpus NaN message: {e}")
    check(set(os.listdir(tmp)) == before, "a refused write leaves no file")

    # A NaN written behind the writer's back: the C reader names the dataset and first bad row.
    path = os.path.join(tmp, "nan-h5py.h5")
    with h5py.File(path, "w") as f:
        f.attrs["format"] = "sequoia-corpus"
        f.attrs["version"] = 1
        f.attrs["vocab_size"] = 8
        f.attrs["draft"] = "d"
        f.attrs["target"] = "t"
        t = np.zeros((10, 8), dtype=np.float16)
        t[4, 2] = np.nan
        t[6, 0] = np.inf
        f.create_dataset("/target/logits", data=t, chunks=(3, 8), compression="gzip")
        f.create_dataset("/draft/logits", data=np.zeros((10, 8), dtype=np.float16))
    rc, _, err = run_check(path, 2)
    check(rc == 65, f"NaN file: exit {rc}")
    check(path in err and "/target/logits: row 4" in err, f"NaN file message: {err.strip()}")

    for name in os.listdir(tmp):
        os.unlink(os.path.join(tmp, name))
    os.rmdir(tmp)
    print("ok" if not failures else f"{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
