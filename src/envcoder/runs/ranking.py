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
    eliminated_at: int | None = None
    """Under `--schedule halving`: the iteration after which the candidate stopped training (its fitness is then
    that of its training episodes at that point); None for the candidates trained to the end."""


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
    """`{candidate: [{"task_fitness", "shaped_return", "episode_length"} per seed]}` -> best first.

    A candidate whose rows have `eliminated_at_iteration` (a halving schedule dropped it then) ranks below every
    candidate that trained longer, whatever its fitness: it was compared only with those of its rung."""
    ranked = []
    for name, runs in per_seed.items():
        fitness = np.array([r["task_fitness"] for r in runs], dtype=np.float64)
        low, high = bootstrap_ci(fitness)
        ranked.append(Ranked(
            name=name, fitness_mean=float(fitness.mean()),
            fitness_std=float(fitness.std(ddof=1)) if len(fitness) > 1 else 0.0,
            ci_low=low, ci_high=high, seeds=len(fitness),
            shaped_return=float(np.mean([r["shaped_return"] for r in runs])),
            episode_length=float(np.mean([r["episode_length"] for r in runs])),
            eliminated_at=runs[0].get("eliminated_at_iteration")))
    # Survivors first, then by how long a candidate lasted; diverged candidates (NaN fitness) last in theirs.
    sign = -1.0 if higher_is_better else 1.0
    ranked.sort(key=lambda r: (r.eliminated_at is not None, -(r.eliminated_at or 0), np.isnan(r.fitness_mean),
                               sign * np.nan_to_num(r.fitness_mean, nan=0.0)))
    return ranked


def win_probabilities(per_seed: dict[str, list[float]], higher_is_better: bool = True,
                      samples: int = BOOTSTRAP_SAMPLES, seed: int = 0) -> dict[str, dict[str, float]]:
    """`p[a][b]`: the probability that candidate `a`'s mean task fitness over seeds beats `b`'s, from a bootstrap
    over each candidate's seeds (ties count half). Candidates with fewer than two finite seeds get no entry: one
    seed says nothing about the spread."""
    rng = np.random.default_rng(seed)
    means = {}
    for name, values in per_seed.items():
        values = np.asarray(values, dtype=np.float64)
        values = values[np.isfinite(values)]
        if len(values) >= 2:
            means[name] = rng.choice(values, size=(samples, len(values)), replace=True).mean(axis=1)
    sign = 1.0 if higher_is_better else -1.0
    return {a: {b: float(np.mean(sign * (ma - mb) > 0) + 0.5 * np.mean(ma == mb))
                for b, mb in means.items() if b != a} for a, ma in means.items()}


def still_improving(iterations, values, higher_is_better: bool = True, tail: float = 0.2) -> dict | None:
    """Whether a learning curve was still improving when training ended: the mean of the last half of its last
    `tail` of iterations against the mean of the half before, from the finite `values` (a candidate's task
    fitness per iteration, mean over seeds). Improving when the later mean is better by more than two standard
    errors of the difference. None when the tail has fewer than 4 finite points per half."""
    iterations, values = np.asarray(iterations, dtype=np.float64), np.asarray(values, dtype=np.float64)
    keep = np.isfinite(values)
    iterations, values = iterations[keep], values[keep]
    if not len(values):
        return None
    last = iterations.max()
    start = last - tail * (last + 1)
    middle = (start + last) / 2
    earlier, later = values[(iterations > start) & (iterations <= middle)], values[iterations > middle]
    if len(earlier) < 4 or len(later) < 4:
        return None
    gain = (later.mean() - earlier.mean()) * (1.0 if higher_is_better else -1.0)
    error = float(np.sqrt(earlier.var(ddof=1) / len(earlier) + later.var(ddof=1) / len(later)))
    return {"improving": bool(gain > 2 * error), "gain": float(gain), "standard_error": error,
            "earlier_mean": float(earlier.mean()), "later_mean": float(later.mean()),
            "from_iteration": int(np.floor(start)) + 1, "to_iteration": int(last)}


def not_separable_from_best(ranking: list[Ranked], higher_is_better: bool = True) -> list[str]:
    """Candidates (after the best) whose seed confidence interval overlaps the best one's."""
    if not ranking or ranking[0].seeds < 2:
        return []
    best = ranking[0]
    if higher_is_better:
        return [r.name for r in ranking[1:] if r.seeds > 1 and r.ci_high >= best.ci_low]
    return [r.name for r in ranking[1:] if r.seeds > 1 and r.ci_low <= best.ci_high]
