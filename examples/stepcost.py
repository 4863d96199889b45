#!/usr/bin/env python3
"""Helpers of examples/stepcost.sh (issue 26, "Prediction of wall-clock time within 10%").

  stepcost.py strip IN.json OUT.json
      the profile without its step section (the steady-stream model the planner used before)
  stepcost.py report OUT "PAIRS" "THREADS" "SETTINGS" PROMPTS
      predicted against measured tokens/s for every pair, thread count and setting; writes
      OUT/summary.json and prints the table
"""
import json
import math
import os
import sys


def load(p):
    with open(p) as f:
        return json.load(f)


def interp(points, x):
    """the profile lookup (libsequoia/format/profile.c): linear inside, constant outside"""
    pts = sorted((q["tokens"], q["median_ms"]) for q in points)
    if x <= pts[0][0]:
        return pts[0][1]
    if x >= pts[-1][0]:
        return pts[-1][1]
    for (a, ta), (b, tb) in zip(pts, pts[1:]):
        if a <= x <= b:
            return ta + (tb - ta) * (x - a) / (b - a)
    return pts[-1][1]


def widths(plan):
    """the plan's level widths, root included"""
    return list(plan["level_widths"])


def steady_step_ms(plan, tprof, dprof):
    """t_target(n) + t_draft(F) + sum_{l=1..L-2} t_draft(w_l): the model without a step section"""
    w = widths(plan)
    n = sum(w)
    F = plan["expected_tokens"]
    t = interp(tprof["points"], n)
    if n == 1:
        return t
    t += interp(dprof["points"], F)
    for l in range(1, len(w) - 1):
        t += interp(dprof["points"], w[l])
    return t


def decode_rate(r):
    """a run report's decode rate, tokens/s: the tokens the steps produced over the steps' time
    (the prompt's prefill and the start-up left out, as the ladder's "decode" timing does:
    runtime/report.h)"""
    return 1000.0 * sum(r["step_tokens"]) / r["timing"]["step_split"]["steps_ms"]


def mean_ci(xs):
    n = len(xs)
    m = sum(xs) / n
    if n < 2:
        return m, float("nan"), float("nan")
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (n - 1))
    # t quantile 0.975 for small n
    tq = {2: 12.71, 3: 4.30, 4: 3.18, 5: 2.78, 6: 2.57, 7: 2.45, 8: 2.36, 9: 2.31, 10: 2.26,
          12: 2.20, 16: 2.13, 20: 2.09, 32: 2.04}
    q = tq.get(n, 2.0 if n > 32 else 2.26)
    h = q * sd / math.sqrt(n)
    return m, m - h, m + h


