#!/usr/bin/python3
"""Helper of examples/speedup.sh: the baseline trees, the cost model and the report.

    speedup.py baselines OUT SETTING N    best chain and best k x L tree of at most N nodes
    speedup.py report OUT PROMPTS SIZES SWEEP_PROMPTS   tables, summary.json and the SVG

The cost of a step is the planner's per-level model (planner/hardware.h), computed here from
the same profiles with the same linear interpolation (libsequoia/format/profile.c):
    t_step = t_target(n) + t_draft(F) + sum_{l=1..L-2} t_draft(w_l),  t_step(root only) = t_target(1)
so a baseline tree is predicted exactly as sequoia-plan predicts the tree it chooses.
Standard library only."""

import json
import math
import os
import subprocess
import sys

SETTINGS = {"T0": ("greedy", 0.0, "greedy@T0"), "T0.6": ("stochastic", 0.6, "stochastic@T0.6")}
# two-sided 95% Student t quantiles by degrees of freedom (for the CI over prompts)
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
        9: 2.262, 10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120,
        17: 2.110, 18: 2.101, 19: 2.093, 20: 2.086, 24: 2.064, 30: 2.042, 40: 2.021, 60: 2.000}


# Fewest prompts whose 95% CI can test a prediction: with n prompts the interval is t(n-1)
# standard errors wide on each side, 12.7 with 2 prompts (one degree of freedom), and one
# prompt gives none; below this the report compares the means only (issue 27).
MIN_CI_PROMPTS = 5


def t975(df):
    if df in T975:
        return T975[df]
    below = [k for k in T975 if k <= df]
    return T975[max(below)] if below else T975[1]


def load(path):
    with open(path) as f:
        return json.load(f)


def save(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


def profile_ms(prof, x):
    """Median ms at x tokens, linear between measured points (as sq_profile_ms, no extrapolation)."""
    pts = prof["points"]
    if x < pts[0]["tokens"] or x > pts[-1]["tokens"]:
        raise SystemExit("speedup.py: %g tokens is outside the profile [%d, %d]" % (
            x, pts[0]["tokens"], pts[-1]["tokens"]))
    lo = max(i for i, p in enumerate(pts) if p["tokens"] <= x)
    if lo == len(pts) - 1:
        return pts[lo]["median_ms"]
    a, b = pts[lo], pts[lo + 1]
    t = (x - a["tokens"]) / (b["tokens"] - a["tokens"])
    return a["median_ms"] + t * (b["median_ms"] - a["median_ms"])


def step_ms(tprof, dprof, plan):
    n, F, w = plan["size"], plan["expected_tokens"], plan["level_widths"]
    if n == 1:
        return profile_ms(tprof, 1)
    t = profile_ms(tprof, n) + profile_ms(dprof, F)
    for l in range(1, len(w) - 1):
        t += profile_ms(dprof, w[l])
    return t


def score(out, work, curve, choices, name):
    """The tree of an engine-style choices list, scored under the curve by sequoia-plan."""
    cfile = os.path.join(work, name + "_choices.json")
    pfile = os.path.join(work, name + ".json")
    with open(cfile, "w") as f:
        json.dump(choices, f)
    subprocess.run([os.environ["PLAN"], "--import", "choices", cfile, "-a",
                    os.path.join(out, "curves.json"), "-c", curve, "-o", pfile],
                   check=True, stdout=subprocess.DEVNULL)
    return load(pfile)


def baselines(out, setting, nmax):
    """Best chain and best k x L tree (k branches of L tokens under the root) of <= nmax nodes,
    by predicted tokens per second under the cost model."""
    curve = SETTINGS[setting][2]
    tprof = load(os.path.join(out, "profile_target.json"))
    dprof = load(os.path.join(out, "profile_draft.json"))
    work = os.path.join(out, "baseline_trees")
    os.makedirs(work, exist_ok=True)
    best = {}
    cands = [("chain", 1, L) for L in range(1, nmax)]
    cands += [("kxl", k, L) for k in range(2, 17) for L in range(1, nmax) if k * L + 1 <= nmax]
    for kind, k, L in cands:
        choices = [[i] + [0] * j for j in range(L) for i in range(k)]
        plan = score(out, work, curve, choices, "%s_%s_%dx%d" % (setting, kind, k, L))
        ms = step_ms(tprof, dprof, plan)
        rate = plan["expected_tokens"] / ms
        if kind not in best or rate > best[kind][0]:
            best[kind] = (rate, k, L, plan)
    for kind, (rate, k, L, plan) in best.items():
        save(os.path.join(out, "plan_%s_%s.json" % (setting, kind)), plan)
        print("%s %s: %d x %d (%d nodes, depth %d), F = %.3f, predicted %.3f ms/token" % (
            setting, kind, k, L, plan["size"], plan["depth"], plan["expected_tokens"],
            1.0 / rate))


def mean_ci(xs):
    n = len(xs)
    m = sum(xs) / n
    if n < 2:
        return m, float("nan"), float("nan")
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (n - 1))
    h = t975(n - 1) * sd / math.sqrt(n)
    return m, m - h, m + h


