#!/usr/bin/env python3
"""The official Sequoia acceptance estimators, run on one of our corpora (issue 27, item 4).

    tests/bench/official_accept.py OFFICIAL_CHECKOUT CORPUS [CORPUS ...]
        [--estimator fast_test|test_accept] [-T 0.6] [-w 16] [--threads N] [--seed 17]
        [--rows N] [-o OUT.json]
    tests/bench/official_accept.py --compare OURS.json OFFICIAL.json
    tests/bench/official_accept.py --head N CORPUS OUT.h5

OFFICIAL_CHECKOUT is a checkout of https://github.com/Infini-AI-Lab/Sequoia (not shipped with
this repository; docs/benchmarks.md says how to get it). The estimators' code is imported from
that path, never copied here; what this file adds is a thin adapter that replaces the two
language models by the logits stored in the corpus:

fast_test (default): `evaluate()` of tests/fast_test.py, the README's "statically obtain the
    acceptance rate vector". Per position: one draft draw, then W-1 draws without replacement
    (the drawn token's logit set to -inf, softmax again, multinomial), each with the
    Rao-Blackwellised acceptance a_k = (1 - sum_{j<k} a_j) min(1, R(x_k)/Q'(x_k)) and the
    residual update of R: the same estimator as sequoia-accept --mode stochastic. fast_test.py
    is a script (its top level parses arguments and loads the models), so the adapter takes the
    source of its two functions `get_residual` and `evaluate` from the file with `ast` and
    executes only those two definitions, unchanged, with torch and softmax in scope and tqdm
    (its progress bar) an identity.
    The models are objects whose call returns the stored logits of one sequence, after 128 rows
    of padding: evaluate() skips the first 128 positions of every example (the prompt). The
    padding's cost (one evaluate() call on 128 padding rows alone, measured here) is reported
    and subtracted from the CPU time.
test_accept: `SpecTreeTest` of Tree/SpecTree.py, what tests/test_accept.py --ALG stochastic
    runs (the README's "how to obtain the acceptance rate vector"): a one-level tree of W
    children drawn without replacement from Q (Gumbel top-k over (W+1) x V uniforms), verified
    with one accept/reject coin per child; the rank of the accepted child (or none) is counted.
    Tree/SpecTree.py imports Engine.Engine (Llama models, transformers, CUDA kernels) only for
    type annotations; when it cannot be imported the adapter puts a module with two empty
    classes of those names in sys.modules. The engines are stubs: the draft's first inference
    returns the stored draft row, its graph_inference zeros for the W children, the target's
    inference the stored target row for the root and zeros for the W children; gather_kv and
    clear_kv do nothing. Prefix: one token; max_length W + 1 (the smallest the tree allows;
    test_accept.py uses 256 + W, which only costs more); device cpu.

Both get float32 logits (float16 corpora are widened exactly; torch 1.13 has no float16 softmax
on the CPU) and top-p 1 (fast_test applies top-p to the target only, ours to both models, so the
definitions agree only at top-p 1). Temperature, width and the corpus positions are the same as
sequoia-accept's.

Measured: the process CPU time (time.process_time: every thread of the process) and the wall
time of the estimator's calls only; reading the corpus (h5py) is timed apart and not counted,
nor is starting Python and torch. Prints one JSON object (also to -o): p (per rank), stderr
(sequence-level cluster formula, as sequoia-accept), reject, positions, sequences, cpu_s,
wall_s, positions_per_cpu_s, read_cpu_s, pad_cpu_s (fast_test), threads, torch version, and the
estimator's name. Needs numpy, h5py and torch (Debian: python3-torch python3-numpy python3-h5py).

--compare: whether a sequoia-accept curve and this script's output on the same rows agree
(see compare()); --head: the first N rows of a corpus as a corpus, for sequoia-accept to read
the rows that --rows N gave the official estimator. Used by tests/bench/accept-cpu.sh.
"""
import argparse
import ast
import json
import os
import sys
import time
import types

