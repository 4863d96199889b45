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
"""
import glob
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stepcost import decode_rate, load, mean_ci  # noqa: E402

MODES = ("greedy", "topk")
DEPTH = int(os.environ.get("DEPTH", "9"))


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
    return {"prompts": len(reps), "steps": steps, "tokens_per_step": toks / steps,
            "tokens_per_s": list(rate), "step_ms": ms, "step_split_ms": split,
            "draft_catchup_per_step": sum(cu) / steps if len(cu) == len(reps) else None}


def static_predicted_tokens_per_s(plans, mode, n, depth, table="predicted speedup by size"):
    """the hardware-aware summary's predicted speedup of the tree (n, depth) times plain
    decoding's rate 1000 / target_ms_1 (sequoia-plan prints the speedups with 2 decimals); table:
    the heading of the engine model's table, or "sequoia-run's predicted speedup" for
    sequoia-run's"""
    txt = os.path.join(plans, "static_hw_%s_%d.txt" % (mode, n))
    js = os.path.join(plans, "static_hw_%s_%d.json" % (mode, n))
    if not (os.path.exists(txt) and os.path.exists(js)):
        return None
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
            return None if v == "-" else float(v) * 1000.0 / load(js)["hardware"]["target_ms_1"]
    return None


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


def main():
    out = sys.argv[1]
    P = os.path.join(out, "plans")
    rows_dyn, rows_static, picks = [], [], {}
    for mode in MODES:
        pick = load(os.path.join(P, "pick_%s.json" % mode))
        e = pick["envelope"]
        picks[mode] = {"envelope": [e["steps"], e["topk"], e["nodes"]],
                       "expected_tokens": pick["expected_tokens"],
                       "tokens_per_s": pick["hardware"]["tokens_per_second"],
                       "round_ms": pick["hardware"]["round_ms"],
                       "plain_tokens_per_s": pick["hardware"]["plain_tokens_per_second"],
                       "cost_per_round": pick["hardware"]["cost_per_round"]}
        for f in sorted(glob.glob(os.path.join(P, "env_%s_*.json" % mode)),
                        key=lambda f: env_key(f.rsplit("_", 1)[1][:-5])):
            env = f.rsplit("_", 1)[1][:-5]
            p = load(f)
            rt = p["hardware"]["sequoia_run"]
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
                             "measured": measured(out, "env_%s_%s" % (mode, env))})
        for f in glob.glob(os.path.join(P, "static_%s_*.json" % mode)):
            n = int(f.rsplit("_", 1)[1][:-5])
            p = load(f)
            rows_static.append({"mode": mode, "nodes": n, "plan_nodes": p.get("size", n),
                                "depth": p["depth"], "level_widths": p["level_widths"],
                                "predicted_tokens_per_step": p["expected_tokens"],
                                "engine_predicted_tokens_per_s": static_predicted_tokens_per_s(
                                    P, mode, n, DEPTH),
                                "predicted_tokens_per_s": static_predicted_tokens_per_s(
                                    P, mode, n, DEPTH, "sequoia-run's predicted speedup"),
                                "measured": measured(out, "static_%s_%d" % (mode, n))})
    rows_static.sort(key=lambda r: (r["mode"], r["nodes"]))

    def fmt(v, f="%.3f"):
        return "-" if v is None else f % v

    print("## Predicted against measured, every envelope (sglang, batch 1)\n")
    print("Predicted: sequoia-run's round (hardware.sequoia_run), the engine's (SGLang's, the draft's "
          "first forward over E tokens) in the last columns.\n")
    print("| mode | L,K,N | tokens/step pred / meas (ratio) | round ms pred / meas | target + outside ms "
          "pred / meas | draft ms pred / meas | catch-up pred / meas | tokens/s predicted | measured [95% CI] "
          "| meas/pred | within 10% | engine's tokens/s, meas/pred |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows_dyn:
        m = r["measured"]
        if not m:
            continue
        r["ratio_tokens_per_step"] = m["tokens_per_step"] / r["predicted_tokens_per_step"]
        r["ratio_tokens_per_s"] = m["tokens_per_s"][0] / r["predicted_tokens_per_s"]
        r["within_10pct"] = abs(r["ratio_tokens_per_s"] - 1) <= 0.10
        r["engine_ratio_tokens_per_s"] = m["tokens_per_s"][0] / r["engine_predicted_tokens_per_s"]
        r["engine_within_10pct"] = abs(r["engine_ratio_tokens_per_s"] - 1) <= 0.10
        sp = m["step_split_ms"]
        print("| %s | %s | %.3f / %.3f (%.3f) | %.3f / %.3f | %.3f / %.3f | %.3f / %.3f | %.3f / %s | %.0f "
              "| %.0f [%.0f, %.0f] | %.3f | %s | %.0f, %.3f |" % (
            r["mode"], ",".join(map(str, r["envelope"])), r["predicted_tokens_per_step"],
            m["tokens_per_step"], r["ratio_tokens_per_step"], r["predicted_round_ms"], m["step_ms"],
            r["predicted_round_target_ms"], sp["target_forward_ms"] + sp["outside_forwards_ms"],
            r["predicted_round_draft_ms"], sp["draft_forward_ms"], r["predicted_draft_catchup"],
            fmt(m["draft_catchup_per_step"]), r["predicted_tokens_per_s"], *m["tokens_per_s"],
            r["ratio_tokens_per_s"], "yes" if r["within_10pct"] else "**no**",
            r["engine_predicted_tokens_per_s"], r["engine_ratio_tokens_per_s"]))
    ok = [r for r in rows_dyn if r["measured"]]
    print("\ntokens/s within 10%% of sequoia-run's prediction: %d of %d (of the engine's: %d of %d); "
          "tokens/step within 5%%: %d of %d\n" % (
              sum(r["within_10pct"] for r in ok), len(ok),
              sum(r["engine_within_10pct"] for r in ok), len(ok),
              sum(abs(r["ratio_tokens_per_step"] - 1) <= 0.05 for r in ok), len(ok)))

    print("## The planner's pick against the fastest measured envelope\n")
    print("| mode | pick (L,K,N) | predicted tokens/step, tokens/s | pick measured tokens/s | fastest measured "
          "| its tokens/s | pick / fastest | within 5% |")
    print("|---|---|---|---|---|---|---|---|")
    for mode in MODES:
        pk = picks[mode]
        mine = [r for r in ok if r["mode"] == mode]
        fast = max(mine, key=lambda r: r["measured"]["tokens_per_s"][0])
        pr = [r for r in mine if r["envelope"] == pk["envelope"]]
        pm = pr[0]["measured"]["tokens_per_s"][0] if pr else float("nan")
        pk["measured_tokens_per_s"] = pm
        pk["fastest"] = {"envelope": fast["envelope"], "tokens_per_s": fast["measured"]["tokens_per_s"][0]}
        pk["pick_over_fastest"] = pm / fast["measured"]["tokens_per_s"][0]
        pk["within_5pct"] = pk["pick_over_fastest"] >= 0.95
        print("| %s | %s | %.3f, %.0f | %.0f | %s | %.0f | %.3f | %s |" % (
            mode, ",".join(map(str, pk["envelope"])), pk["expected_tokens"], pk["tokens_per_s"], pm,
            ",".join(map(str, fast["envelope"])), fast["measured"]["tokens_per_s"][0],
            pk["pick_over_fastest"], "yes" if pk["within_5pct"] else "**no**"))

    print("\n## Static Sequoia trees against the engine's dynamic trees at equal N\n")
    print("Static tokens/s predicted: sequoia-run's (the hardware-aware summary's second table), then "
          "the engine model's (its first).\n")
    print("| mode | N | static tree (widths) | static: tokens/step pred / meas, tokens/s pred (engine's) / meas [95% CI], "
          "meas/pred | best dynamic L,K,N: tokens/step, tokens/s [95% CI] | static / dynamic tokens/s | tokens/step |")
    print("|---|---|---|---|---|---|---|")
    comp = []
    for s in rows_static:
        if not s["measured"]:
            continue
        dyn = [r for r in ok if r["mode"] == s["mode"] and r["envelope"][2] == s["nodes"]]
        if not dyn:
            continue
        b = max(dyn, key=lambda r: r["measured"]["tokens_per_s"][0])
        sm, bm = s["measured"], b["measured"]
        c = {"mode": s["mode"], "nodes": s["nodes"], "static": sm,
             "static_predicted_tokens_per_step": s["predicted_tokens_per_step"],
             "dynamic_envelope": b["envelope"], "dynamic": bm,
             "ratio_tokens_per_s": sm["tokens_per_s"][0] / bm["tokens_per_s"][0],
             "ratio_tokens_per_step": sm["tokens_per_step"] / bm["tokens_per_step"]}
        comp.append(c)
        c["static_predicted_tokens_per_s"] = s["predicted_tokens_per_s"]
        c["static_engine_predicted_tokens_per_s"] = s["engine_predicted_tokens_per_s"]
        pr, pe = s["predicted_tokens_per_s"], s["engine_predicted_tokens_per_s"]
        s["ratio_tokens_per_s"] = sm["tokens_per_s"][0] / pr if pr else None
        s["within_10pct"] = abs(s["ratio_tokens_per_s"] - 1) <= 0.10 if pr else None
        print("| %s | %d | %s | %.3f / %.3f, %s (%s) / %.0f [%.0f, %.0f], %s | %s: %.3f, %.0f [%.0f, %.0f] | %.3f | %.3f |" % (
            s["mode"], s["nodes"], " ".join(map(str, s["level_widths"])), s["predicted_tokens_per_step"],
            sm["tokens_per_step"], fmt(pr, "%.0f"), fmt(pe, "%.0f"),
            *sm["tokens_per_s"], fmt(s["ratio_tokens_per_s"]), ",".join(map(str, b["envelope"])),
            bm["tokens_per_step"], *bm["tokens_per_s"], c["ratio_tokens_per_s"], c["ratio_tokens_per_step"]))
    st_ok = [s for s in rows_static if s.get("within_10pct") is not None]
    print("\nstatic trees' tokens/s within 10%% of sequoia-run's prediction: %d of %d\n" % (
        sum(s["within_10pct"] for s in st_ok), len(st_ok)))
    json.dump({"format": "sequoia-dynamic-grid-summary", "version": 1, "picks": picks,
               "envelopes": rows_dyn, "static": rows_static, "static_vs_dynamic": comp},
              open(os.path.join(out, "summary.json"), "w"), indent=1)
    svg(rows_static, rows_dyn, os.path.join(out, "static-vs-dynamic.svg"))


if __name__ == "__main__":
    main()
