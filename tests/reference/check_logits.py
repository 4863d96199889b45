#!/usr/bin/env python3
"""Compares logits dumps against the committed reference logits (tests/data/families/).

    python3 tests/reference/check_logits.py DUMP_DIR [--data tests/data/families]
            [--against numpy|llamacpp] [--tol-f32 T] [--tol-bf16 T] [--only VARIANT ...]
            [--require-all] [-v]
    python3 tests/reference/check_logits.py --verify-checkpoints CKPT_DIR [--data ...]

DUMP_DIR holds one file per checked checkpoint, named after the checkpoint directory that
make_checkpoints.py wrote (<variant>-<dtype>, e.g. qwen3-bf16):
  * <variant>-<dtype>.f32: n_tokens x vocab little-endian float32, row i = the logits after
    token i of <variant>.tokens (positions 0..i, causal), or
  * <variant>-<dtype>.txt: the same as text, one row per line, values separated by blanks.
Either may also hold n_tokens - 1 rows (the positions that have a next token, as
`sequoia-run dump` writes target/logits); the last row is then not compared.
A variant/dtype without a dump is skipped (counted; listed with -v), unless --require-all.

A dump passes when max_ij |dump - ref| <= tol * max(1, max_ij |ref|) (one scale per file: the
logits of a tiny model are O(1..10)). The default tolerances (README.md, "Tolerances") are for
a float32 computation (weights of any stored dtype converted exactly): against numpy 1e-4 for
f32 and bf16 checkpoints alike; against llama.cpp 1e-3 (f32; its CPU GELU goes through an fp16
table) and 2e-2 (bf16; it rounds activations to bf16). Pass --tol-bf16 3e-2 for a runtime that
rounds activations to bf16 itself.
The argmax of every row must also agree wherever the reference's top two differ by more than
the tolerance. Exit status 0: all compared dumps pass; 1: a mismatch; 65: a malformed dump or
manifest; 66: missing directory. Pure Python (no numpy), so any python3 runs it.

--verify-checkpoints recomputes the SHA-256 of CKPT_DIR/<variant>-<dtype>/{config.json,
model.safetensors} (as written by make_checkpoints.py) against the manifest: the generated
checkpoints are the ones the reference logits were computed from.
"""
import argparse
import hashlib
import json
import os
import sys
from array import array

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_DATA = os.path.normpath(os.path.join(HERE, "..", "data", "families"))
# (against, dtype) -> tolerance; README.md "Tolerances" says where each comes from
DEFAULT_TOL = {("numpy", "f32"): 1e-4, ("numpy", "bf16"): 1e-4,
               ("llamacpp", "f32"): 1e-3, ("llamacpp", "bf16"): 2e-2}


def read_f32(path, n, vocab=None):
    """n floats; with vocab, also n - vocab (a dump without the last row)."""
    a = array("f")
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) != 4 * n and not (vocab and len(raw) == 4 * (n - vocab)):
        raise ValueError("%s: %d bytes, expected %d (n_tokens x vocab float32)"
                         % (path, len(raw), 4 * n))
    a.frombytes(raw)
    if sys.byteorder != "little":
        a.byteswap()
    return a


def read_txt(path, n, vocab=None):
    vals = []
    with open(path) as f:
        for ln, line in enumerate(f, 1):
            for tok in line.split():
                try:
                    vals.append(float(tok))
                except ValueError:
                    raise ValueError("%s:%d: %r is not a number" % (path, ln, tok))
    if len(vals) != n and not (vocab and len(vals) == n - vocab):
        raise ValueError("%s: %d values, expected %d (n_tokens x vocab)" % (path, len(vals), n))
    return vals


