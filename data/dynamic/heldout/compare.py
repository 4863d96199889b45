#!/usr/bin/env python3
"""Two-fold held-out comparison of predicted and measured tokens/step (issue 26).

The 64 prompts are split into folds A and B (prompts-A.txt, prompts-B.txt, 32 each). The
curves of one fold (curves-PAIR-F-*.json, the target's own continuations of that fold's
prompts) predict the runs on the other fold's prompts (measured-F.json, sequoia-run --engine
sglang): held out. The same curves against their own fold's runs are the in-sample control, and
the two folds' measurements against each other show how much 32 prompts differ from 32 others.

    data/dynamic/heldout/compare.py [DIR]      (default: this folder; prints the tables)

A measured pair "large" is the 18M target drafted by data/models/target, whose predictions are
named "target-large".
"""
import json
import os
import sys

d = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
FOLDS = ("A", "B")
OTHER = {"A": "B", "B": "A"}


def measured(fold):
    """measure.sh's rows of a fold: its folder of rows (every run so far), else its table."""
    rows = {}
    p = os.path.join(d, "measured-%s" % fold)
    if os.path.isdir(p + ".rows"):
        found = [json.load(open(os.path.join(p + ".rows", f)))
                 for f in sorted(os.listdir(p + ".rows")) if f.endswith(".json")]
    else:
        found = json.load(open(p + ".json"))["rows"] if os.path.exists(p + ".json") else []
    order = "4,1,5 2,2,4 3,4,8 5,4,8 7,2,12 5,4,16 3,8,16 6,4,24 4,8,32 8,4,32 8,8,64".split()
    key = lambda r: (r["pair"] != "shipped", r["mode"] != "greedy",
                     order.index(",".join(map(str, r["envelope"]))) if
                     ",".join(map(str, r["envelope"])) in order else 99)
    for r in sorted(found, key=key):
        rows[(r["pair"], r["mode"], ",".join(map(str, r["envelope"])))] = r
    return rows


def predicted(pair, fold, mode):
    name = "target-large" if pair == "large" else pair
    p = os.path.join(d, "predicted-%s-%s-%s.txt" % (name, fold, mode))
    out = {}
    if os.path.exists(p):
        for line in open(p):
            f = line.split()
            if f and not line.startswith("#") and f[0][0].isdigit():
                out[f[0]] = (float(f[1]), float(f[2]))
    return out


meas = {f: measured(f) for f in FOLDS}
keys = []
for f in FOLDS:
    for k in meas[f]:
        if k not in keys:
            keys.append(k)

print("%-8s %-10s %-8s %5s %6s %8s %15s %9s %7s %9s %7s" % (
    "pair", "mode", "L,K,N", "runs", "curves", "measured", "ci95", "held-out", "diff",
    "in-sample", "diff"))
summary = {}
for pair, mode, env in keys:
    for f in FOLDS:
        r = meas[f].get((pair, mode, env))
        if not r:
            continue
        ho = predicted(pair, OTHER[f], mode).get(env)
        ins = predicted(pair, f, mode).get(env)
        if not ho:
            continue
        x = r["tokens_per_step"]
        lo, hi = r["ci95"]
        dh = 100 * (ho[0] / x - 1)
        di = 100 * (ins[0] / x - 1) if ins else float("nan")
        print("%-8s %-10s %-8s %5s %6s %8.3f %7.3f..%-6.3f %9.3f %+6.1f%% %9.3f %+6.1f%%" % (
            pair, mode, env, f, OTHER[f], x, lo, hi, ho[0], dh, ins[0] if ins else float("nan"),
            di))
        s = summary.setdefault((pair, mode), {"ho": [], "ins": [], "inci": 0, "half": [],
                                              "comb": 0, "fold": {}})
        # the curves' prompts are a sample too: their own runs' interval (the in-sample
        # prediction of those runs is within 1.5%) stands for it
        o = meas[OTHER[f]].get((pair, mode, env))
        ho_half = 100 * (o["ci95"][1] - o["ci95"][0]) / 2 / o["tokens_per_step"] if o else 0
        s["comb"] += abs(dh) <= (ho_half ** 2 + (100 * (hi - lo) / 2 / x) ** 2) ** 0.5
        s["fold"].setdefault(f, []).append(dh)
        s["ho"].append(dh)
        s["ins"].append(di)
        s["inci"] += lo <= ho[0] <= hi
        s["half"].append(100 * (hi - lo) / 2 / x)

