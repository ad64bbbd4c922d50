"""Rank fidelity: does a cheap evaluation rank shaping candidates the way a long one does?

Every candidate of a task (the bundled ones plus `benchmarks/fidelity/<task>/`, written to span good and bad
shaping) is trained in one process at a long budget (the reference) and at cheap ones; each cheap ranking is
compared with the reference's by Spearman's and Kendall's rank correlation (95% bootstrap intervals over the
candidates), and by whether it finds the reference's best candidate (top-1) and how many of its best three
(top-3).

    python benchmarks/fidelity.py run --task Anymal --envs 1024 --seeds 1 --iterations 500 --out OUT/anymal_long
    python benchmarks/fidelity.py run --task Anymal --envs 256 --seeds 6 --iterations 500 --out OUT/anymal_256
    python benchmarks/fidelity.py run --task Anymal --envs 256 --seeds 6 --iterations 250 --schedule halving \
        --out OUT/anymal_halving
    python benchmarks/fidelity.py analyze --reference OUT/anymal_long --cheap OUT/anymal_256 \
        --halving OUT/anymal_halving --out docs/benchmarks/fidelity/anymal.json

One flat run gives several cheap settings: its ranking after k iterations (by the training episodes' task
fitness over the last quarter of those k, the rule the halving schedule drops candidates by) with its first
n seeds. The last iteration is also ranked by the run's deterministic evaluation. `run` keeps a run's small
records (config, metrics, results) in `--out` and its checkpoints in a temporary directory, or with `--run-dir`
in that directory, where running the same command again resumes a run that was cut off. A reference cut off
before its end (no results.json) is ranked by its training episodes over the last quarter of what it ran.
`--rescore` compares the settings of earlier `analyze` outputs with a new reference.

On a public Eureka run (its responses trained by `benchmarks/eureka_run.py --together` at full budget, the reference,
and at cheaper ones), `eureka` compares the orders within each Eureka iteration: every cheap setting's, and Eureka's
own, read from each response's training output (`env_iter{i}_response{j}.txt`, its last "saving next best
successes"), each against the reference ranked by its best training episodes (the papers' measure):

    python benchmarks/fidelity.py eureka PATH/eureka/2025-01-31_13-55-23 --reference OUT/full/iter0_1_2_3_4 \
        --cheap OUT/quarter/iter0_1_2_3_4 --iterations 125 250 500 --seeds 1 3 --out OUT/ant_fidelity.json

A run too large for one evaluation can be trained in pieces (`eureka_run.py --eureka-iterations 0 1`, then 2, ...,
each at the same budget): `--reference` and `--cheap` then take every piece (`--reference OUT/full/iter0_1
OUT/full/iter2 ...`), and a cheap setting of several pieces is one setting.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shutil
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
KEPT = ("config.json", "metrics.csv", "results.json", "failures.json")


def candidate_directory(task: str, into: Path, only: list[str] | None = None) -> Path:
    """The task's bundled candidates and the fidelity set's (or those named in `only`), in one directory."""
    into.mkdir(parents=True, exist_ok=True)
    examples = ROOT / "src" / "envcoder" / "examples"
    for source in (examples / task.lower(), ROOT / "benchmarks" / "fidelity" / task.lower()):
        for path in sorted(source.glob("*.py")):
            if only and path.stem not in only:
                continue
            if (into / path.name).exists():
                raise ValueError(f"{path.name} is in both src/envcoder/examples/{task.lower()} and benchmarks/fidelity")
            shutil.copy(path, into)
    return into


def run(args) -> None:
    from envcoder.runs.evaluation import EvalSettings, run_evaluation
    from envcoder.runs.eval_settings import settings_from_run

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        # A run too long for one sitting keeps its directory (checkpoints included) in --run-dir and resumes there.
        run_dir = Path(args.run_dir) if args.run_dir else Path(scratch) / "run"
        functions = run_dir.with_name(run_dir.name + "-functions") if args.run_dir else Path(scratch) / "functions"
        shutil.rmtree(functions, ignore_errors=True)
        candidate_directory(args.task, functions, args.only)
        missing = set(args.only or ()) - {p.stem for p in functions.glob("*.py")}
        if missing:
            raise ValueError(f"--only: no candidate file named {', '.join(sorted(missing))}")
        resume = (run_dir / "config.json").exists()
        if resume:
            settings = settings_from_run(run_dir)
        else:
            settings = EvalSettings(
                task=args.task, functions=functions, out=run_dir, shaper_types=(
                    "compute_reward", "compute_observation", "compute_torque", "compute_terminal"),
                envs_per_candidate=args.envs, iterations=args.iterations,
                seeds=tuple(range(args.first_seed, args.first_seed + args.seeds)),
                schedule=args.schedule, rungs=args.rungs,
                overrides={"save_frequency": args.save_frequency if args.run_dir else 0}, tensorboard=False)
        try:
            run_evaluation(settings, resume=resume)
        finally:
            for name in KEPT:
                if (settings.out / name).exists():
                    shutil.copy(settings.out / name, out / name)


# ---- analysis ------------------------------------------------------------------------------------------


def _read(run: Path):
    import csv

    rows = []  # a reference needs only its results (the kept runs in docs/ have no metrics.csv)
    if (run / "metrics.csv").exists():
        with open(run / "metrics.csv", newline="") as f:
            rows = list(csv.DictReader(f))
    results = None  # a run cut off before its end has no results.json
    if (run / "results.json").exists():
        results = json.loads((run / "results.json").read_text())
    return json.loads((run / "config.json").read_text()), results, rows


def training_scores(rows, iterations: int, seeds: int, window: float = 0.25) -> dict[str, float]:
    """Per candidate, the mean over its first `seeds` seeds of the training episodes' task fitness over the last
    `window` of the first `iterations` iterations (a seed without an ended episode there: its last one)."""
    first = iterations - max(1, math.ceil(window * iterations))
    per: dict[tuple[str, int], list[tuple[int, float]]] = {}
    for r in rows:
        it, seed = int(r["iteration"]), int(r["seed"])
        if it < iterations and seed < seeds and r["task_fitness"] != "":
            per.setdefault((r["candidate"], seed), []).append((it, float(r["task_fitness"])))
    scores: dict[str, list[float]] = {}
    for (name, _), values in per.items():
        recent = [v for it, v in values if it >= first]
        scores.setdefault(name, []).append(float(np.mean(recent)) if recent else values[-1][1])
    return {name: float(np.mean(v)) for name, v in scores.items()}


def evaluation_scores(results, seeds: int) -> dict[str, float]:
    """Per candidate, the mean deterministic evaluation over its first `seeds` seeds."""
    per: dict[str, list[float]] = {}
    for g in results["groups"]:
        if g["seed"] < seeds and g.get("eliminated_at_iteration") is None:
            per.setdefault(g["candidate"], []).append(g["task_fitness"])
    return {name: float(np.mean(v)) for name, v in per.items()}


def order(scores: dict[str, float], higher_is_better: bool) -> list[str]:
    sign = -1.0 if higher_is_better else 1.0
    return sorted(scores, key=lambda n: (math.isnan(scores[n]), sign * np.nan_to_num(scores[n])))


def agreement(cheap: list[str], reference: list[str], samples: int = 2000, seed: int = 0) -> dict:
    """Rank correlations of two orders of the same candidates (best first), with 95% bootstrap intervals over
    the candidates, and top-1 / top-3 agreement."""
    from scipy.stats import kendalltau, spearmanr

    names = list(reference)
    a = np.array([cheap.index(n) for n in names], dtype=float)
    b = np.arange(len(names), dtype=float)
    rng = np.random.default_rng(seed)
    boot = {"spearman": [], "kendall": []}
    for _ in range(samples):
        pick = rng.integers(0, len(names), len(names))
        if len(set(pick)) < 3:
            continue
        boot["spearman"].append(spearmanr(a[pick], b[pick]).statistic)
        boot["kendall"].append(kendalltau(a[pick], b[pick]).statistic)
    out = {"spearman": float(spearmanr(a, b).statistic), "kendall": float(kendalltau(a, b).statistic),
           "top1": cheap[0] == reference[0], "top3": len(set(cheap[:3]) & set(reference[:3])) / 3}
    for key, values in boot.items():
        values = np.array(values)[np.isfinite(values)]
        out[f"{key}_ci"] = [float(np.quantile(values, 0.025)), float(np.quantile(values, 0.975))]
    return out


def seconds_until(config, results, rows, iterations: int) -> float:
    """Wall seconds of a flat run's first `iterations` iterations: initialization, compile and first iteration,
    then each later iteration's env steps over its measured rate (no validation, no evaluation)."""
    timings = results["timings"]
    horizon = config[config.get("algo", "ppo")]["horizon_length"]
    steps: dict[int, list[float]] = {}
    for r in rows:
        steps.setdefault(int(r["iteration"]), []).append(float(r["env_steps_per_s"]))
    total = timings["init_s"] + timings["first_iteration_s"]
    for it in range(1, iterations):
        total += len(steps[it]) * config["envs_per_candidate"] * horizon / steps[it][0]
    return total