def compare(dump, ref, rows, vocab, tol):
    scale = max(1.0, max(abs(x) for x in ref))
    worst, at = 0.0, 0
    for i, (d, r) in enumerate(zip(dump, ref)):
        e = abs(d - r)
        if not e <= worst:          # also catches NaN
            worst, at = (e if e == e else float("inf")), i
    bad_argmax = []
    lim = tol * scale
    for r in range(rows):
        row_r = ref[r * vocab:(r + 1) * vocab]
        row_d = dump[r * vocab:(r + 1) * vocab]
        order = sorted(range(vocab), key=lambda j: -row_r[j])
        if row_r[order[0]] - row_r[order[1]] > 2 * lim:
            jd = max(range(vocab), key=lambda j: row_d[j])
            if jd != order[0]:
                bad_argmax.append(r)
    return worst, at, scale, bad_argmax


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dumps", nargs="?")
    ap.add_argument("--data", default=DEFAULT_DATA)
    ap.add_argument("--against", choices=("numpy", "llamacpp"), default="numpy")
    ap.add_argument("--tol-f32", type=float)
    ap.add_argument("--tol-bf16", type=float)
    ap.add_argument("--only", action="append", default=[])
    ap.add_argument("--require-all", action="store_true")
    ap.add_argument("-v", "--verbose", action="store_true", help="list the skipped files")
    ap.add_argument("--verify-checkpoints", metavar="CKPT_DIR")
    a = ap.parse_args(argv)
    man_path = os.path.join(a.data, "manifest.json")
    try:
        with open(man_path) as f:
            man = json.load(f)
        variants = man["variants"]
    except OSError as e:
        print("check_logits: %s: %s" % (man_path, e.strerror), file=sys.stderr)
        return 66
    except (ValueError, KeyError) as e:
        print("check_logits: %s: malformed manifest (%s)" % (man_path, e), file=sys.stderr)
        return 65
    if a.only:
        variants = [v for v in variants if v["name"] in a.only]

    if a.verify_checkpoints:
        bad = 0
        for v in variants:
            for dt, de in sorted(v["dtypes"].items()):
                d = os.path.join(a.verify_checkpoints, "%s-%s" % (v["name"], dt))
                for fn, key in (("config.json", "config_sha256"),
                                ("model.safetensors", "safetensors_sha256")):
                    p = os.path.join(d, fn)
                    if not os.path.exists(p):
                        print("MISSING %s" % p)
                        bad += 1
                    elif sha256(p) != de[key]:
                        print("DIFFERS %s: sha256 %s, manifest %s" % (p, sha256(p), de[key]))
                        bad += 1
        print("checkpoints: %s" % ("all match the manifest" if not bad else "%d problems" % bad))
        return 1 if bad else 0

    if not a.dumps:
        ap.error("DUMP_DIR is required")
    if not os.path.isdir(a.dumps):
        print("check_logits: %s: no such directory" % a.dumps, file=sys.stderr)
        return 66
    failures, compared, skipped = 0, 0, []
    for v in variants:
        rows, vocab = v["n_tokens"], v["vocab"]
        for dt, de in sorted(v["dtypes"].items()):
            name = "%s-%s" % (v["name"], dt)
            if a.against not in de:
                skipped.append(name + " (no %s reference: %s)" % (
                    a.against, v.get("llama_cpp_absent", "not generated")))
                continue
            fb = os.path.join(a.dumps, name + ".f32")
            ft = os.path.join(a.dumps, name + ".txt")
            try:
                if os.path.exists(fb):
                    dump = read_f32(fb, rows * vocab, vocab)
                elif os.path.exists(ft):
                    dump = read_txt(ft, rows * vocab, vocab)
                else:
                    skipped.append(name + " (no dump)")
                    continue
                ref = read_f32(os.path.join(a.data, de[a.against]), rows * vocab)
            except (OSError, ValueError) as e:
                print("check_logits: %s" % e, file=sys.stderr)
                return 65
            n_rows = len(dump) // vocab        # rows - 1: a corpus dump's rows
            ref = ref[:n_rows * vocab]
            tol = a.tol_f32 if dt == "f32" else a.tol_bf16
            if tol is None:
                tol = DEFAULT_TOL[(a.against, dt)]
            worst, at, scale, bad_argmax = compare(dump, ref, n_rows, vocab, tol)
            ok = worst <= tol * scale and not bad_argmax
            compared += 1
            failures += not ok
            print("%s %-24s max |diff| %.3g (rel %.3g, tol %.3g) at row %d col %d%s" % (
                "ok  " if ok else "FAIL", name, worst, worst / scale, tol, at // vocab,
                at % vocab, "; argmax differs in rows %s" % bad_argmax if bad_argmax else ""))
    for s in skipped:
        if a.verbose or "(no dump)" not in s:
            print("skip %s" % s)
    if a.require_all and any("(no dump)" in s for s in skipped):
        print("check_logits: --require-all: dumps missing", file=sys.stderr)
        return 1
    print("%d compared, %d failed, %d skipped" % (compared, failures, len(skipped)))
    return 1 if failures or compared == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
