"""Ranking candidates by the task's ground-truth fitness, with seed statistics.

Runs have few seeds (2–6), so the statistics are Student's t, whose intervals widen as seeds get fewer, not a
bootstrap over seeds: with two seeds a percentile bootstrap's "95%" interval is the two values themselves, which
holds the true mean half the time (docs/benchmarks/fidelity.md shows a third seed falling outside it).
"""

from __future__ import annotations

import dataclasses

import numpy as np


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


def mean_ci(values, level: float = 0.95) -> tuple[float, float]:
    """Student's t confidence interval of the mean over seeds; a single value gives (value, value)."""
    values = np.asarray(values, dtype=np.float64)
    mean = float(values.mean())
    if len(values) < 2:
        return mean, mean
    from scipy import stats  # here, not at import: 0.6 s of every envcoder command's start

    half = stats.t.ppf(0.5 + level / 2, len(values) - 1) * values.std(ddof=1) / np.sqrt(len(values))
    return float(mean - half), float(mean + half)


def rank(per_seed: dict[str, list[dict]], higher_is_better: bool = True) -> list[Ranked]:
    """`{candidate: [{"task_fitness", "shaped_return", "episode_length"} per seed]}` -> best first.

    A candidate whose rows have `eliminated_at_iteration` (a halving schedule dropped it then) ranks below every
    candidate that trained longer, whatever its fitness: it was compared only with those of its rung."""
    ranked = []
    for name, runs in per_seed.items():
        fitness = np.array([r["task_fitness"] for r in runs], dtype=np.float64)
        low, high = mean_ci(fitness)
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


def beat_probability(mean_a: float, std_a: float, seeds_a: int, mean_b: float, std_b: float, seeds_b: int) -> float:
    """The probability that `a`'s true mean exceeds `b`'s, from their seeds' means, standard deviations and counts:
    Welch's t for the difference (the posterior of normal seeds under a flat prior, to Welch's approximation).
    Equal means with no spread count half. Needs two seeds each."""
    var_a, var_b = std_a**2 / seeds_a, std_b**2 / seeds_b
    error = np.sqrt(var_a + var_b)
    if error == 0:
        return float(np.sign(mean_a - mean_b) / 2 + 0.5)
    dof = (var_a + var_b) ** 2 / (var_a**2 / (seeds_a - 1) + var_b**2 / (seeds_b - 1))
    from scipy import stats

    return float(stats.t.cdf((mean_a - mean_b) / error, dof))


def win_probabilities(per_seed: dict[str, list[float]], higher_is_better: bool = True) -> dict[str, dict[str, float]]:
    """`p[a][b]`: the probability that candidate `a`'s mean task fitness beats `b`'s (`beat_probability` over
    their finite seeds). Candidates with fewer than two finite seeds get no entry: one seed says nothing about
    the spread."""
    sign, summary = (1.0 if higher_is_better else -1.0), {}
    for name, values in per_seed.items():
        values = np.asarray(values, dtype=np.float64)
        values = values[np.isfinite(values)]
        if len(values) >= 2:
            summary[name] = (sign * values.mean(), values.std(ddof=1), len(values))
    return {a: {b: beat_probability(*sa, *sb) for b, sb in summary.items() if b != a} for a, sa in summary.items()}


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


def not_separable_from_best(ranking: list[Ranked], higher_is_better: bool = True, level: float = 0.95) -> list[str]:
    """Candidates (after the best) that the best does not beat at `level`: a two-sided Welch t-test of their
    seeds' means, i.e. the best's `beat_probability` over them is below `(1 + level) / 2`. Only candidates that
    trained as long as the best and have two seeds or more (as has the best) are compared."""
    if not ranking or ranking[0].seeds < 2:
        return []
    sign, best = (1.0 if higher_is_better else -1.0), ranking[0]

    def beaten(r: Ranked) -> bool:
        return beat_probability(sign * best.fitness_mean, best.fitness_std, best.seeds, sign * r.fitness_mean,
                                r.fitness_std, r.seeds) >= 0.5 + level / 2
    return [r.name for r in ranking[1:] if r.seeds > 1 and r.eliminated_at == best.eliminated_at
            and np.isfinite(r.fitness_mean) and not beaten(r)]