def runs(out, tag, prompts):
    rs = []
    for i in range(prompts):
        p = os.path.join(out, "runs", "report_%s_%d.json" % (tag, i))
        if os.path.exists(p):
            rs.append(run_report(p))
    return rs


def run_report(path):
    """a single run's sequoia-run-report: the fields read here (generated_tokens, steps,
    step_tokens, timing) are the same in versions 1 and 2 for one sequence (docs/formats.md)"""
    r = load(path)
    if r.get("format") != "sequoia-run-report" or r.get("version") not in (1, 2):
        raise SystemExit("speedup.py: %s: not a sequoia-run-report v1 or v2" % path)
    return r


def measured(rs, base=None):
    """base: the runs whose target-alone time divides (default rs itself), prompt by prompt."""
    spec = [r["timing"]["speculative_ms"] / r["generated_tokens"] for r in rs]
    res = {"prompts": len(rs), "spec_ms_tok": mean_ci(spec),
           "per_prompt": {"ms_per_token": spec,
                          "tokens_per_step": [sum(r["step_tokens"]) / r["steps"] for r in rs]}}
    base = rs if base is None else base
    if len(base) == len(rs) and all("autoregressive_ms" in b["timing"] for b in base):
        ar = [b["timing"]["autoregressive_ms"] / b["generated_tokens"] for b in base]
        res["ar_ms_tok"] = mean_ci(ar)
        res["speedup"] = mean_ci([a / s for a, s in zip(ar, spec)])
        res["per_prompt"]["plain_ms_per_token"] = ar
    steps = [s for r in rs for s in r["step_tokens"]]
    m, lo, hi = mean_ci(steps)
    # a step outputs at least one token: a t interval over few steps reaches below (issue 27)
    res["tokens_step"] = (m, lo if math.isnan(lo) else max(lo, 1.0), hi)
    res["tokens_s"] = mean_ci([1000.0 / x for x in spec])
    split = {}
    for key in ("steps_ms", "draft_forward_ms", "target_forward_ms", "draft_proposals_ms",
                "target_inputs_ms", "verify_ms", "commit_ms", "outside_forwards_ms"):
        split[key] = sum(r["timing"]["step_split"][key] for r in rs)
    nsteps = sum(r["steps"] for r in rs)
    res["per_step_ms"] = {k: v / nsteps for k, v in split.items()}
    res["outside_share"] = split["outside_forwards_ms"] / split["steps_ms"]
    res["steps"] = nsteps
    return res


def fmt_ci(t):
    if math.isnan(t[1]):
        return "%.3f (no CI)" % t[0]
    return "%.3f [%.3f, %.3f]" % t


def fmt_x(t):
    return "%.2fx (no CI)" % t[0] if math.isnan(t[1]) else "%.2fx [%.2f, %.2f]" % t


def verdict(what, predicted, m, prompts):
    """The prediction against the measured (mean, lo, hi) over `prompts` prompts, in words, and
    whether it lies inside the 95% CI (None when too few prompts make that no test)."""
    mean, lo, hi = m
    gap = 100.0 * (predicted - mean) / mean
    if prompts < MIN_CI_PROMPTS:
        return ("predicted %s %.3fx, measured %.3fx (%+.1f%%) over %d prompt%s: too few for a "
                "95%% CI test (%s; at least %d prompts)" % (
                    what, predicted, mean, gap, prompts, "" if prompts == 1 else "s",
                    "a single run has no CI" if prompts == 1 else
                    "%d degree%s of freedom, t = %.1f" % (prompts - 1, "" if prompts == 2 else "s",
                                                        t975(prompts - 1)),
                    MIN_CI_PROMPTS), None)
    within = lo <= predicted <= hi
    return ("predicted %s %.3fx %s the measured 95%% CI [%.3f, %.3f] over %d prompts (%+.1f%% "
            "from the mean %.3f)" % (what, predicted, "inside" if within else "outside", lo, hi,
                                     prompts, gap, mean), within)


