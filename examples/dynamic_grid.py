#!/usr/bin/env python3
"""Tables and picture of examples/dynamic_grid.sh (issue 26; data/dynamic-grid/README.md).

  dynamic_grid.py OUT
      prints the tables (markdown), writes OUT/summary.json and OUT/static-vs-dynamic.svg

Measured rates are examples/stepcost.py's decode_rate (the steps' tokens over the steps' time)
averaged over the prompts with its mean_ci; tokens/step is every prompt's steps' tokens over
their steps.

Two predictions of tokens/s (docs/planning.md, "Two cost models"): the engine's (the plan's
hardware.tokens_per_second: SGLang's round, the draft's first forward over E tokens) and
sequoia-run's (hardware.sequoia_run: the round as sequoia-run runs it, its draft catching up
c tokens, the replay's expectation). The measured rate is sequoia-run's, so "within 10%" is
judged against sequoia-run's prediction; the engine's ratio is kept beside it. The catch-up
sequoia-run counted (its report's draft_catchup.per_step) is set against the predicted c.

Every prediction is priced twice (examples/dynamic_grid.sh): from the profiles pooled over the
whole measured period (OUT/profile_*.json, sequoia-profile --merge of the slices; the plans
plans/pick_*, env_*, static_hw_*) and from the first slice alone (plans/pick1_*, env1_*,
static_hw1_*: one profile taken before the runs, the method of before), so that the effect of
pooling shows.
"""
import glob
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stepcost import decode_rate, load, mean_ci  # noqa: E402

MODES = ("greedy", "topk")
DEPTH = int(os.environ.get("DEPTH", "9"))
# the steady rate leaves out each run's first COLD_STEPS steps: the first steps of a process run
# slower (0.74, 0.64, 0.49, 0.41 ms for the shipped target's 8-node verify against about 0.31
# from the fifth on, in three runs of the chain of 8 at 01:05 UTC 2026-12-02, before this grid;
# docs/benchmarks.md), which a steady-state prediction does not model
COLD_STEPS = int(os.environ.get("COLD_STEPS", "4"))


def steady_rate(r):
    """a run's tokens/s over its steps after the first COLD_STEPS (timing.per_step), or None"""
    ps = (r.get("timing") or {}).get("per_step")
    if not ps or len(ps["step_ms"]) != len(r["step_tokens"]) or len(r["step_tokens"]) <= COLD_STEPS:
        return None
    ms = sum(ps["step_ms"][COLD_STEPS:])
    return 1000.0 * sum(r["step_tokens"][COLD_STEPS:]) / ms if ms > 0 else None


def measured(out, tag):
    reps = [load(p) for p in sorted(glob.glob(os.path.join(out, "runs", "report_%s_*.json" % tag)))]
    if not reps:
        return None
    steps = sum(r["steps"] for r in reps)
    toks = sum(sum(r["step_tokens"]) for r in reps)
    rate = mean_ci([decode_rate(r) for r in reps])
    ms = sum(r["timing"]["step_split"]["steps_ms"] for r in reps) / steps
    split = {k: sum(r["timing"]["step_split"][k] for r in reps) / steps
             for k in ("draft_forward_ms", "target_forward_ms", "outside_forwards_ms")}
    cu = [r["draft_catchup"]["tokens"] for r in reps if "draft_catchup" in r]
    st = [steady_rate(r) for r in reps]
    steady = list(mean_ci(st)) if all(x is not None for x in st) else None
    return {"prompts": len(reps), "steps": steps, "tokens_per_step": toks / steps,
            "tokens_per_s": list(rate), "steady_tokens_per_s": steady, "step_ms": ms,
            "step_split_ms": split,
            "draft_catchup_per_step": sum(cu) / steps if len(cu) == len(reps) else None}


