"""Seeds added until the ranking decides (`EvalSettings.seeds_until_separable`; `envcoder auto`'s final evaluation).

Round 0 is the run itself (`settings.out`, `settings.seeds`). While the best candidate is not separable at 95% from
the runner-up (`envcoder.runs.ranking.separation`: by the final fitness, or by learning speed where the fitness is
tied) and the contenders have fewer than `seeds_until_separable` seeds, one more round trains the contenders (the
best and every candidate it is not separated from, so that a new runner-up has its seeds too) with as many new
seeds as round 0 had, fewer where the budget ends, all in one process, into `out/seed_rounds/round_K/`: a complete
run directory.
The ranking of every round's groups together is `out/results.json`; its `seed_rounds` says how many seeds each
round added and why they stopped.

A resumed run reads back the rounds that finished and starts a round that was cut off again from its beginning.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

from rich.console import Console

from envcoder.candidates import TASK_DEFAULT
from envcoder.runs.directory import RunDirectory
from envcoder.runs.report import write_report
from envcoder.runs.results import RunResults, print_results, ranked_results
from envcoder.text import console as text_console


def evaluate_until_separable(plan, evaluate_once, console: Console | None = None, resume: bool = False,
                             validator=None) -> RunResults:
    """`evaluate_once` (`envcoder.runs.evaluation`'s: one round of seeds) of `plan` (`envcoder.runs.job.Plan`),
    then rounds of new seeds until the best is separable or the budget (`seeds_until_separable` seeds per
    candidate) is spent; the results of all rounds, ranked together."""
    settings = plan.settings
    budget = settings.seeds_until_separable
    _check(settings)
    console = console or text_console()
    out = Path(settings.out)
    if resume and (out / "results.json").exists():
        first = RunResults.read(out)
        first = dataclasses.replace(first, groups=[g for g in first.groups if g.seed in settings.seeds])
    else:
        first = evaluate_once(plan, console, resume, validator)
    task, fitness = plan.task, plan.fitness
    import jax

    run_dir = RunDirectory(out, resume=True, writes=jax.process_index() == 0)  # a multi-host run's process 0 writes

    def ranked(groups) -> RunResults:
        return ranked_results(task.name, first.fitness, fitness, settings.schedule, groups, first.failures,
                              first.timings, lambda name: run_dir.read_series(name, "task_fitness"),
                              settings.rank_by, first.own_control, task.max_episode_length)
    rounds = [{"round": 0, "seeds": list(settings.seeds), "candidates": [r.name for r in first.ranking], "run": "."}]
    groups, results, used = list(first.groups), first, max(settings.seeds)
    while True:
        split = results.separation
        if split is None:
            stopped = "no runner-up to separate the best from"
            break
        contenders = [split["best"]] + split["undecided"]
        if split["separable"]:
            stopped = "separable"
            break
        have = max(r.seeds for r in results.ranking if r.name in contenders)
        new = min(len(settings.seeds), budget - have)
        if new <= 0:
            stopped = "budget"
            break
        seeds = tuple(range(used + 1, used + 1 + new))
        used = seeds[-1]
        k = len(rounds)
        console.rule(f"seed round {k}: {len(contenders)} candidate(s) not yet separated × {new} new seed(s)")
        rounds.append({"round": k, "seeds": list(seeds), "candidates": contenders,
                       "run": f"seed_rounds/round_{k}"})  # in the run directory
        extra = _round(plan, out, k, contenders, seeds, console, validator, evaluate_once)
        groups += [g for g in extra.groups if g.candidate in contenders]
        results = ranked(groups)
    results = dataclasses.replace(results, seed_rounds={"max_seeds": budget, "rounds": rounds, "stopped": stopped,
                                                        "verdict": _verdict(results, stopped, budget, len(rounds))})
    if len(rounds) > 1:
        print_results(console, results)
    else:
        console.print(results.seed_rounds["verdict"], highlight=False)
    run_dir.write_results(results.to_json())
    if run_dir.writes and (out / "metrics.csv").exists():  # the report draws round 0's training curves
        write_report(out)
    return results


def _check(settings) -> None:
    """A `ValueError` for settings that rounds of seeds cannot serve."""
    if settings.schedule != "flat" or settings.cross:
        raise ValueError("--seeds-until-separable adds seeds to whole candidates of a flat schedule: it does not "
                         "take --schedule halving or --cross")
    if settings.seeds_until_separable < len(settings.seeds):
        raise ValueError(f"--seeds-until-separable {settings.seeds_until_separable} is fewer than the "
                         f"{len(settings.seeds)} seeds of the first round (--seeds)")


def _verdict(results: RunResults, stopped: str, budget: int, rounds: int) -> str:
    """Why the rounds stopped, in words."""
    best = results.ranking[0]
    runner = (results.separation or {}).get("runner_up")
    verdict = {"separable": f"{best.name} is separable at 95% from the runner-up {runner} after {best.seeds} seed(s)",
               "budget": f"the seed budget ({budget} per candidate) is spent: {best.name} is not separable at 95% "
                         f"from the runner-up {runner}",
               "no runner-up to separate the best from": f"{best.name} has no runner-up to separate it from"}[stopped]
    return f"seeds added in {rounds - 1} round(s): {verdict}" if rounds > 1 else verdict


def _round(plan, out: Path, k: int, contenders: list[str], seeds: tuple[int, ...], console, validator,
           evaluate_once) -> RunResults:
    """Round `k`: the contenders' files (from the run's own copies) trained with `seeds`; a finished round is read
    back, one restarted after a hang goes on without the hung candidate, one that was cut off otherwise starts
    over."""
    folder = out / "seed_rounds" / f"round_{k}"
    inputs = out / "seed_rounds" / f"round_{k}_candidates"
    def round_plan():  # once its files are in place: the plan counts them
        return plan.with_settings(functions=inputs, out=folder, seeds=seeds, task_default=TASK_DEFAULT in contenders,
                                  seeds_until_separable=None)
    if (folder / "results.json").exists():
        return RunResults.read(folder)
    if (folder / "hung.json").exists() and (folder / "config.json").exists():  # restarted without a hung candidate
        return evaluate_once(round_plan(), console, True, validator)
    for path in (folder, inputs):
        if path.exists():
            shutil.rmtree(path)
    inputs.mkdir(parents=True)
    for name in contenders:  # a sweep's variant is trained with its whole file: every variant of it is then ranked
        if name != TASK_DEFAULT:
            stem = name.split("[")[0]
            shutil.copyfile(out / "candidates" / f"{name}.py", inputs / f"{stem}.py")
    return evaluate_once(round_plan(), console, False, validator)
