"""The main job: load candidates, validate them, train them all in one process, rank by task fitness."""

from __future__ import annotations

import dataclasses
import platform
import sys
import time
from pathlib import Path
from typing import Sequence

import jax
import numpy as np
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

import envcoder
from envcoder.rl.config import PPOConfig, load_config_file
from envcoder.rl.trainer import GroupedTrainer
from envcoder.runs.directory import RunDirectory
from envcoder.runs.ranking import not_separable_from_best, rank
from envcoder.shaping.candidate import CandidateError, LoadFailure, cross_candidates, expand_sweeps, load_candidates
from envcoder.shaping.validate import sample_state, validate_candidate
from envcoder.sim import Simulator
from envcoder.tasks import get_task


class NoValidCandidatesError(RuntimeError):
    pass


@dataclasses.dataclass(frozen=True)
class EvalSettings:
    """What `envcoder eval` runs."""

    task: str
    """Task name (see `envcoder tasks`)."""
    functions: Path
    """Directory of candidate `.py` files."""
    out: Path
    """Run directory to create."""
    shaper_types: tuple[str, ...] = ("compute_reward",)
    """Shaping functions taken from the candidate files; the rest come from the task's defaults."""
    envs_per_candidate: int = 256
    """Parallel environments of each (candidate, seed) group."""
    iterations: int | None = None
    """PPO iterations; None takes the resolved config's `max_epochs`."""
    seeds: tuple[int, ...] = (0,)
    """Every candidate is trained once per seed, independently."""
    cross: bool = False
    """Form the product of candidate files across `shaper_types` instead of one candidate per file."""
    ppo: dict = dataclasses.field(default_factory=dict)
    """PPO settings that override the task's defaults and `config_file` (the `ppo.NAME=VALUE` overrides)."""
    config_file: Path | None = None
    """A YAML file of PPO settings applied over the task's `tasks/configs/<task>.yaml`."""
    fitness: str | None = None
    """Which of the task's fitness definitions ranks the candidates (None: the task's default)."""


def _versions() -> dict:
    import mujoco
    return {"envcoder": envcoder.__version__, "jax": jax.__version__, "mujoco": mujoco.__version__,
            "python": platform.python_version(), "device": str(jax.devices()[0].device_kind),
            "backend": jax.default_backend()}