def static_predicted_tokens_per_s(plans, mode, n, depth, run_plan, stem="static_hw", engine=False):
    """the predicted tokens/s of the static tree (n, depth) that was run (run_plan), and where it
    comes from. The hardware-aware plan (stem_MODE_n.json, made with --sizes budget: that tree
    itself, priced) gives its hardware section (sequoia_run, or the engine's with engine=True)
    exactly ("plan"); in grids made before --sizes budget it priced the fastest tree within (n,
    depth), and when that was not the tree run, the summary's table of predicted speedups at (n,
    depth) times plain decoding's rate 1000 / target_ms_1 ("table": sequoia-plan prints the
    speedups with 2 decimals, about 1.5% of 0.35 at 32 nodes)"""
    txt = os.path.join(plans, "%s_%s_%d.txt" % (stem, mode, n))
    js = os.path.join(plans, "%s_%s_%d.json" % (stem, mode, n))
    if not (os.path.exists(txt) and os.path.exists(js)):
        return None, None
    hw = load(js)
    if hw.get("level_widths") == run_plan.get("level_widths") and "sequoia_run" in hw["hardware"]:
        h = hw["hardware"]
        return (h["tokens_per_second"] if engine else h["sequoia_run"]["tokens_per_second"]), "plan"
    table = "predicted speedup by size" if engine else "sequoia-run's predicted speedup"
    cols, inside = None, False
    for line in open(txt):
        f = line.split()
        if line.startswith(table):
            inside = True
        elif inside and f and f[0] == "n\\d":
            cols = [int(x) for x in f[1:]]
        elif inside and cols and f and f[0] == str(n):
            # a depth bound >= n is unbounded: the table stops at the last column
            v = f[1 + (cols.index(depth) if depth in cols else len(cols) - 1)].rstrip("*")
            if v == "-":
                return None, None
            return float(v) * 1000.0 / hw["hardware"]["target_ms_1"], "table"
    return None, None


def env_key(s):
    return tuple(int(x) for x in s.split(","))