import h5py
import numpy as np


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("checkout")
    ap.add_argument("corpora", nargs="+")
    ap.add_argument("--estimator", choices=["fast_test", "test_accept"], default="fast_test")
    ap.add_argument("-T", "--temperature", type=float, default=0.6)
    ap.add_argument("-w", "--width", type=int, default=16)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=17, help="torch.manual_seed (the official default)")
    ap.add_argument("--rows", type=int, default=0, help="first N rows of each corpus (0: all)")
    ap.add_argument("-o", "--output")
    a = ap.parse_args()
    if a.temperature <= 0 or a.width < 1 or a.threads < 1:
        ap.error("need temperature > 0, width >= 1, threads >= 1")
    return a


def die(msg, code):
    sys.stderr.write("official_accept.py: %s\n" % msg)
    sys.exit(code)


def read_sequences(path, rows):
    """Yields (target, draft) float32 arrays per sequence of the corpus, the first `rows` rows
    (0: all). The CPU time spent here is not the estimator's."""
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        die("%s: cannot open as HDF5: %s" % (path, e), 66 if not os.path.exists(path) else 65)
    with f:
        for m in ("target", "draft"):
            if m + "/logits" not in f:
                die("%s: /%s/logits: missing (only dense corpora are supported)" % (path, m), 65)
        t, d = f["target/logits"], f["draft/logits"]
        n = t.shape[0] if rows <= 0 else min(rows, t.shape[0])
        offs = [0, t.shape[0]]
        if "seq_offsets" in f:
            offs = [int(x) for x in f["seq_offsets"][...]]
        for s in range(len(offs) - 1):
            a, b = offs[s], min(offs[s + 1], n)
            if a >= b:
                break
            yield (np.asarray(t[a:b], dtype=np.float32), np.asarray(d[a:b], dtype=np.float32))


def load_fast_test(checkout, torch, softmax):
    src_path = os.path.join(checkout, "tests", "fast_test.py")
    try:
        with open(src_path) as fh:
            src = fh.read()
    except OSError as e:
        die("%s: %s" % (src_path, e.strerror), 66)
    tree = ast.parse(src, src_path)
    keep = [n for n in tree.body
            if isinstance(n, ast.FunctionDef) and n.name in ("get_residual", "evaluate")]
    if sorted(n.name for n in keep) != ["evaluate", "get_residual"]:
        die("%s: no functions get_residual and evaluate (another version?)" % src_path, 65)
    mod = ast.Module(body=keep, type_ignores=[])
    def tqdm(it, total=None):  # evaluate()'s progress bar: none
        return it
    ns = {"torch": torch, "softmax": softmax, "tqdm": tqdm,
          "LlamaForCausalLM": object, "DataLoader": object, "__name__": "fast_test"}
    exec(compile(mod, src_path, "exec"), ns)
    return ns["evaluate"]


class _Logits:
    """A model that returns stored logits: `model(**batch).logits`."""

    def __init__(self):
        self.logits = None

    def __call__(self, **kw):
        return types.SimpleNamespace(logits=self.logits)


PROMPT = 128  # fast_test.evaluate() starts at position 128 of every example


def run_fast_test(args, torch, seqs_iter):
    from torch.nn.functional import softmax
    evaluate = load_fast_test(args.checkout, torch, softmax)
    W, T = args.width, args.temperature
    tm, dm = _Logits(), _Logits()
    sums, units, cpu, wall, calls, read_cpu = [], [], 0.0, 0.0, 0, 0.0
    pad = None
    r0 = time.process_time()
    for t, d in seqs_iter:
        n, V = t.shape
        if pad is None:
            pad = np.zeros((PROMPT, V), dtype=np.float32)
        tt = torch.from_numpy(np.concatenate([pad, t]))[None]
        dd = torch.from_numpy(np.concatenate([pad, d]))[None]
        labels = torch.ones((1, PROMPT + n), dtype=torch.long)  # no position is skipped
        batch = {"input_ids": labels, "labels": labels}
        tm.logits, dm.logits = tt, dd
        read_cpu += time.process_time() - r0
        c0, w0 = time.process_time(), time.monotonic()
        rate = evaluate(tm, dm, [batch], k=W, T=T, top_p=1.0, draft_top_p=1.1)
        cpu += time.process_time() - c0
        wall += time.monotonic() - w0
        calls += 1
        sums.append(rate.double().numpy() * n)
        units.append(n)
        r0 = time.process_time()
    # the padding's cost: evaluate() on the 128 padding rows alone (no position counted)
    V = pad.shape[1]
    tm.logits = dm.logits = torch.from_numpy(pad)[None]
    lab = torch.ones((1, PROMPT), dtype=torch.long)
    reps = 5
    c0 = time.process_time()
    for _ in range(reps):
        evaluate(tm, dm, [{"input_ids": lab, "labels": lab}], k=W, T=T, top_p=1.0, draft_top_p=1.1)
    pad_cpu = (time.process_time() - c0) / reps * calls
    return np.array(sums), np.array(units, dtype=np.float64), cpu, wall, read_cpu, pad_cpu