def run_evaluation(settings: EvalSettings, console: Console | None = None) -> dict:
    """Run the whole job and return what `results.json` holds."""
    console = console or Console()
    task = get_task(settings.task)
    fitness_name, fitness = task.get_fitness(settings.fitness)
    layers = [(str(task.config_file), task.ppo_overrides)]
    if settings.config_file is not None:
        layers.append((str(settings.config_file), load_config_file(settings.config_file)))
    layers.append(("command-line override", settings.ppo))
    if settings.iterations is not None:
        layers.append(("--iterations", {"max_epochs": settings.iterations}))
    config = PPOConfig.resolve(layers)
    settings = dataclasses.replace(settings, iterations=config.max_epochs)
    candidates, failures = load_candidates(settings.functions, settings.shaper_types)
    candidates = expand_sweeps(candidates)
    if settings.cross:
        candidates = cross_candidates(candidates, settings.shaper_types)
    run_dir = RunDirectory(settings.out)  # fails now, before any compiling, if --out is taken

    simulator = Simulator(task.model_file, task.substeps)
    state = sample_state(task, simulator)
    valid, specs = [], {}
    for candidate in candidates:
        try:
            specs[candidate.name] = validate_candidate(task, simulator, candidate, state)
            valid.append(candidate)
        except CandidateError as err:
            failures.append(LoadFailure(file=str(candidate.path), name=candidate.name, error=str(err)))
        except Exception as err:  # noqa: BLE001 - whatever else a candidate does, it must not stop the others
            failures.append(LoadFailure(file=str(candidate.path), name=candidate.name,
                                        error=f"{candidate.path}: validation failed: {type(err).__name__}: {err}"))
    for failure in failures:
        console.print(f"[yellow]left out[/yellow] {failure.error}", highlight=False)
    run_dir.write_failures(failures)
    if not valid:
        raise NoValidCandidatesError(f"no valid candidates in {settings.functions} "
                                     f"({len(failures)} failed validation; see the messages above)")

    run_dir.write_config({
        "task": task.name, "functions": str(settings.functions), "shaper_types": list(settings.shaper_types),
        "envs_per_candidate": settings.envs_per_candidate, "iterations": settings.iterations,
        "seeds": list(settings.seeds), "cross": settings.cross, "fitness": fitness_name,
        "config_file": str(settings.config_file) if settings.config_file else None, "overrides": settings.ppo,
        "ppo": dataclasses.asdict(config),
        "candidates": [c.name for c in valid],
        "command": sys.argv, "versions": _versions(),
    })
    run_dir.write_candidates(valid)
    run_dir.write_ppo_config(config)

    trainer = GroupedTrainer(task, valid, specs, config, settings.envs_per_candidate, settings.seeds, simulator,
                             fitness=fitness_name)
    best_of = np.nanargmax if fitness.higher_is_better else np.nanargmin
    labels = trainer.labels
    # Reward components are reported only for the candidates that define them.
    own_components = {f"reward/{n}": np.array([n in spec.reward_components for spec in trainer.specs])
                      for n in trainer.component_names}
    reported_divergence = set()
    steps_per_iteration = len(labels) * settings.envs_per_candidate * config.horizon_length
    console.print(f"[bold]{task.name}[/bold]: {len(valid)} candidates × {len(settings.seeds)} seed(s) × "
                  f"{settings.envs_per_candidate} envs = {steps_per_iteration // config.horizon_length} environments "
                  f"in one process on {jax.devices()[0].device_kind}", highlight=False)

    start = time.perf_counter()
    train_state = trainer.init()
    last_fitness = np.full(len(labels), np.nan)
    timings = {"init_s": time.perf_counter() - start}
    columns = (TextColumn("[progress.description]{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[rate]}"), TimeElapsedColumn(), TimeRemainingColumn(),
               TextColumn("{task.fields[best]}"))
    with Progress(*columns, console=console, transient=False) as progress:
        bar = progress.add_task("training", total=settings.iterations, rate="compiling…", best="")
        steady_start = None
        for iteration in range(settings.iterations):
            tick = time.perf_counter()
            train_state, metrics = trainer.iteration(train_state)
            metrics = jax.device_get(metrics)
            elapsed = time.perf_counter() - tick
            for key, mask in own_components.items():
                metrics[key] = np.where(mask, metrics[key], np.nan)
            for g in np.flatnonzero(metrics["diverged"] > 0):
                if g not in reported_divergence:
                    reported_divergence.add(g)
                    progress.console.print(f"[red]diverged[/red] {labels[g]} at iteration {iteration}: non-finite "
                                           "rewards, observations, actions or parameters; it stops updating",
                                           highlight=False)
            if iteration == 0:
                timings["first_iteration_s"] = elapsed  # includes compilation
                steady_start = time.perf_counter()
            finished = ~np.isnan(metrics["task_fitness"])
            last_fitness[finished] = metrics["task_fitness"][finished]
            rate = steps_per_iteration / elapsed
            run_dir.append_metrics(iteration, labels, metrics, {"env_steps_per_s": rate})
            best = "" if np.all(np.isnan(last_fitness)) else (
                f"best {labels[int(best_of(last_fitness))].split('#')[0]} {last_fitness[best_of(last_fitness)]:.3f}")
            progress.update(bar, advance=1, rate=f"{rate / 1e3:,.0f}k steps/s", best=best)
        if settings.iterations > 1:
            timings["steady_env_steps_per_s"] = steps_per_iteration * (settings.iterations - 1) / (
                time.perf_counter() - steady_start)
    run_dir.close()

    console.print("evaluating each policy deterministically over one full episode per environment…")
    tick = time.perf_counter()
    evaluation = jax.device_get(trainer.evaluate(train_state))
    timings["evaluation_s"] = time.perf_counter() - tick
    timings["total_s"] = time.perf_counter() - start

    diverged_at = jax.device_get(train_state.diverged_at)
    per_group = []
    per_candidate: dict[str, list[dict]] = {}
    for g, group in enumerate(trainer.groups):
        row = {"candidate": group.candidate.name, "seed": group.seed,
               **{k: float(np.mean(v[g])) for k, v in evaluation.items()},
               "training_task_fitness": float(last_fitness[g]),
               "diverged_at_iteration": int(diverged_at[g]) if diverged_at[g] >= 0 else None,
               "params": dict(group.candidate.params)}
        per_group.append(row)
        per_candidate.setdefault(group.candidate.name, []).append(row)
    ranking = rank(per_candidate, fitness.higher_is_better)
    results = {
        "task": task.name, "fitness": fitness_name, "fitness_doc": fitness.doc,
        "higher_is_better": fitness.higher_is_better, "ranking": [dataclasses.asdict(r) for r in ranking],
        "groups": per_group, "failures": [dataclasses.asdict(f) for f in failures], "timings": timings,
    }
    console.print(ranking_table(ranking, f"{fitness_name}: {fitness.doc}"))
    tied = not_separable_from_best(ranking, fitness.higher_is_better)
    if tied:
        console.print(f"not separable at 95%: the confidence intervals of {', '.join(tied)} overlap the best one's "
                      f"({ranking[0].name}); more seeds would tell them apart", highlight=False)
    results["not_separable_from_best"] = tied
    run_dir.write_results(results)
    console.print(f"run directory: {settings.out}", highlight=False)
    return results


def ranking_table(ranking: Sequence, fitness_doc: str) -> Table:
    table = Table(title=f"Ranking by task fitness ({fitness_doc})", title_justify="left")
    for column in ("rank", "candidate", "task fitness", "95% CI", "seeds", "shaped return", "episode length"):
        table.add_column(column, justify="left" if column == "candidate" else "right", no_wrap=column == "candidate")
    for i, r in enumerate(ranking, 1):
        ci = f"[{r.ci_low:.3f}, {r.ci_high:.3f}]" if r.seeds > 1 else "-"
        table.add_row(str(i), r.name, f"{r.fitness_mean:.3f}", ci, str(r.seeds), f"{r.shaped_return:.2f}",
                      f"{r.episode_length:.0f}")
    return table