def reference_of(run: Path, by: str = "evaluation") -> tuple[dict, dict]:
    """The reference run's scores per candidate and what they are: its deterministic evaluation, or (`by`
    "training_best") the best of its training episodes' task fitness, the papers' measure; a run cut off before its
    end (no results.json) by its training episodes over the last quarter of what it ran."""
    config, results, rows = _read(run)
    if results is not None:
        seeds = len(config["seeds"])
        scores = (evaluation_scores(results, seeds) if by == "evaluation" else
                  {name: float(np.mean(v)) for name, v in _per_candidate(results, seeds, "training_best").items()})
        if not scores:
            raise SystemExit(f"{run}: no group of the reference has a best training episode (none ended in its "
                             "training); rank it by --reference-by evaluation, or train it longer")
        facts = {"higher_is_better": results["higher_is_better"], "seconds": results["timings"]["total_s"],
                 "iterations": config.get("train_iterations", config.get("iterations")),
                 "ranked_by": "evaluation" if by == "evaluation" else "best training episodes"}
    else:
        from envcoder.tasks import get_task

        reached = 1 + max(int(r["iteration"]) for r in rows)
        horizon = config[config.get("algo", "ppo")]["horizon_length"]
        first = (rows[0]["candidate"], rows[0]["seed"])
        facts = {"higher_is_better": get_task(config["task"]).get_fitness(config["fitness"])[1].higher_is_better,
                 "seconds": sum(len(config["candidates"]) * len(config["seeds"]) * config["envs_per_candidate"]
                                * horizon / float(r["env_steps_per_s"]) for r in rows
                                if (r["candidate"], r["seed"]) == first),
                 "iterations": reached, "ranked_by": "training episodes"}
        scores = training_scores(rows, reached, len(config["seeds"]))
    facts.update(envs=config["envs_per_candidate"], seeds=len(config["seeds"]),
                 of_iterations=config.get("train_iterations", config.get("iterations")), task=config["task"],
                 fitness=config["fitness"], device=config["versions"]["device"])
    return scores, facts