print()
print("%-8s %-10s %-10s %-17s %-26s %-22s %-9s %-9s %s" % (
    "pair", "mode", "held-out", "per fold", "held-out range (mean abs)", "in-sample within 5%",
    "in ci95", "in both", "run ci95 half-width"))
print("%-8s %-10s %-10s %-17s %-26s %-22s %-9s %-9s" % ("", "", "within 5%", "runs A, runs B",
                                                        "", "", "of runs", "ci95s"))
for (pair, mode), s in summary.items():
    ho, ins = s["ho"], s["ins"]
    print("%-8s %-10s %-10s %-17s %-26s %-22s %-9s %-9s %.1f%%..%.1f%%" % (
        pair, mode, "%d/%d" % (sum(abs(v) <= 5 for v in ho), len(ho)),
        ", ".join("%d/%d" % (sum(abs(v) <= 5 for v in s["fold"].get(f, [])),
                             len(s["fold"].get(f, []))) for f in FOLDS),
        "%+.1f%% .. %+.1f%% (%.1f%%)" % (min(ho), max(ho), sum(map(abs, ho)) / len(ho)),
        "%d/%d (%+.1f%% .. %+.1f%%)" % (sum(abs(v) <= 5 for v in ins), len(ins), min(ins),
                                        max(ins)),
        "%d/%d" % (s["inci"], len(ho)), "%d/%d" % (s["comb"], len(ho)), min(s["half"]),
        max(s["half"])))

print("""
held-out: curves of the other fold's 32 prompts; in-sample: of the runs' own 32 prompts; in ci95
of runs: the held-out prediction inside the run's 95% interval; in both ci95s: |diff| within the
root sum of squares of the run's and the curves' fold's runs' 95% half-widths (both prompt sets
are samples).
""")
print("fold B's measurement against fold A's (the same envelope, other prompts):")
for pair, mode in summary:
    diffs = []
    for k in keys:
        if k[:2] != (pair, mode):
            continue
        a, b = meas["A"].get(k), meas["B"].get(k)
        if a and b:
            diffs.append(100 * (b["tokens_per_step"] / a["tokens_per_step"] - 1))
    if diffs:
        print("  %-8s %-10s %+.1f%% .. %+.1f%% (mean %+.1f%%)" % (pair, mode, min(diffs), max(diffs),
                                                       sum(diffs) / len(diffs)))

# The main curves of data/dynamic/ (32 prompts of the file's first 32 KiB x 128 tokens) against
# both folds' runs (64 prompts, 200 tokens): held out as well.
print()
print("data/dynamic/predicted-PAIR-MODE.txt (curves of 32 other prompts x 128 tokens) against "
      "the folds' runs:")
main = os.path.join(d, "..")
for pair, mode in summary:
    name = "target-large" if pair == "large" else pair
    p = os.path.join(main, "predicted-%s-%s.txt" % (name, mode))
    if not os.path.exists(p):
        continue
    pred = {}
    for line in open(p):
        f = line.split()
        if f and not line.startswith("#") and f[0][0].isdigit():
            pred[f[0]] = float(f[1])
    for f in FOLDS:
        diffs = [100 * (pred[k[2]] / r["tokens_per_step"] - 1) for k, r in meas[f].items()
                 if k[:2] == (pair, mode) and k[2] in pred]
        if diffs:
            print("  %-8s %-10s runs %s: %d/%d within 5%%, %+.1f%% .. %+.1f%%" % (
                pair, mode, f, sum(abs(v) <= 5 for v in diffs), len(diffs), min(diffs),
                max(diffs)))