def load_spectree(checkout):
    try:
        import Engine.Engine  # noqa: F401  (Llama models; needs transformers and CUDA kernels)
    except Exception:
        for k in [k for k in sys.modules if k == "Engine" or k.startswith("Engine.")]:
            del sys.modules[k]
        pkg = types.ModuleType("Engine")
        pkg.__path__ = []
        eng = types.ModuleType("Engine.Engine")
        eng.GraphInferenceEngine = type("GraphInferenceEngine", (), {})
        eng.GraphInferenceEngineTG = type("GraphInferenceEngineTG", (), {})
        pkg.Engine = eng
        sys.modules["Engine"] = pkg
        sys.modules["Engine.Engine"] = eng
    try:
        from Tree.SpecTree import SpecTreeTest
    except ImportError as e:
        die("%s: cannot import Tree.SpecTree: %s" % (checkout, e), 65)
    return SpecTreeTest


class _Engine:
    """A stub engine: `inference` returns the stored row at the last input position (the draft at
    the root, or the target at the root followed by zeros for the children), `graph_inference`
    zeros for the children."""

    def __init__(self, torch, max_length, V, W):
        self.engine = types.SimpleNamespace(max_length=max_length)
        self.dtype = torch.float16  # verify() casts the mask to it (test_accept.py's dtype)
        self.row = None
        self.out = {}  # reused output buffers by row count (the tree copies what it keeps)
        self.kids = torch.zeros((1, W, V))
        self.torch = torch

    def inference(self, input_ids, storage_ids, position_ids, attn_mask):
        # the prefix is one token, so row 0 is the root (SpecTreeTest reads the draft's last row
        # of a one-row call and the target's rows from ground_truth_len - 1 = 0 on)
        n = input_ids.shape[1]
        out = self.out.get(n)
        if out is None:
            out = self.out[n] = self.torch.zeros((1, n, self.row.shape[0]))
        out[0, 0] = self.row
        return out

    def graph_inference(self, input_ids, position_ids, attn_mask, storage_ids):
        return self.kids

    def gather_kv(self, idx):
        pass

    def clear_kv(self):
        pass


def run_test_accept(args, torch, seqs_iter):
    SpecTreeTest = load_spectree(args.checkout)
    W, T = args.width, args.temperature
    M = W + 1
    dtype = torch.float16
    draft = target = None
    sums, units, cpu, wall, read_cpu = [], [], 0.0, 0.0, 0.0
    prefix = torch.ones(1, dtype=torch.long)
    r0 = time.process_time()
    for t, d in seqs_iter:
        n, V = t.shape
        if draft is None:
            draft, target = _Engine(torch, M, V, W), _Engine(torch, M, V, W)
            attn_mask = torch.full((M, M), torch.finfo(dtype).min, dtype=dtype)
            sequence = torch.tensor(list(range(M))).long().unsqueeze(-1)
            new_tokens_buffer = torch.zeros(M).long()
            parents_buffer = torch.zeros(M).long()
            position_ids = torch.zeros(M).long()
        tt, dd = torch.from_numpy(t), torch.from_numpy(d)
        y = np.zeros(W + 1)
        read_cpu += time.process_time() - r0
        c0, w0 = time.process_time(), time.monotonic()
        for i in range(n):
            draft.row, target.row = dd[i], tt[i]
            attn_mask.fill_(torch.finfo(dtype).min)
            tree = SpecTreeTest(prefix=prefix, device="cpu", temperature=T, top_p=1.0,
                                draft_kv_len=0, target_kv_len=0, draft_model_engine=draft,
                                target_model_engine=target, max_length=M, attn_mask=attn_mask,
                                sequence=sequence, new_tokens_buffer=new_tokens_buffer,
                                parents_buffer=parents_buffer, position_ids=position_ids,
                                max_width=W)
            b = tree.verify(benchmark=True)[3]
            y[b] += 1  # b = -1 (every child rejected) lands in y[W]
        cpu += time.process_time() - c0
        wall += time.monotonic() - w0
        sums.append(y[:W])
        units.append(n)
        r0 = time.process_time()
    return np.array(sums), np.array(units, dtype=np.float64), cpu, wall, read_cpu, 0.0