def svg(rows_static, rows_dyn, path):
    """two panels per mode (tokens/s, tokens/step) against N: static trees, the best dynamic
    envelope of each N, every measured envelope as a dot"""
    W, H, pad = 940, 640, 70
    pw, ph = (W - 3 * pad) / 2, (H - 3 * pad) / 2
    xs = [2, 4, 8, 16, 32]
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" '
           'font-size="11">' % (W, H), '<rect width="100%" height="100%" fill="white"/>']
    import math

    def xpos(n, x0):
        return x0 + (math.log2(n) - 1) / (math.log2(32) - 1) * (pw - 40) + 20

    for mi, mode in enumerate(MODES):
        for qi, (q, label) in enumerate((("tokens_per_s", "tokens/s (decode)"),
                                         ("tokens_per_step", "tokens/step"))):
            x0 = pad + qi * (pw + pad)
            y0 = pad + mi * (ph + pad)
            pts = [(r["envelope"][2], r["measured"][q][0] if q == "tokens_per_s" else r["measured"][q],
                    r) for r in rows_dyn if r["mode"] == mode and r["measured"]]
            st = [(r["nodes"], r["measured"][q][0] if q == "tokens_per_s" else r["measured"][q])
                  for r in rows_static if r["mode"] == mode and r["measured"]]
            vals = [v for _, v, _ in pts] + [v for _, v in st]
            if not vals:
                continue
            lo, hi = 0, max(vals) * 1.1

            def ypos(v):
                return y0 + ph - (v - lo) / (hi - lo) * ph
            out.append('<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="#444"/>'
                       % (x0, y0, pw, ph))
            out.append('<text x="%.1f" y="%.1f" font-size="13">%s, %s</text>' % (
                x0, y0 - 8, {"greedy": "greedy", "topk": "target-only sampling, T = 1"}[mode], label))
            for k in range(5):
                v = lo + (hi - lo) * k / 4
                out.append('<text x="%.1f" y="%.1f" text-anchor="end">%s</text>' % (
                    x0 - 4, ypos(v) + 4, ("%.0f" if hi > 100 else "%.2f") % v))
                out.append('<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#ddd"/>' % (
                    x0, x0 + pw, ypos(v), ypos(v)))
            for n in xs:
                out.append('<text x="%.1f" y="%.1f" text-anchor="middle">N = %d</text>' % (
                    xpos(n, x0), y0 + ph + 16, n))
            for n, v, r in pts:
                e = r["envelope"]
                out.append('<circle cx="%.1f" cy="%.1f" r="3" fill="#9ab"><title>%d,%d,%d: %.4g</title></circle>'
                           % (xpos(n, x0) + 6, ypos(v), e[0], e[1], e[2], v))
            best = {}
            for n, v, r in pts:
                if n not in best or v > best[n][0]:
                    best[n] = (v, r)
            bl = sorted(best.items())
            out.append('<polyline fill="none" stroke="#1f77b4" stroke-width="2" points="%s"/>' % " ".join(
                "%.1f,%.1f" % (xpos(n, x0) + 6, ypos(v)) for n, (v, _) in bl))
            for n, (v, r) in bl:
                e = r["envelope"]
                out.append('<circle cx="%.1f" cy="%.1f" r="5" fill="#1f77b4"/>' % (xpos(n, x0) + 6, ypos(v)))
                out.append('<text x="%.1f" y="%.1f" fill="#1f77b4">%d,%d,%d</text>' % (
                    xpos(n, x0) + 12, ypos(v) + 12, e[0], e[1], e[2]))
            st.sort()
            out.append('<polyline fill="none" stroke="#d62728" stroke-width="2" points="%s"/>' % " ".join(
                "%.1f,%.1f" % (xpos(n, x0) - 6, ypos(v)) for n, v in st))
            for n, v in st:
                out.append('<rect x="%.1f" y="%.1f" width="9" height="9" fill="#d62728"/>' % (
                    xpos(n, x0) - 10.5, ypos(v) - 4.5))
    out.append('<text x="%d" y="%d" font-size="12"><tspan fill="#d62728">&#9632; static Sequoia tree of N '
               'nodes</tspan>   <tspan fill="#1f77b4">&#9679; best measured SGLang envelope L,K,N</tspan>   '
               '<tspan fill="#9ab">&#9679; every measured envelope</tspan></text>' % (pad, H - 12))
    out.append('</svg>')
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def profile_note(out, who):
    """what the pooled profile says of its sources (sequoia-profile --merge: docs/formats.md)"""
    f = os.path.join(out, "profile_%s.json" % who)
    if not os.path.exists(f):
        return None
    p = load(f)
    m = p.get("merged") or {}
    st = p.get("stability") or {}
    return {"sources": m.get("sources"), "span_s": m.get("span_s"), "pool": m.get("pool"),
            "measured_at": p.get("measured_at"), "drift": m.get("drift"),
            "median_spread": st.get("median_spread"), "credible": st.get("credible")}


def pick_opts(out):
    """the PICK_OPTS the script ran with (OUT/setup.txt), for a plan that does not say which cost
    model chose it"""
    try:
        for line in open(os.path.join(out, "setup.txt")):
            if "PICK_OPTS='" in line:
                v = line.split("PICK_OPTS='", 1)[1].split("'", 1)[0]
                return v or "engine (PICK_OPTS empty)"
    except OSError:
        pass
    return "?"


def pick_of(P, stem, mode):
    f = os.path.join(P, "%s_%s.json" % (stem, mode))
    if not os.path.exists(f):
        return None
    pick = load(f)
    e = pick["envelope"]
    h = pick["hardware"]
    return {"envelope": [e["steps"], e["topk"], e["nodes"]],
            "expected_tokens": pick["expected_tokens"],
            "engine_tokens_per_s": h["tokens_per_second"],
            "tokens_per_s": h.get("sequoia_run", {}).get("tokens_per_second", h["tokens_per_second"]),
            "cost_model": h.get("cost_model") or h.get("chosen_by") or pick_opts(os.path.dirname(P)),
            "round_ms": h["round_ms"], "plain_tokens_per_s": h["plain_tokens_per_second"],
            "cost_per_round": h["cost_per_round"],
            "ran_after_the_grid": os.path.exists(os.path.join(P, "%s_%s.ran_after" % (stem, mode)))}