def _per_candidate(results, seeds: int, key: str) -> dict[str, list[float]]:
    per: dict[str, list[float]] = {}
    for g in results["groups"]:
        if g["seed"] < seeds and g.get("eliminated_at_iteration") is None and g.get(key) is not None:
            per.setdefault(g["candidate"], []).append(g[key])
    return per


def settings(args, higher: bool) -> list[dict]:
    """Every cheap setting of `args.cheap` (each run's first k iterations and first n seeds, by training episodes;
    its end by deterministic evaluation and by its best training episodes), `args.halving` and `args.rescore`,
    each with its order (best first), env steps and seconds."""
    found = []

    def add(setting: str, scores_or_order, envs: int, seeds: int, iterations: int, seconds: float, steps: float,
            note: str = ""):
        ranked = scores_or_order if isinstance(scores_or_order, list) else order(scores_or_order, higher)
        found.append({"setting": setting, "envs": envs, "seeds": seeds, "iterations": iterations,
                      "env_steps": steps, "seconds": seconds, "note": note, "order": ranked})

    for cheap in args.cheap:
        config, results, rows = _read(Path(cheap))
        envs, seeds_run = config["envs_per_candidate"], len(config["seeds"])
        total = config.get("train_iterations", config.get("iterations"))
        horizon = config[config.get("algo", "ppo")]["horizon_length"]
        candidates = len(config["candidates"])
        if not rows:  # a run kept without metrics.csv: its final deterministic evaluation only
            add(f"{envs} envs × {seeds_run} seed(s) × {total} it., deterministic evaluation",
                evaluation_scores(results, seeds_run), envs, seeds_run, total, results["timings"]["total_s"],
                candidates * seeds_run * envs * horizon * total)
            continue
        for k in args.iterations:
            if k > total:
                continue
            seconds = seconds_until(config, results, rows, k)
            for n in args.seeds:
                if n > seeds_run:
                    continue
                steps = candidates * n * envs * horizon * k
                if k == total:  # the whole run: its measured time (after validation), evaluation included
                    seconds = results["timings"]["total_s"]
                add(f"{envs} envs × {n} seed(s) × {k} it., training episodes", training_scores(rows, k, n),
                    envs, n, k, seconds * n / seeds_run, steps)
                if k == total:
                    add(f"{envs} envs × {n} seed(s) × {k} it., deterministic evaluation",
                        evaluation_scores(results, n), envs, n, k, seconds * n / seeds_run, steps)
                    best = _per_candidate(results, n, "training_best")
                    if best:
                        add(f"{envs} envs × {n} seed(s) × {k} it., best training episodes",
                            {name: float(np.mean(v)) for name, v in best.items()}, envs, n, k,
                            seconds * n / seeds_run, steps)
    for halving in args.halving:
        config, results, rows = _read(Path(halving))
        horizon = config[config.get("algo", "ppo")]["horizon_length"]
        rung_envs = {r["first_iteration"]: r["envs_per_candidate"] for r in results["timings"]["rungs"]}
        steps = 0.0
        for it in range(config.get("train_iterations", config.get("iterations"))):
            groups = sum(1 for r in rows if int(r["iteration"]) == it)
            steps += groups * rung_envs[max(s for s in rung_envs if s <= it)] * horizon
        add(f"halving: {config['envs_per_candidate']} envs × {len(config['seeds'])} seed(s) × {config['iterations']} "
            f"it. ({len(results['timings']['rungs'])} rungs)", [r["name"] for r in results["ranking"]],
            config["envs_per_candidate"], len(config["seeds"]), config["iterations"], results["timings"]["total_s"],
            steps)
    for earlier in getattr(args, "rescore", []):  # the orders of an earlier analysis, against this reference
        for s in json.loads(Path(earlier).read_text())["settings"]:
            add(s["setting"], s["order"], s["envs"], s["seeds"], s["iterations"], s["seconds"], s["env_steps"],
                s["note"] or f"run of {Path(earlier).name}")
    return found