def head(n, src, dst):
    """--head N SRC DST: the first N rows of a corpus, as a corpus (unfiltered, same dtype)."""
    with h5py.File(src, "r") as f, h5py.File(dst, "w") as g:
        for k, v in f.attrs.items():
            g.attrs[k] = v
        n = min(n, f["target/logits"].shape[0])
        for m in ("target", "draft"):
            g.create_dataset(m + "/logits", data=f[m + "/logits"][:n])
        if "tokens" in f:
            g.create_dataset("tokens", data=f["tokens"][:n])
        if "seq_offsets" in f:
            g.create_dataset("seq_offsets", data=[int(x) for x in f["seq_offsets"][...] if x < n] + [n])


def chi2_sf(x, df):
    """P(X > x) for X ~ chi-square(df), Wilson-Hilferty (enough for a verdict)."""
    import math
    if df <= 0:
        return 1.0
    z = ((x / df) ** (1.0 / 3) - (1 - 2.0 / (9 * df))) / math.sqrt(2.0 / (9 * df))
    return 0.5 * math.erfc(z / math.sqrt(2))


def t_sf(t, df):
    """P(X > t) for Student's t with df degrees of freedom (Simpson's rule on the density)."""
    import math
    t = abs(t)
    c = math.exp(math.lgamma((df + 1) / 2.0) - math.lgamma(df / 2.0)) / math.sqrt(df * math.pi)
    n = 2000
    h = t / n
    acc = 0.0
    for i in range(n + 1):
        f = c * (1 + (i * h) ** 2 / df) ** (-(df + 1) / 2.0)
        acc += f * (1 if i in (0, n) else 4 if i % 2 else 2)
    return max(0.0, 0.5 - acc * h / 3)