def svg(out, curves):
    """tokens/s against tree size: predicted (line) and measured (points, 95% CI bars)."""
    W, H, L, R, T, B = 760, 440, 70, 200, 40, 55
    xs = [n for c in curves for n, _ in c["pred"]] + [p[0] for c in curves for p in c["meas"]]
    ys = [y for c in curves for _, y in c["pred"]] + [p[1] for c in curves for p in c["meas"]]
    xmax = max(xs)
    ymax = max(ys) * 1.25
    lx = lambda n: L + (W - L - R) * math.log2(n) / math.log2(xmax)
    ly = lambda y: H - B - (H - T - B) * y / ymax
    colors = ["#1f77b4", "#d62728"]
    o = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" '
         'font-size="12">' % (W, H), '<rect width="100%" height="100%" fill="white"/>',
         '<text x="%d" y="22" font-size="14">Tokens per second against tree size (CPU, %s)</text>'
         % (L, curves[0]["device"])]
    base = 10 ** math.floor(math.log10(ymax / 5))
    step = next(m * base for m in (1, 2, 5, 10) if ymax / (m * base) <= 8)
    y = 0.0
    while y <= ymax:
        o.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/>' % (L, W - R, ly(y), ly(y)))
        o.append('<text x="%d" y="%.1f" text-anchor="end">%g</text>' % (L - 6, ly(y) + 4, y))
        y += step
    n = 1
    while n <= xmax:
        o.append('<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#ddd"/>' % (lx(n), lx(n), T, H - B))
        o.append('<text x="%.1f" y="%d" text-anchor="middle">%d</text>' % (lx(n), H - B + 16, n))
        n *= 2
    o.append('<text x="%d" y="%d" text-anchor="middle">tree size (nodes, root included; log scale)</text>'
             % ((L + W - R) // 2, H - 18))
    o.append('<text x="18" y="%d" transform="rotate(-90 18 %d)" text-anchor="middle">tokens / s</text>'
             % ((T + H - B) // 2, (T + H - B) // 2))
    for ci, c in enumerate(curves):
        col = colors[ci % len(colors)]
        pts = " ".join("%.1f,%.1f" % (lx(n), ly(y)) for n, y in c["pred"])
        o.append('<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>' % (pts, col))
        dx = (ci - (len(curves) - 1) / 2.0) * 6.0   # side by side at the same size
        px = lambda n: lx(n) + dx
        for n, m, lo, hi in c["meas"]:
            if not math.isnan(lo):   # one prompt: a point without a CI bar
                lo, hi = max(lo, 0.0), min(hi, ymax)
                o.append('<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="%s" '
                         'stroke-width="1.5"/>' % (px(n), px(n), ly(lo), ly(hi), col))
                for yy in (lo, hi):
                    o.append('<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="%s"/>'
                             % (px(n) - 4, px(n) + 4, ly(yy), ly(yy), col))
            o.append('<circle cx="%.1f" cy="%.1f" r="4" fill="%s"/>' % (px(n), ly(m), col))
        if c.get("chosen"):
            n, y = c["chosen"]
            o.append('<circle cx="%.1f" cy="%.1f" r="8" fill="none" stroke="%s" stroke-width="2"/>'
                     % (lx(n), ly(y), col))
        yl = T + 10 + 46 * ci
        o.append('<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="%s" stroke-width="2"/>'
                 % (W - R + 12, W - R + 36, yl, yl, col))
        o.append('<text x="%d" y="%d">%s predicted</text>' % (W - R + 40, yl + 4, c["label"]))
        o.append('<circle cx="%d" cy="%d" r="4" fill="%s"/>' % (W - R + 24, yl + 18, col))
        o.append('<text x="%d" y="%d">measured, 95%% CI</text>' % (W - R + 40, yl + 22))
    o.append('<text x="%d" y="%d" fill="#555">circled: the planner\'s choice</text>'
             % (W - R + 12, T + 10 + 46 * len(curves)))
    o.append("</svg>")
    with open(os.path.join(out, "speedup.svg"), "w") as f:
        f.write("\n".join(o) + "\n")


def report(out, prompts, sizes, sweep_prompts):
    tprof = load(os.path.join(out, "profile_target.json"))
    dprof = load(os.path.join(out, "profile_draft.json"))
    summary = {"format": "sequoia-speedup-summary", "version": 1, "settings": {}}
    curves = []
    lines = []
    p = lines.append
    for setting, (mode, temp, curve) in SETTINGS.items():
        plan = load(os.path.join(out, "plan_%s.json" % setting))
        hw = plan["hardware"]
        t1 = hw["target_ms_1"]
        p("\n== T = %g (%s verification, curve %s)" % (temp, mode, curve))
        p("%-9s %10s %9s %24s %11s %28s %28s %9s %26s" % (
            "tree", "size/depth", "F pred", "tokens/step measured", "ms/tok pred",
            "ms/tok measured [95% CI]", "plain ms/tok measured", "speedup", "measured speedup [95% CI]"))
        rows = {}
        for kind in ("optimal", "chain", "kxl"):
            pl = plan if kind == "optimal" else load(os.path.join(out, "plan_%s_%s.json" % (setting, kind)))
            pred_step = step_ms(tprof, dprof, pl)
            pred_tok = pred_step / pl["expected_tokens"]
            m = measured(runs(out, "%s_%s" % (setting, kind), prompts),
                         runs(out, "%s_optimal" % setting, prompts))
            row = {"size": pl["size"], "depth": pl["depth"], "level_widths": pl["level_widths"],
                   "predicted_tokens_per_step": pl["expected_tokens"],
                   "measured_tokens_per_step": m["tokens_step"],
                   "predicted_step_ms": pred_step, "predicted_ms_per_token": pred_tok,
                   "measured_ms_per_token": m["spec_ms_tok"],
                   "predicted_plain_ms_per_token": t1,
                   "measured_plain_ms_per_token": m["ar_ms_tok"],
                   "predicted_speedup": t1 / pred_tok, "measured_speedup": m["speedup"],
                   "prompts": m["prompts"], "steps": m["steps"],
                   "per_step_ms": m["per_step_ms"], "outside_forwards_share": m["outside_share"],
                   "per_prompt": m["per_prompt"]}
            if kind == "optimal":
                row["planner_predicted_speedup"] = hw["predicted_speedup"]
            rows[kind] = row
            p("%-9s %10s %9.3f %24s %11.3f %28s %28s %8.2fx %26s" % (
                kind, "%d/%d" % (pl["size"], pl["depth"]), pl["expected_tokens"],
                fmt_ci(m["tokens_step"]), pred_tok, fmt_ci(m["spec_ms_tok"]),
                "%.3f (pred %.3f)" % (m["ar_ms_tok"][0], t1), t1 / pred_tok,
                fmt_x(m["speedup"])))
        o = rows["optimal"]
        ps = o["predicted_speedup"]
        close = abs(ps - o["measured_speedup"][0]) <= 0.10 * o["measured_speedup"][0]
        text, within = verdict("speedup", ps, o["measured_speedup"], o["prompts"])
        p(text)
        best = min(rows, key=lambda k: rows[k]["measured_ms_per_token"][0])
        p("fastest measured: %s" % best)
        ps_ = o["per_step_ms"]
        p("optimal tree, per step (ms): target forward %.3f, draft forwards %.3f; outside the "
          "forwards %.3f = draft proposals %.3f + target inputs %.3f + verification %.3f + KV "
          "compaction %.3f (%.1f%% of the step)" % (
              ps_["target_forward_ms"], ps_["draft_forward_ms"], ps_["outside_forwards_ms"],
              ps_["draft_proposals_ms"], ps_["target_inputs_ms"], ps_["verify_ms"],
              ps_["commit_ms"], 100 * o["outside_forwards_share"]))
        # tree-size sweep: predicted line at every size, measured points
        pred, meas = [], []
        n = 1
        while os.path.exists(os.path.join(out, "sweep", "plan_%s_n%d.json" % (setting, n))):
            sp = load(os.path.join(out, "sweep", "plan_%s_n%d.json" % (setting, n)))
            pred.append((n, 1000.0 * sp["expected_tokens"] / step_ms(tprof, dprof, sp)))
            n += 1
        for n in sizes:
            rs = runs(out, "%s_n%d" % (setting, n), sweep_prompts)
            if rs:
                t = measured(rs)["tokens_s"]
                meas.append((n, t[0], t[1], t[2]))
        curves.append({"label": "T = %g" % temp, "pred": pred, "meas": meas,
                       "device": tprof.get("device", "CPU"),
                       "chosen": (o["size"], 1000.0 / o["measured_ms_per_token"][0])})
        summary["settings"][setting] = {"mode": mode, "temperature": temp, "curve": curve,
                                        "planner": hw, "rows": rows,
                                        "predicted_inside_ci95": within,
                                        "predicted_within_10pct": close,
                                        "fastest_measured": best,
                                        "sweep": {"predicted_tokens_per_s": pred,
                                                  "measured_tokens_per_s_ci95": meas}}
    svg(out, curves)
    save(os.path.join(out, "summary.json"), summary)
    text = "\n".join(lines) + "\n"
    with open(os.path.join(out, "results.txt"), "a") as f:
        f.write(text)
    sys.stdout.write(text)


def main():
    if len(sys.argv) >= 5 and sys.argv[1] == "baselines":
        baselines(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    elif len(sys.argv) >= 6 and sys.argv[1] == "report":
        report(sys.argv[2], int(sys.argv[3]), [int(x) for x in sys.argv[4].split()],
               int(sys.argv[5]))
    else:
        sys.stderr.write(__doc__)
        sys.exit(64)


if __name__ == "__main__":
    main()