def _summary(facts: dict, reference_scores: dict, reference: list[str], table: list[dict]) -> dict:
    return {"task": facts["task"], "fitness": facts["fitness"], "higher_is_better": facts["higher_is_better"],
            "reference": {"envs": facts["envs"], "seeds": facts["seeds"], "iterations": facts["iterations"],
                          "of_iterations": facts["of_iterations"], "ranked_by": facts["ranked_by"],
                          "seconds": facts["seconds"], "order": reference, "scores": reference_scores},
            "settings": table, "device": facts["device"]}


def _write(summary: dict, out) -> None:
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(summary, indent=1) + "\n")


def analyze(args) -> dict:
    reference_scores, facts = reference_of(Path(args.reference), getattr(args, "reference_by", "evaluation"))
    reference = order(reference_scores, facts["higher_is_better"])
    table = []
    for s in settings(args, facts["higher_is_better"]):
        # How much worse the cheap setting's pick is than the reference's best, in the reference's fitness.
        regret = abs(reference_scores[s["order"][0]] - reference_scores[reference[0]])
        common = [n for n in reference if n in s["order"]]  # a group without a best training episode is left out
        table.append({**s, **agreement([n for n in s["order"] if n in common], common), "top1_regret": regret})
    summary = _summary(facts, reference_scores, reference, table)
    _write(summary, args.out)
    print(markdown(summary))
    return summary


ITERATION = re.compile(r"env_iter(\d+)_response(\d+)")
BEST_SUCCESS = re.compile(r"saving next best successes:\s*([-0-9.eE+]+)")


def eureka_scores(run: Path) -> dict[str, float]:
    """Each response's own result in a Eureka run folder: the last "saving next best successes" of its training
    output (`env_iter{i}_response{j}.txt`), the best task metric its training reached, which Eureka ranks by. A
    response whose output has none (it did not train) is left out."""
    scores = {}
    for path in sorted(run.glob("env_iter*_response*.txt")):
        found = BEST_SUCCESS.findall(path.read_text(errors="replace"))
        if found and ITERATION.fullmatch(path.stem):
            scores[f"{path.stem}_rewardonly"] = float(found[-1])
    return scores


def per_iteration(ranked: list[str], reference: list[str]) -> dict:
    """`agreement` within each Eureka iteration (the responses both orders hold), and over the iterations: the mean
    Spearman, in how many the top-1 agrees, the mean top-3 share."""
    rows = {}
    for i in sorted({int(m.group(1)) for n in reference if (m := ITERATION.match(n))}):
        ref = [n for n in reference if n.startswith(f"env_iter{i}_") and n in ranked]
        if len(ref) >= 3:
            rows[i] = {"responses": len(ref), **agreement([n for n in ranked if n in ref], ref, samples=500)}
    spearman = [r["spearman"] for r in rows.values() if np.isfinite(r["spearman"])]
    return {"iterations": rows, "mean_spearman": float(np.mean(spearman)) if spearman else float("nan"),
            "top1": sum(r["top1"] for r in rows.values()), "of": len(rows),
            "mean_top3": float(np.mean([r["top3"] for r in rows.values()])) if rows else float("nan")}


