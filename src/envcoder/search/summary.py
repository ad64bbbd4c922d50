"""`envcoder auto`'s summary in words (`summary.md`)."""

from __future__ import annotations

import math


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def summary_text(summary: dict) -> str:
    better = "higher" if summary["higher_is_better"] else "lower"
    lines = [f"# envcoder auto: {summary['task']} — {summary['task_description']}", "",
             f"Proposer {summary['proposer']}; {summary['evaluated']} candidates evaluated over "
             f"{len(summary['iterations'])} iteration(s); task fitness `{summary['fitness']}` ({better} is better).", ""]
    best = summary["best"]
    if best is None:
        lines.append("No candidate could be trained: see iter_*/drafts.json for the reasons.")
    else:
        ci = f" (95% CI [{best['ci_low']:.4g}, {best['ci_high']:.4g}])" if best["seeds"] > 1 else ""
        lines.append(f"Best: **{best['name']}** (iteration {best['iteration'] + 1}), {summary['fitness']} "
                     f"{best['fitness_mean']:.4g}{ci} over {best['seeds']} seed(s) in the final evaluation; "
                     f"its code is best.py.")
        if summary.get("task_default"):
            lines += ["", summary["task_default"]["text"]]
        if summary.get("final_seeds"):
            lines += ["", f"Final evaluation: {summary['final_seeds']['verdict']}."]
        lines += ["", "| final rank | candidate | task fitness | 95% CI | seeds | AUC |", "|---|---|---|---|---|---|"]
        for i, r in enumerate(summary["final_ranking"], 1):
            auc = f"{r['auc']:.4g}" if _finite(r.get("auc")) else "-"
            lines.append(f"| {i} | {r['name']} | {r['fitness_mean']:.4g} | [{r['ci_low']:.4g}, {r['ci_high']:.4g}] "
                         f"| {r['seeds']} | {auc} |")
    lines += ["", "| iteration | valid / attempts | best | best fitness |", "|---|---|---|---|"]
    for it in summary["iterations"]:
        fit = f"{it['best_fitness']:.4g}" if _finite(it["best_fitness"]) else "-"
        lines.append(f"| {it['iteration'] + 1} | {it['valid']} / {it['attempts']} | {it['best'] or '-'} | {fit} |")
    cost = "unknown (no list price for this model; pass --price)" if summary["cost_usd"] is None \
        else f"${summary['cost_usd']:.2f}"
    lines += ["", f"Proposer calls: {summary['proposer_calls']} ({summary['failed_calls']} failed); tokens in "
                  f"{summary['input_tokens']:,}, out {summary['output_tokens']:,}; estimated cost {cost}."]
    return "\n".join(lines) + "\n"