def main():
    out = sys.argv[1]
    P = os.path.join(out, "plans")
    rows_dyn, rows_static, picks = [], [], {}
    for mode in MODES:
        picks[mode] = pick_of(P, "pick", mode)
        picks[mode]["first_slice"] = pick_of(P, "pick1", mode)
        for f in sorted(glob.glob(os.path.join(P, "env_%s_*.json" % mode)),
                        key=lambda f: env_key(f.rsplit("_", 1)[1][:-5])):
            env = f.rsplit("_", 1)[1][:-5]
            p = load(f)
            rt = p["hardware"]["sequoia_run"]
            f1 = os.path.join(P, "env1_%s_%s.json" % (mode, env))
            p1 = load(f1) if os.path.exists(f1) else None
            rows_dyn.append({"mode": mode, "envelope": list(env_key(env)),
                             "predicted_tokens_per_step": p["expected_tokens"],
                             "engine_predicted_tokens_per_s": p["hardware"]["tokens_per_second"],
                             "engine_predicted_round_ms": p["hardware"]["round_ms"],
                             "engine_predicted_round_draft_ms": p["hardware"]["round_draft_ms"],
                             "predicted_tokens_per_s": rt["tokens_per_second"],
                             "predicted_round_ms": rt["round_ms"],
                             "predicted_round_target_ms": rt["round_target_ms"],
                             "predicted_round_draft_ms": rt["round_draft_ms"],
                             "predicted_draft_catchup": rt["draft_catchup_tokens"],
                             "first_slice_predicted_tokens_per_s":
                                 p1["hardware"]["sequoia_run"]["tokens_per_second"] if p1 else None,
                             "measured": measured(out, "env_%s_%s" % (mode, env))})
        for f in glob.glob(os.path.join(P, "static_%s_*.json" % mode)):
            n = int(f.rsplit("_", 1)[1][:-5])
            p = load(f)
            pr, src = static_predicted_tokens_per_s(P, mode, n, DEPTH, p)
            pe, _ = static_predicted_tokens_per_s(P, mode, n, DEPTH, p, engine=True)
            p1, src1 = static_predicted_tokens_per_s(P, mode, n, DEPTH, p, "static_hw1")
            rows_static.append({"mode": mode, "nodes": n, "plan_nodes": p.get("size", n),
                                "depth": p["depth"], "level_widths": p["level_widths"],
                                "predicted_tokens_per_step": p["expected_tokens"],
                                "engine_predicted_tokens_per_s": pe,
                                "predicted_tokens_per_s": pr, "predicted_from": src,
                                "first_slice_predicted_tokens_per_s": p1,
                                "first_slice_predicted_from": src1,
                                "measured": measured(out, "static_%s_%d" % (mode, n))})
    rows_static.sort(key=lambda r: (r["mode"], r["nodes"]))

    def fmt(v, f="%.3f"):
        return "-" if v is None else f % v

    def within(m, pred):
        return None if not pred else abs(m / pred - 1) <= 0.10

    profs = {who: profile_note(out, who) for who in ("target", "draft")}
    print("## The profiles\n")
    pool = (profs.get("target") or {}).get("pool") or "median of the sources' medians"
    pool = "the mean" if pool.startswith("mean") else "the median"
    print("Every prediction below is priced after the runs from the profiles pooled over the whole "
          "measured period (`sequoia-profile --merge` of the slices taken before each prompt's "
          "configurations and once at the end: each point %s of the slices' medians); " % pool +
          "the columns \"first slice\" price the same from the first slice alone (one profile "
          "taken before the runs, the method of before).\n")
    print("| profile | slices | span s | slices' medians spread, median point / widest (tokens) | "
          "pooled median p10-p90 spread | credible |")
    print("|---|---|---|---|---|---|")
    for who, pn in profs.items():
        if not pn:
            continue
        d = pn["drift"] or {}
        print("| %s | %s | %s | %s / %s (%s) | %s | %s |" % (
            who, pn["sources"], pn["span_s"], fmt(d.get("median")), fmt(d.get("max")),
            d.get("max_tokens", "-"), fmt(pn["median_spread"]), pn["credible"]))
    print()

    print("## Predicted against measured, every envelope (sglang, batch 1)\n")
    print("Predicted: sequoia-run's round (hardware.sequoia_run) from the pooled profiles; the same "
          "from the first slice, and the engine's (SGLang's, the draft's first forward over E "
          "tokens) from the pooled profiles, in the last columns.\n")
    print("| mode | L,K,N | tokens/step pred / meas (ratio) | round ms pred / meas | target + outside ms "
          "pred / meas | draft ms pred / meas | catch-up pred / meas | tokens/s predicted | measured [95% CI] "
          "| meas/pred | within 10% | first slice: tokens/s pred, meas/pred, within 10% "
          "| engine's tokens/s, meas/pred | steady tokens/s [95% CI], meas/pred, within 10% |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows_dyn:
        m = r["measured"]
        if not m:
            continue
        mt = m["tokens_per_s"][0]
        r["ratio_tokens_per_step"] = m["tokens_per_step"] / r["predicted_tokens_per_step"]
        r["ratio_tokens_per_s"] = mt / r["predicted_tokens_per_s"]
        r["within_10pct"] = within(mt, r["predicted_tokens_per_s"])
        p1 = r["first_slice_predicted_tokens_per_s"]
        r["first_slice_ratio_tokens_per_s"] = mt / p1 if p1 else None
        r["first_slice_within_10pct"] = within(mt, p1)
        r["engine_ratio_tokens_per_s"] = mt / r["engine_predicted_tokens_per_s"]
        r["engine_within_10pct"] = within(mt, r["engine_predicted_tokens_per_s"])
        sp = m["step_split_ms"]
        sd = m["steady_tokens_per_s"]
        r["steady_ratio_tokens_per_s"] = sd[0] / r["predicted_tokens_per_s"] if sd else None
        r["steady_within_10pct"] = within(sd[0], r["predicted_tokens_per_s"]) if sd else None
        print("| %s | %s | %.3f / %.3f (%.3f) | %.3f / %.3f | %.3f / %.3f | %.3f / %.3f | %.3f / %s | %.0f "
              "| %.0f [%.0f, %.0f] | %.3f | %s | %s, %s, %s | %.0f, %.3f | %s |" % (
            r["mode"], ",".join(map(str, r["envelope"])), r["predicted_tokens_per_step"],
            m["tokens_per_step"], r["ratio_tokens_per_step"], r["predicted_round_ms"], m["step_ms"],
            r["predicted_round_target_ms"], sp["target_forward_ms"] + sp["outside_forwards_ms"],
            r["predicted_round_draft_ms"], sp["draft_forward_ms"], r["predicted_draft_catchup"],
            fmt(m["draft_catchup_per_step"]), r["predicted_tokens_per_s"], *m["tokens_per_s"],
            r["ratio_tokens_per_s"], "yes" if r["within_10pct"] else "**no**",
            fmt(p1, "%.0f"), fmt(r["first_slice_ratio_tokens_per_s"]),
            "-" if p1 is None else "yes" if r["first_slice_within_10pct"] else "**no**",
            r["engine_predicted_tokens_per_s"], r["engine_ratio_tokens_per_s"],
            "-" if not sd else "%.0f [%.0f, %.0f], %.3f, %s" % (
                *sd, r["steady_ratio_tokens_per_s"], "yes" if r["steady_within_10pct"] else "**no**")))
    ok = [r for r in rows_dyn if r["measured"]]
    print("\ntokens/s within 10%% of sequoia-run's prediction: **%d of %d** from the pooled profiles, "
          "%d of %d from the first slice (of the engine's, pooled: %d of %d); tokens/step within 5%%: "
          "%d of %d\n" % (
              sum(bool(r["within_10pct"]) for r in ok), len(ok),
              sum(bool(r["first_slice_within_10pct"]) for r in ok),
              sum(r["first_slice_within_10pct"] is not None for r in ok),
              sum(bool(r["engine_within_10pct"]) for r in ok), len(ok),
              sum(abs(r["ratio_tokens_per_step"] - 1) <= 0.05 for r in ok), len(ok)))
    sok = [r for r in ok if r.get("steady_within_10pct") is not None]
    if sok:
        print("steady tokens/s (each run's steps after its first %d) within 10%% of sequoia-run's "
              "prediction: **%d of %d**\n" % (COLD_STEPS, sum(bool(r["steady_within_10pct"])
                                                          for r in sok), len(sok)))

    print("## The planner's pick against the fastest measured envelope\n")
    print("The pick: `sequoia-plan --engine sglang` without `--envelope` (its cost model in the "
          "second column), from the pooled profiles; the first slice's pick beside it.\n")
    print("| mode | pick (L,K,N), cost model | predicted tokens/step, tokens/s | pick measured tokens/s | fastest measured "
          "| its tokens/s | pick / fastest | within 5% | first slice's pick, measured / fastest |")
    print("|---|---|---|---|---|---|---|---|---|")
    for mode in MODES:
        pk = picks[mode]
        mine = [r for r in ok if r["mode"] == mode]
        fast = max(mine, key=lambda r: r["measured"]["tokens_per_s"][0])
        ft = fast["measured"]["tokens_per_s"][0]
        pk["fastest"] = {"envelope": fast["envelope"], "tokens_per_s": ft}

        def measured_of(env):
            pr = [r for r in mine if r["envelope"] == env]
            return pr[0]["measured"]["tokens_per_s"][0] if pr else float("nan")
        pm = measured_of(pk["envelope"])
        pk["measured_tokens_per_s"] = pm
        pk["pick_over_fastest"] = pm / ft
        pk["within_5pct"] = pk["pick_over_fastest"] >= 0.95
        f1 = pk["first_slice"]
        first = "-"
        if f1:
            f1["measured_tokens_per_s"] = measured_of(f1["envelope"])
            f1["pick_over_fastest"] = f1["measured_tokens_per_s"] / ft
            first = "%s, %.3f" % (",".join(map(str, f1["envelope"])), f1["pick_over_fastest"])
        print("| %s | %s, %s%s | %.3f, %.0f | %.0f | %s | %.0f | %.3f | %s | %s |" % (
            mode, ",".join(map(str, pk["envelope"])), pk["cost_model"],
            " (run after the grid)" if pk["ran_after_the_grid"] else "", pk["expected_tokens"],
            pk["tokens_per_s"], pm, ",".join(map(str, fast["envelope"])), ft,
            pk["pick_over_fastest"], "yes" if pk["within_5pct"] else "**no**", first))

    print("\n## Static Sequoia trees against the engine's dynamic trees at equal N\n")
    print("Static tokens/s predicted: sequoia-run's, from the pooled profiles (\"plan\": the "
          "hardware-aware plan's hardware.sequoia_run, when its tree is the tree run; \"table\": its "
          "summary's table at (N, depth), 2 decimals, times plain decoding's rate), then the engine "
          "model's; the first slice's in the next column.\n")
    print("| mode | N | static tree (widths) | static: tokens/step pred / meas, tokens/s pred [from] (engine's) / meas [95% CI], "
          "meas/pred | first slice: tokens/s pred, meas/pred | best dynamic L,K,N: tokens/step, tokens/s [95% CI] "
          "| static / dynamic tokens/s | tokens/step |")
    print("|---|---|---|---|---|---|---|---|")
    comp = []
    for s in rows_static:
        if not s["measured"]:
            continue
        sm = s["measured"]
        pr, pe, p1 = (s["predicted_tokens_per_s"], s["engine_predicted_tokens_per_s"],
                      s["first_slice_predicted_tokens_per_s"])
        mt = sm["tokens_per_s"][0]
        s["ratio_tokens_per_s"] = mt / pr if pr else None
        s["within_10pct"] = within(mt, pr)
        s["first_slice_ratio_tokens_per_s"] = mt / p1 if p1 else None
        s["first_slice_within_10pct"] = within(mt, p1)
        sd = sm["steady_tokens_per_s"]
        s["steady_ratio_tokens_per_s"] = sd[0] / pr if sd and pr else None
        s["steady_within_10pct"] = within(sd[0], pr) if sd else None
        dyn = [r for r in ok if r["mode"] == s["mode"] and r["envelope"][2] == s["nodes"]]
        static_cols = "%s | %d | %s | %.3f / %.3f, %s [%s] (%s) / %.0f [%.0f, %.0f], %s | %s, %s" % (
            s["mode"], s["nodes"], " ".join(map(str, s["level_widths"])), s["predicted_tokens_per_step"],
            sm["tokens_per_step"], fmt(pr, "%.0f"), s["predicted_from"], fmt(pe, "%.0f"),
            *sm["tokens_per_s"], fmt(s["ratio_tokens_per_s"]), fmt(p1, "%.0f"),
            fmt(s["first_slice_ratio_tokens_per_s"]))
        if not dyn:
            print("| %s | no envelope of %d nodes measured | - | - |" % (static_cols, s["nodes"]))
            continue
        b = max(dyn, key=lambda r: r["measured"]["tokens_per_s"][0])
        bm = b["measured"]
        c = {"mode": s["mode"], "nodes": s["nodes"], "static": sm,
             "static_predicted_tokens_per_step": s["predicted_tokens_per_step"],
             "dynamic_envelope": b["envelope"], "dynamic": bm,
             "ratio_tokens_per_s": mt / bm["tokens_per_s"][0],
             "ratio_tokens_per_step": sm["tokens_per_step"] / bm["tokens_per_step"],
             "static_predicted_tokens_per_s": pr, "static_engine_predicted_tokens_per_s": pe}
        comp.append(c)
        print("| %s | %s: %.3f, %.0f [%.0f, %.0f] | %.3f | %.3f |" % (
            static_cols, ",".join(map(str, b["envelope"])), bm["tokens_per_step"], *bm["tokens_per_s"],
            c["ratio_tokens_per_s"], c["ratio_tokens_per_step"]))
    st_ok = [s for s in rows_static if s.get("within_10pct") is not None]
    st_1 = [s for s in rows_static if s.get("first_slice_within_10pct") is not None]
    print("\nstatic trees' tokens/s within 10%% of sequoia-run's prediction: **%d of %d** from the "
          "pooled profiles, %d of %d from the first slice\n" % (
              sum(s["within_10pct"] for s in st_ok), len(st_ok),
              sum(s["first_slice_within_10pct"] for s in st_1), len(st_1)))
    st_sd = [s for s in rows_static if s.get("steady_within_10pct") is not None]
    if st_sd:
        print("static trees' steady tokens/s (each run's steps after its first %d) within 10%% of "
              "sequoia-run's prediction: **%d of %d** (%s)\n" % (
                  COLD_STEPS, sum(s["steady_within_10pct"] for s in st_sd), len(st_sd),
                  ", ".join("%s N=%d %.3f" % (s["mode"], s["nodes"], s["steady_ratio_tokens_per_s"])
                            for s in st_sd)))
    json.dump({"format": "sequoia-dynamic-grid-summary", "version": 2, "profiles": profs,
               "picks": picks, "envelopes": rows_dyn, "static": rows_static,
               "static_vs_dynamic": comp},
              open(os.path.join(out, "summary.json"), "w"), indent=1)
    svg(rows_static, rows_dyn, os.path.join(out, "static-vs-dynamic.svg"))


if __name__ == "__main__":
    main()