def eureka(args) -> dict:
    """Rank fidelity on a Eureka run's own responses: per Eureka iteration, each cheap setting's order of its
    responses against the reference's, and Eureka's own order (from its training outputs) against the reference's.
    The reference, and each cheap setting, may come in pieces (`--reference A B ...`, `--cheap A B ...`): the run's
    iterations trained in separate evaluations at the same budget, each iteration's responses all in one piece."""
    reference_scores, facts = pieces_of([Path(r) for r in args.reference], args.reference_by)
    higher = facts["higher_is_better"]
    reference = order(reference_scores, higher)
    found = joined(settings(args, higher))
    logged = {n: v for n, v in eureka_scores(Path(args.run)).items() if n in reference_scores}
    if logged:
        responses = sum(bool(ITERATION.match(n)) for n in reference_scores)
        found.append({"setting": f"Eureka's own training (its log's best successes, 1 seed; {len(logged)} of "
                      f"{responses} responses)", "envs": None,
                      "seeds": 1, "iterations": None, "env_steps": None, "seconds": None, "note": "",
                      "order": order(logged, True)})
    table = [{**s, **per_iteration(s["order"], reference)} for s in found]
    summary = {**_summary(facts, reference_scores, reference, table), "eureka_run": Path(args.run).name,
               "eureka_scores": logged}
    _write(summary, args.out)
    print(eureka_markdown(summary))
    return summary


def pieces_of(runs: list[Path], by: str) -> tuple[dict, dict]:
    """`reference_of` over the pieces of one reference: their scores together (a task default or sparse reward
    trained in every piece: its mean), their seconds summed. The pieces must share the task, fitness and budget, and
    no Eureka response may be in two of them."""
    scores: dict[str, list[float]] = {}
    facts = None
    for run in runs:
        piece, piece_facts = reference_of(run, by)
        budget = {k: piece_facts[k] for k in ("task", "fitness", "envs", "seeds", "iterations", "ranked_by")}
        if facts is None:
            facts = piece_facts
        elif budget != (first := {k: facts[k] for k in budget}):
            raise SystemExit(f"{run}: its task or budget ({budget}) is not the first piece's ({first}): the pieces "
                             "of a reference train at one budget")
        else:
            facts = {**facts, "seconds": facts["seconds"] + piece_facts["seconds"]}
        for name, value in piece.items():
            if name in scores and ITERATION.match(name):
                raise SystemExit(f"{run}: {name} is in an earlier piece too; each response belongs to one piece")
            scores.setdefault(name, []).append(value)
    return {name: float(np.mean(values)) for name, values in scores.items()}, facts


def joined(found: list[dict]) -> list[dict]:
    """Settings of the same name from several pieces as one: their orders one after the other (an order is only
    read within a Eureka iteration, whose responses are all in one piece; the task default or sparse reward of every
    piece is kept where it first comes), their env steps and seconds summed. No Eureka response may be in two."""
    out: dict[str, dict] = {}
    for s in found:
        if s["setting"] not in out:
            out[s["setting"]] = dict(s)
            continue
        kept = out[s["setting"]]
        twice = [n for n in s["order"] if n in kept["order"] and ITERATION.match(n)]
        if twice:
            raise SystemExit(f"{twice[0]} is in two runs of the setting {s['setting']!r}: give --cheap each run "
                             "once, and the same budget's pieces only where each holds other iterations")
        kept["order"] = list(dict.fromkeys(kept["order"] + s["order"]))
        for key in ("env_steps", "seconds"):
            kept[key] = None if kept[key] is None or s[key] is None else kept[key] + s[key]
    return list(out.values())


