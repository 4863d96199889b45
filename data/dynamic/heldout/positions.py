#!/usr/bin/env python3
"""Tokens/step of a dynamic-tree run's steps by where they start: in the first 128 generated
tokens of their sequence, or past them (issue 26). From the reports that measure.sh keeps
(KEEP=DIR), whose "dynamic.trees" list every step's sequence and tokens_out.

    data/dynamic/heldout/positions.py 'DIR/large-greedy-*.json' ...

Why: the curves of data/dynamic/ decode 128 tokens a prompt, the runs 200.
"""
import collections
import glob
import json
import sys

print("%-34s %8s %8s %7s %8s %7s %7s" % ("report", "all", "<128", "steps", ">=128", "steps",
                                         "diff"))
for pattern in sys.argv[1:]:
    for f in sorted(glob.glob(pattern)):
        r = json.load(open(f))
        pos = collections.defaultdict(int)
        acc = [[0, 0], [0, 0]]
        for t in r["dynamic"]["trees"]:
            b = 0 if pos[t["sequence"]] < 128 else 1
            acc[b][0] += t["tokens_out"]
            acc[b][1] += 1
            pos[t["sequence"]] += t["tokens_out"]
        early, late = acc[0][0] / acc[0][1], acc[1][0] / max(1, acc[1][1])
        print("%-34s %8.3f %8.3f %7d %8.3f %7d %+6.1f%%" % (
            "/".join(f.split("/")[-2:]), (acc[0][0] + acc[1][0]) / (acc[0][1] + acc[1][1]),
            early, acc[0][1], late, acc[1][1], 100 * (late / early - 1)))
