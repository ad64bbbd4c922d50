"""One `envcoder auto` search's progress, drawn from its run directory: every candidate's fitness in each stage (a
population run's copies, then each halving rung's sets of constants), the best proposal's and the best starting
file's beside them, and the final evaluation's best file, best start and task default with their 95% intervals.

    python benchmarks/plot_search.py RUN OUT.png

(the guide's picture: `docs/guide/auto.md`, from `envcoder auto --task Cartpole --initial
benchmarks/search_starts/cartpole` on the 2-core CPU)."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path


def stages(run: Path) -> list[dict]:
    """Each evaluation of the search in order: its label and its candidates' fitness, split into starts' and
    proposals' (a starting file's candidates are named `init_…`)."""
    out = []
    for path in sorted(run.glob("iter_*/iteration.json")):
        record = json.loads(path.read_text())
        k = record["iteration"] + 1
        rows = [r for r in record["table"] if r["fitness"] is not None]
        for rung in sorted({r.get("rung") or 0 for r in rows}):
            here = [r for r in rows if (r.get("rung") or 0) == rung]
            label = f"it {k}\npopulation" if rung == 0 else f"it {k}\nrung {rung}"
            start = [r["fitness"] for r in here if re.match(r"^(it\d\d_)?init_", r["name"])]
            found = [r["fitness"] for r in here if not re.match(r"^(it\d\d_)?init_", r["name"])]
            out.append({"label": label, "start": start, "found": found})
    return out


def final(run: Path) -> list[tuple[str, float, float, float]]:
    """The final evaluation's best file, best start and task default: (label, mean, CI low, CI high)."""
    summary = json.loads((run / "summary.json").read_text())
    ranking = summary["final_ranking"]
    picks = []
    best = summary.get("best")
    if best:
        picks.append(("best find", best["name"]))
    start = next((r["name"] for r in ranking if r["name"].startswith("init_")), None)
    if start and (not best or start != best["name"]):
        picks.append(("best start", start))
    picks.append(("task default", "task_default"))
    by_name = {r["name"]: r for r in ranking}
    return [(label, by_name[n]["fitness_mean"], by_name[n]["ci_low"], by_name[n]["ci_high"])
            for label, n in picks if n in by_name]


def plot(run: Path, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summary = json.loads((run / "summary.json").read_text())
    steps = stages(run)
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4), gridspec_kw={"width_ratios": [3, 1]}, sharey=True)
    for x, stage in enumerate(steps):
        left.scatter([x - 0.12] * len(stage["found"]), stage["found"], s=8, color="#4c72b0", alpha=0.35)
        left.scatter([x + 0.12] * len(stage["start"]), stage["start"], s=8, color="#dd8452", alpha=0.35)
    xs = range(len(steps))
    left.plot([x - 0.12 for x in xs], [max(s["found"], default=float("nan")) for s in steps], "-o", color="#4c72b0",
              label="best proposal")
    left.plot([x + 0.12 for x in xs], [max(s["start"], default=float("nan")) for s in steps], "-o", color="#dd8452",
              label="best copy of a starting file")
    left.set_xticks(list(xs), [s["label"] for s in steps], fontsize=8)
    left.set_ylabel(f"{summary['fitness']} (each dot: a copy or a set of constants)")
    left.set_title("the search: each stage's candidates", fontsize=10)
    left.legend(fontsize=8, loc="lower right")
    colours = {"best find": "#4c72b0", "best start": "#dd8452", "task default": "#55a868"}
    for x, (label, mean, low, high) in enumerate(final(run)):
        right.errorbar([x], [mean], yerr=[[mean - low], [high - mean]], fmt="o", capsize=4, color=colours[label])
    right.set_xticks(range(len(final(run))), [p[0] for p in final(run)], fontsize=8)
    right.set_xlim(-0.5, len(final(run)) - 0.5)
    seeds = summary["best"]["seeds"] if summary.get("best") else 0
    right.set_title(f"final: fresh seeds ({seeds}), 95% CI", fontsize=10)
    fig.suptitle(f"envcoder auto on {summary['task']}", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="an `envcoder auto` run directory")
    parser.add_argument("out", type=Path, help="the picture to write (.png)")
    args = parser.parse_args()
    plot(args.run, args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