def report(out, pairs, threads, settings, prompts):
    rows = []
    for pair in pairs.split():
        P = os.path.join(out, pair)
        for th in threads.split():
            tprof = load(os.path.join(P, "profile_target_t%s.json" % th))
            dprof = load(os.path.join(P, "profile_draft_t%s.json" % th))
            for s in settings.split():
                tag = "t%s_%s" % (th, s)
                plan = load(os.path.join(P, "plan_%s.json" % tag))
                hw = plan["hardware"]
                steady_plan = load(os.path.join(P, "plan_%s_steady.json" % tag))
                reps = []
                for i in range(prompts):
                    p = os.path.join(P, "runs", "report_%s_%d.json" % (tag, i))
                    if os.path.exists(p):
                        reps.append(load(p))
                if not reps:
                    continue
                # decode rate: the tokens the steps produced over the steps' time (the prompts'
                # prefill and the start-up left out, as the ladder's "decode" timing does:
                # runtime/report.h); wall: generated tokens over the whole generation
                spec = [decode_rate(r) for r in reps]
                wall = [1000.0 * r["generated_tokens"] / r["timing"]["speculative_ms"] for r in reps]
                # the same from the median step (batch.decode.step_ms_median): what a loaded
                # machine's preempted steps do not move, the cost model's own accuracy
                med = [1000.0 * (sum(r["step_tokens"]) / r["steps"]) /
                       r["batch"]["decode"]["step_ms_median"] for r in reps
                       if r.get("batch") and r["batch"].get("decode")]
                # and from the 10th-percentile step: the steps no other process interrupted
                p10 = [r["batch"]["decode"]["step_p10_ms"] for r in reps
                       if r.get("batch") and r["batch"].get("decode")
                       and "step_p10_ms" in r["batch"]["decode"]]
                p10 = p10 or [r["batch"]["decode"]["step_ms_p10"] for r in reps
                              if r.get("batch") and r["batch"].get("decode")
                              and "step_ms_p10" in r["batch"]["decode"]]
                plain = [1000.0 * r["generated_tokens"] / r["timing"]["autoregressive_ms"]
                         for r in reps if "autoregressive_ms" in r["timing"]]
                steps = sum(r["steps"] for r in reps)
                toks = sum(sum(r["step_tokens"]) for r in reps)
                split = {k: sum(r["timing"]["step_split"][k] for r in reps) / steps
                         for k in ("steps_ms", "draft_forward_ms", "target_forward_ms",
                                   "outside_forwards_ms")}
                pred = hw["tokens_per_second"]
                pred_plain = 1000.0 / hw["target_ms_1"]
                st_ms = steady_step_ms(plan, tprof, dprof)
                pred_steady = 1000.0 * plan["expected_tokens"] / st_ms
                m = mean_ci(spec)
                mw = mean_ci(wall)
                # the wall-clock prediction adds both models' prefill of the prompt (their
                # steady-stream forward over its tokens) to N / F steps
                plen = reps[0]["setup"].get("prompt_tokens", 64)
                ntok = reps[0]["setup"].get("max_new_tokens", 256)
                prefill = interp(tprof["points"], plen) + interp(dprof["points"], plen)
                pred_wall = 1000.0 * ntok / (ntok / plan["expected_tokens"] * hw["time_per_step_ms"]
                                             + prefill)
                mp = mean_ci(plain) if plain else (float("nan"),) * 3
                row = {
                    "pair": pair, "threads": int(th), "setting": s,
                    "tree": {"size": sum(widths(plan)), "level_widths": widths(plan)},
                    "predicted_tokens_per_step": plan["expected_tokens"],
                    "measured_tokens_per_step": toks / steps,
                    "predicted_step_ms": hw["time_per_step_ms"],
                    "measured_step_ms": split["steps_ms"],
                    "measured_step_split_ms": split,
                    "predicted_tokens_per_s": pred,
                    "measured_tokens_per_s": list(m),
                    "measured_wall_tokens_per_s": list(mw),
                    "measured_median_step_tokens_per_s": list(mean_ci(med)) if med else None,
                    "median_step_ratio": mean_ci(med)[0] / pred if med else None,
                    "measured_p10_step_ms": sum(p10) / len(p10) if p10 else None,
                    "predicted_wall_tokens_per_s": pred_wall,
                    "wall_ratio": mw[0] / pred_wall,
                    "ratio_measured_over_predicted": m[0] / pred,
                    "within_10pct": abs(m[0] / pred - 1) <= 0.10,
                    "steady_model_predicted_tokens_per_s": pred_steady,
                    "steady_model_ratio": m[0] / pred_steady,
                    "steady_model_own_plan": {"size": sum(widths(steady_plan)),
                                              "tokens_per_s": steady_plan["hardware"]["tokens_per_second"]},
                    "predicted_plain_tokens_per_s": pred_plain,
                    "measured_plain_tokens_per_s": list(mp),
                    "plain_ratio": mp[0] / pred_plain if plain else None,
                    "prompts": len(reps), "steps": steps,
                    # the profiler's own verdict (profiler/stability.h; the script passes
                    # --force so that every row is measured)
                    "profiles_credible": bool(tprof.get("stability", {}).get("credible", True)
                                              and dprof.get("stability", {}).get("credible", True)),
                }
                rows.append(row)
    summary = {"format": "sequoia-stepcost-summary", "version": 1, "rows": rows}
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print("| pair | threads | setting | tree (widths) | tokens/step pred / meas | step ms pred / meas (mean; p10) "
          "| tokens/s predicted | measured decode [95% CI] | meas/pred | from the median step: "
          "meas, meas/pred | wall-clock with prefill: "
          "pred, meas, meas/pred | steady model: pred, meas/pred | plain tokens/s pred / meas (wall) "
          "| profiles credible |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        m = r["measured_tokens_per_s"]
        print("| %s | %d | %s | %d %s | %.3f / %.3f | %.3f / %.3f; %.3f | %.1f | %.1f [%.1f, %.1f] | "
              "**%.3f**%s | %.1f, %.3f | %.1f, %.1f, %.3f | %.1f, %.3f | %.1f / %.1f | %s |" % (
                  r["pair"], r["threads"], r["setting"], r["tree"]["size"],
                  r["tree"]["level_widths"], r["predicted_tokens_per_step"],
                  r["measured_tokens_per_step"], r["predicted_step_ms"], r["measured_step_ms"],
                  r["measured_p10_step_ms"] if r["measured_p10_step_ms"] else float("nan"),
                  r["predicted_tokens_per_s"], m[0], m[1], m[2],
                  r["ratio_measured_over_predicted"], "" if r["within_10pct"] else " (outside 10%)",
                  (r["measured_median_step_tokens_per_s"] or [float("nan")])[0],
                  r["median_step_ratio"] if r["median_step_ratio"] is not None else float("nan"),
                  r["predicted_wall_tokens_per_s"], r["measured_wall_tokens_per_s"][0],
                  r["wall_ratio"],
                  r["steady_model_predicted_tokens_per_s"], r["steady_model_ratio"],
                  r["predicted_plain_tokens_per_s"], r["measured_plain_tokens_per_s"][0],
                  "yes" if r["profiles_credible"] else "**no**"))
    ok = sum(r["within_10pct"] for r in rows)
    print("\ndecode rate within 10%%: %d of %d (step-cost model); steady-stream model: %d of %d; "
          "wall-clock within 10%%: %d of %d" % (
              ok, len(rows), sum(abs(r["steady_model_ratio"] - 1) <= 0.10 for r in rows), len(rows),
              sum(abs(r["wall_ratio"] - 1) <= 0.10 for r in rows), len(rows)))
    print("from the median step within 10%%: %d of %d" % (
        sum(r["median_step_ratio"] is not None and abs(r["median_step_ratio"] - 1) <= 0.10
            for r in rows), len(rows)))


def main():
    if len(sys.argv) >= 4 and sys.argv[1] == "strip":
        p = load(sys.argv[2])
        p.pop("step", None)
        with open(sys.argv[3], "w") as f:
            json.dump(p, f, indent=1)
    elif len(sys.argv) == 7 and sys.argv[1] == "report":
        report(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], int(sys.argv[6]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
