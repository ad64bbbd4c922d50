"""Ranking candidates by the task's ground-truth fitness, with seed statistics."""

from __future__ import annotations

import dataclasses

import numpy as np

BOOTSTRAP_SAMPLES = 2000


@dataclasses.dataclass(frozen=True)
class Ranked:
    """One candidate's standing, aggregated over its seeds."""

    name: str
    fitness_mean: float
    fitness_std: float
    ci_low: float
    ci_high: float
    seeds: int
    shaped_return: float
    episode_length: float


def bootstrap_ci(values, level: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap confidence interval of the mean; a single value gives (value, value)."""
    values = np.asarray(values, dtype=np.float64)
    if len(values) < 2:
        return float(values.mean()), float(values.mean())
    rng = np.random.default_rng(seed)
    means = rng.choice(values, size=(BOOTSTRAP_SAMPLES, len(values)), replace=True).mean(axis=1)
    tail = (1.0 - level) / 2.0
    return float(np.quantile(means, tail)), float(np.quantile(means, 1.0 - tail))


def rank(per_seed: dict[str, list[dict]], higher_is_better: bool = True) -> list[Ranked]:
    """`{candidate: [{"task_fitness", "shaped_return", "episode_length"} per seed]}` -> best first."""
    ranked = []
    for name, runs in per_seed.items():
        fitness = np.array([r["task_fitness"] for r in runs], dtype=np.float64)
        low, high = bootstrap_ci(fitness)
        ranked.append(Ranked(
            name=name, fitness_mean=float(fitness.mean()),
            fitness_std=float(fitness.std(ddof=1)) if len(fitness) > 1 else 0.0,
            ci_low=low, ci_high=high, seeds=len(fitness),
            shaped_return=float(np.mean([r["shaped_return"] for r in runs])),
            episode_length=float(np.mean([r["episode_length"] for r in runs]))))
    # Diverged candidates (NaN fitness) go last.
    sign = -1.0 if higher_is_better else 1.0
    ranked.sort(key=lambda r: (np.isnan(r.fitness_mean), sign * np.nan_to_num(r.fitness_mean, nan=0.0)))
    return ranked


def not_separable_from_best(ranking: list[Ranked], higher_is_better: bool = True) -> list[str]:
    """Candidates (after the best) whose seed confidence interval overlaps the best one's."""
    if not ranking or ranking[0].seeds < 2:
        return []
    best = ranking[0]
    if higher_is_better:
        return [r.name for r in ranking[1:] if r.seeds > 1 and r.ci_high >= best.ci_low]
    return [r.name for r in ranking[1:] if r.seeds > 1 and r.ci_low <= best.ci_high]