def compare(ours_path, theirs_path):
    """--compare OURS.json OFFICIAL.json: does sequoia-accept's curve (stochastic, same T and W,
    same rows) agree with the official estimator's? fast_test (Rao-Blackwellised, like ours):
    per rank z = (p_ours - p_theirs) / sqrt(se_ours^2 + se_theirs^2), from the sequence-level
    standard errors; both estimate from the same positions, so the difference's true spread is
    smaller and the test errs towards "agree" only by missing small differences. test_accept
    (one coin per position): Pearson's X^2 of its counts per rank (and reject) against N times
    our p, ranks pooled from the tail so that every expected count is >= 5; our p is nearly
    exact for these positions (8 samples), and the coins' spread given the positions is at
    most the multinomial's, so the X^2 is at most chi-square distributed. Verdict "agree" when
    the smallest per-rank p-value (z against Student's t with sequences - 1 degrees of freedom,
    the standard errors' own), times the number of ranks (Bonferroni), is above 0.001
    (fast_test), or when the X^2's p is above 0.001 (test_accept). Exit 0 either way."""
    with open(ours_path) as fh:
        o = json.load(fh)
    with open(theirs_path) as fh:
        t = json.load(fh)
    cs = [c for c in o["curves"] if c["mode"] == "stochastic"
          and abs(c["temperature"] - t["temperature"]) < 1e-9]
    if not cs:
        die("%s: no stochastic curve at T %g" % (ours_path, t["temperature"]), 65)
    c = cs[0]
    W = min(len(c["p"]), len(t["p"]))
    if c["positions"] != t["positions"]:
        die("%s has %d positions, %s %d" % (ours_path, c["positions"], theirs_path, t["positions"]), 65)
    po = list(c["p"][:W]) + [1 - sum(c["p"][:W])]
    pt = list(t["p"][:W]) + [1 - sum(t["p"][:W])]
    N = c["positions"]
    head = "p1 ours %.4f theirs %.4f; " % (po[0], pt[0])
    if t["estimator"] == "fast_test":
        so = c.get("stderr") or [0.0] * W
        st = t.get("stderr") or [0.0] * W
        zs = []
        for k in range(W):
            d = (so[k] ** 2 + st[k] ** 2) ** 0.5
            if d > 0:
                zs.append((po[k] - pt[k]) / d)
        zmax = max(abs(z) for z in zs) if zs else 0.0
        df = min(c["sequences"], t["sequences"]) - 1
        pb = min(1.0, 2 * t_sf(zmax, max(df, 1)) * len(zs))
        print(head + "%d ranks, max |z| %.2f, Bonferroni p %.3g (t, %d df): %s" % (
            len(zs), zmax, pb, df, "agree" if pb > 1e-3 else "DISAGREE"))
        return
    obs = [x * N for x in pt]
    exp = [x * N for x in po]
    # pool ranks from the tail (the reject stays last) until every expected count is >= 5
    bins_o, bins_e, acc_o, acc_e = [], [], 0.0, 0.0
    for k in range(W):
        acc_o += obs[k]
        acc_e += exp[k]
        if acc_e >= 5 and sum(exp[k + 1:W]) >= 5:
            bins_o.append(acc_o)
            bins_e.append(acc_e)
            acc_o = acc_e = 0.0
    if acc_e > 0 or acc_o > 0:
        if bins_e:
            bins_o[-1] += acc_o
            bins_e[-1] += acc_e
        else:
            bins_o.append(acc_o)
            bins_e.append(acc_e)
    bins_o.append(obs[W])
    bins_e.append(exp[W])
    x2 = sum((a - b) ** 2 / b for a, b in zip(bins_o, bins_e) if b > 0)
    df = len(bins_e) - 1
    pv = chi2_sf(x2, df)
    print(head + "X^2 %.1f on %d df, p %.3g: %s" % (x2, df, pv, "agree" if pv > 1e-3 else "DISAGREE"))


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "--head":
        head(int(sys.argv[2]), sys.argv[3], sys.argv[4])
        return
    if len(sys.argv) == 4 and sys.argv[1] == "--compare":
        compare(sys.argv[2], sys.argv[3])
        return
    args = parse_args()
    if not os.path.isdir(args.checkout):
        die("%s: not a directory (a checkout of Infini-AI-Lab/Sequoia)" % args.checkout, 66)
    for c in args.corpora:
        if not os.path.exists(c):
            die("%s: no such file" % c, 66)
    checkout = os.path.abspath(args.checkout)
    sys.path.insert(0, checkout)
    import torch
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)

    def seqs():
        for c in args.corpora:
            yield from read_sequences(c, args.rows)

    run = run_fast_test if args.estimator == "fast_test" else run_test_accept
    Y, n, cpu, wall, read_cpu, pad_cpu = run(args, torch, seqs())
    N, U = n.sum(), len(n)
    p = Y.sum(axis=0) / N
    se = None
    if U > 1:
        r = Y - np.outer(n, p)
        se = np.sqrt(U / (U - 1) * (r * r).sum(axis=0)) / N
    net = cpu - pad_cpu
    out = {
        "estimator": args.estimator, "checkout": checkout, "corpora": args.corpora,
        "temperature": args.temperature, "width": args.width, "top_p": 1.0,
        "threads": args.threads, "torch": torch.__version__, "seed": args.seed,
        "positions": int(N), "sequences": U,
        "p": [round(float(x), 6) for x in p],
        "stderr": None if se is None else [round(float(x), 6) for x in se],
        "reject": round(float(1 - p.sum()), 6),
        "cpu_s": round(net, 4), "wall_s": round(wall, 4),
        "positions_per_cpu_s": round(N / net, 2) if net > 0 else None,
        "read_cpu_s": round(read_cpu, 4), "pad_cpu_s": round(pad_cpu, 4),
    }
    text = json.dumps(out, indent=1)
    if args.output:
        with open(args.output, "w") as fh:
            fh.write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