def eureka_markdown(summary) -> str:
    ref = summary["reference"]
    lines = [f"Reference: {ref['envs']} envs × {ref['seeds']} seed(s) × {ref['iterations']} iterations "
             f"(ranked by {ref['ranked_by']}), {ref['seconds']:.0f} s, {len(ref['order'])} candidates", "",
             "| setting | env steps | seconds | mean Spearman per iteration | top-1 | mean top-3 |",
             "|---|---:|---:|---:|---:|---:|"]
    for s in summary["settings"]:
        steps = "–" if s["env_steps"] is None else f"{s['env_steps'] / 1e6:.0f} M"
        seconds = "–" if s["seconds"] is None else f"{s['seconds']:.0f}"
        lines.append(f"| {s['setting']} | {steps} | {seconds} | {s['mean_spearman']:.2f} | {s['top1']}/{s['of']} | "
                     f"{s['mean_top3'] * 3:.1f}/3 |")
    return "\n".join(lines)


def markdown(summary) -> str:
    ref = summary["reference"]
    lines = [f"Reference: {ref['envs']} envs × {ref['seeds']} seed(s) × {ref['iterations']} iterations "
             f"(ranked by {ref.get('ranked_by', 'evaluation')}), {ref['seconds']:.0f} s; order: "
             + ", ".join(f"{n} {ref['scores'][n]:.3f}" for n in ref["order"]), "",
             "| setting | env steps | seconds | Spearman [95% CI] | Kendall [95% CI] | top-1 (regret) | top-3 |",
             "|---|---:|---:|---|---|---|---:|"]
    for s in summary["settings"]:
        note = f" ({s['note']})" if s["note"] else ""
        lines.append(f"| {s['setting']}{note} | {s['env_steps'] / 1e6:.0f} M | {s['seconds']:.0f} | "
                     f"{s['spearman']:.2f} [{s['spearman_ci'][0]:.2f}, {s['spearman_ci'][1]:.2f}] | "
                     f"{s['kendall']:.2f} [{s['kendall_ci'][0]:.2f}, {s['kendall_ci'][1]:.2f}] | "
                     f"{'yes' if s['top1'] else 'no'} ({s['top1_regret']:.3f}) | {s['top3'] * 3:.0f}/3 |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="train every candidate of a task at one budget")
    r.add_argument("--task", required=True)
    r.add_argument("--envs", type=int, required=True)
    r.add_argument("--seeds", type=int, default=1)
    r.add_argument("--first-seed", type=int, default=0, help="seeds first-seed, first-seed + 1, ... (default 0)")
    r.add_argument("--only", nargs="+", default=None, metavar="NAME", help="train only these candidates")
    r.add_argument("--iterations", type=int, required=True)
    r.add_argument("--schedule", default="flat")
    r.add_argument("--rungs", type=int, default=None)
    r.add_argument("--out", required=True)
    r.add_argument("--run-dir", default=None,
                   help="keep the run directory here and checkpoint it; a run already there is resumed")
    r.add_argument("--save-frequency", type=int, default=50, help="iterations between checkpoints with --run-dir")
    a = sub.add_parser("analyze", help="compare cheap rankings with the reference's")
    a.add_argument("--reference", required=True)
    a.add_argument("--cheap", nargs="*", default=[])
    a.add_argument("--halving", nargs="*", default=[])
    a.add_argument("--iterations", type=int, nargs="+", default=[100, 300, 500])
    a.add_argument("--seeds", type=int, nargs="+", default=[1, 3, 6])
    a.add_argument("--rescore", nargs="*", default=[],
                   help="earlier `analyze` outputs: their settings' orders are compared with this reference")
    a.add_argument("--reference-by", choices=("evaluation", "training_best"), default="evaluation",
                   help="rank the reference by its deterministic evaluation or its best training episodes")
    a.add_argument("--out", default=None)
    e = sub.add_parser("eureka", help="per Eureka iteration, cheap rankings and Eureka's own against the reference")
    e.add_argument("run", help="the Eureka run folder (env_iter*_response*.txt, the responses' training outputs)")
    e.add_argument("--reference", required=True, nargs="+",
                   help="an `envcoder eval` of the run's responses at full budget, or its pieces (a few iterations "
                        "each, the same budget)")
    e.add_argument("--reference-by", choices=("evaluation", "training_best"), default="training_best",
                   help="rank the reference by its best training episodes (the papers' measure, the default) or its "
                        "deterministic evaluation")
    e.add_argument("--cheap", nargs="*", default=[])
    e.add_argument("--halving", nargs="*", default=[])
    e.add_argument("--iterations", type=int, nargs="+", default=[100, 300, 500])
    e.add_argument("--seeds", type=int, nargs="+", default=[1, 3])
    e.add_argument("--out", default=None)
    args = parser.parse_args()
    {"run": run, "analyze": analyze, "eureka": eureka}[args.command](args)


if __name__ == "__main__":
    main()
