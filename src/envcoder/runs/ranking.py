"""Ranking candidates by the task's ground-truth fitness, with seed statistics.

Runs have few seeds (2–6), so the statistics are Student's t, whose intervals widen as seeds get fewer, not a
bootstrap over seeds: with two seeds a percentile bootstrap's "95%" interval is the two values themselves, which
holds the true mean half the time (docs/benchmarks/fidelity.md shows a third seed falling outside it). Where the
task declares the fitness's range (`Fitness.bounds`, e.g. a fraction in [0, 1]), an interval is clipped to it.

Candidates whose fitness is the same (a saturated ceiling: every Cartpole candidate that learns holds the pole for
the whole episode) are ordered by learning speed: the area under their training curve (`learning_auc`). More seeds
would never tell an exact tie apart, so a tie is not reported as "not separable" but as a tie.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Mapping

import numpy as np

RANK_BY = ("final", "auc")
"""Primary ranking keys: the final evaluation's task fitness (ties broken by learning speed), or learning speed
(the area under the training curve of the task fitness; ties broken by the final fitness)."""
FITNESS_TIE = 1e-4
"""Two candidates' mean fitness within this (relative to the larger of 1 and its size) is a tie, and the text that
reports a tie says so. Cartpole's upright fraction moves in steps of 1/(500 · envs · seeds): 0.99998 against 1.0
(one environment's few steps) was ranked apart on one kind of CPU and tied on another at 1e-6."""


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
    auc: float = math.nan
    """Learning speed: the area under the training curve of the task fitness (`learning_auc`), mean over seeds;
    NaN where no curve was recorded."""
    auc_std: float = 0.0
    """Its standard deviation over seeds."""
    training_best: float = math.nan
    """The best training iteration's task fitness (`best_in_training`), mean over seeds: the papers' measure."""
    training_best_std: float = 0.0
    """Its standard deviation over seeds."""


def mean_ci(values, level: float = 0.95, bounds=(None, None)) -> tuple[float, float]:
    """Student's t confidence interval of the mean over seeds, clipped to `bounds` (the fitness's declared
    range, `(low, high)`, None for no bound); a single value gives (value, value)."""
    values = np.asarray(values, dtype=np.float64)
    mean = float(values.mean())
    if len(values) < 2:
        return mean, mean
    from scipy import stats  # here, not at import: 0.6 s of every envcoder command's start

    half = stats.t.ppf(0.5 + level / 2, len(values) - 1) * values.std(ddof=1) / np.sqrt(len(values))
    low, high = bounds
    return tuple(float(np.clip(x, -np.inf if low is None else low, np.inf if high is None else high))
                 for x in (mean - half, mean + half))


def learning_auc(series: Mapping[int, float]) -> float:
    """The area under a training curve `{iteration: task fitness of the episodes finished then}`, per iteration:
    the mean over the iterations from the first with a value to the last of the value then, an iteration where no
    episode finished (missing, or NaN) holding the one before. NaN when the curve has no value."""
    values, last = [], math.nan
    known = {i: v for i, v in series.items() if np.isfinite(v)}
    if not known:
        return math.nan
    for iteration in range(min(known), max(series) + 1):
        last = known.get(iteration, last)
        values.append(last)
    return float(np.mean(values))


def best_in_training(series: Mapping[int, float], higher_is_better: bool = True) -> float:
    """The best value of a training curve `{iteration: task fitness of the episodes finished then}` (the highest, or
    the lowest where lower is better): what IsaacGymEnvs-based papers report (Eureka, RF-Agent: the best
    `consecutive_successes` over training). NaN when the curve has no value."""
    known = [v for v in series.values() if np.isfinite(v)]
    if not known:
        return math.nan
    return float(max(known) if higher_is_better else min(known))


def fitness_tied(a: Ranked, b: Ranked) -> bool:
    """Whether two candidates' mean fitness is the same (`FITNESS_TIE`): more seeds would not order them."""
    return bool(np.isfinite(a.fitness_mean) and np.isfinite(b.fitness_mean) and abs(a.fitness_mean - b.fitness_mean)
                <= FITNESS_TIE * max(1.0, abs(a.fitness_mean), abs(b.fitness_mean)))


def rank(per_seed: dict[str, list[dict]], higher_is_better: bool = True, rank_by: str = "final",
         bounds=(None, None)) -> list[Ranked]:
    """`{candidate: [{"task_fitness", "shaped_return", "episode_length", "training_auc" (optional)} per seed]}` ->
    best first: by the final fitness, candidates tied on it (`fitness_tied`) by learning speed (`rank_by="final"`),
    or by learning speed first (`"auc"`). Intervals are clipped to `bounds`, the fitness's declared range.

    A candidate whose rows have `eliminated_at_iteration` (a halving schedule dropped it then) ranks below every
    candidate that trained longer, whatever its fitness: it was compared only with those of its rung."""
    if rank_by not in RANK_BY:
        raise ValueError(f"rank_by {rank_by!r}: choose from {', '.join(RANK_BY)}")
    ranked = []
    for name, runs in per_seed.items():
        fitness = np.array([r["task_fitness"] for r in runs], dtype=np.float64)
        auc = np.array([r.get("training_auc", math.nan) for r in runs], dtype=np.float64)
        best = np.array([r.get("training_best", math.nan) for r in runs], dtype=np.float64)
        low, high = mean_ci(fitness, bounds=bounds)
        ranked.append(Ranked(
            name=name, fitness_mean=float(fitness.mean()),
            fitness_std=float(fitness.std(ddof=1)) if len(fitness) > 1 else 0.0,
            ci_low=low, ci_high=high, seeds=len(fitness),
            shaped_return=float(np.mean([r["shaped_return"] for r in runs])),
            episode_length=float(np.mean([r["episode_length"] for r in runs])),
            eliminated_at=runs[0].get("eliminated_at_iteration"), auc=float(auc.mean()),
            auc_std=float(auc.std(ddof=1)) if len(auc) > 1 else 0.0, training_best=float(best.mean()),
            training_best_std=float(best.std(ddof=1)) if len(best) > 1 else 0.0))
    sign = -1.0 if higher_is_better else 1.0

    def speed(r: Ranked):
        return np.isnan(r.auc), sign * np.nan_to_num(r.auc, nan=0.0)

    def fitness(r: Ranked):
        return np.isnan(r.fitness_mean), sign * np.nan_to_num(r.fitness_mean, nan=0.0)

    def rung(r: Ranked):  # survivors first, then by how long a candidate lasted
        return r.eliminated_at is not None, -(r.eliminated_at or 0)
    if rank_by == "auc":
        return sorted(ranked, key=lambda r: (rung(r), speed(r), fitness(r)))
    ranked.sort(key=lambda r: (rung(r), fitness(r)))
    ordered, start = [], 0
    while start < len(ranked):  # each run of tied candidates (one rung, same fitness) by learning speed
        end = start + 1
        while end < len(ranked) and rung(ranked[end]) == rung(ranked[start]) and fitness_tied(ranked[start],
                                                                                               ranked[end]):
            end += 1
        ordered += sorted(ranked[start:end], key=speed)
        start = end
    return ordered


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


def compare(a: Ranked, b: Ranked, higher_is_better: bool = True, level: float = 0.95) -> dict:
    """How much better `a` is than `b` (positive: better, in the fitness's units): the difference of their means,
    its Welch t interval at `level`, the probability that `a` beats `b` (`beat_probability`) and whether it does
    at `level` (two-sided). The interval and probability are None with fewer than two seeds each."""
    sign = 1.0 if higher_is_better else -1.0
    difference = sign * (a.fitness_mean - b.fitness_mean)
    if min(a.seeds, b.seeds) < 2 or not np.isfinite(difference):
        return {"difference": float(difference), "ci": None, "p_beats": None, "beats": False}
    var_a, var_b = a.fitness_std**2 / a.seeds, b.fitness_std**2 / b.seeds
    error = math.sqrt(var_a + var_b)
    p = beat_probability(sign * a.fitness_mean, a.fitness_std, a.seeds, sign * b.fitness_mean, b.fitness_std, b.seeds)
    half = 0.0
    if error > 0:
        from scipy import stats

        dof = (var_a + var_b) ** 2 / (var_a**2 / (a.seeds - 1) + var_b**2 / (b.seeds - 1))
        half = float(stats.t.ppf(0.5 + level / 2, dof) * error)
    return {"difference": float(difference), "ci": [float(difference - half), float(difference + half)],
            "p_beats": p, "beats": p >= 0.5 + level / 2}


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


EARLY_END_SHARE = 0.25
"""`episodes_end_early` speaks where no candidate's evaluation episodes last this share of the episode on average."""


def episodes_end_early(ranking: list[Ranked], max_episode_length: int | None) -> dict | None:
    """Whether every candidate's policy fails early: an episode that ends before `max_episode_length` steps is a
    failure (`envcoder.tasks.Fitness`), and where even the longest-lived candidate's episodes (mean over its seeds,
    of those that trained to the end) last under `EARLY_END_SHARE` of it, the ranking compares policies that all
    fail (a Humanoid that no reward has yet taught to stay up). `{"candidate", "episode_length",
    "max_episode_length"}` of the longest-lived, or None where one lasts longer or no length is known."""
    finished = [r for r in ranking if r.eliminated_at is None and np.isfinite(r.episode_length)]
    if not finished or not max_episode_length:
        return None
    longest = max(finished, key=lambda r: r.episode_length)
    if longest.episode_length >= EARLY_END_SHARE * max_episode_length:
        return None
    return {"candidate": longest.name, "episode_length": float(longest.episode_length),
            "max_episode_length": int(max_episode_length)}


def not_separable_from_best(ranking: list[Ranked], higher_is_better: bool = True, level: float = 0.95) -> list[str]:
    """Candidates (after the best) that the best does not beat at `level`: a two-sided Welch t-test of their
    seeds' means, i.e. the best's `beat_probability` over them is below `(1 + level) / 2`. Only candidates that
    trained as long as the best and have two seeds or more (as has the best) are compared; those tied with it
    (`tied_with_best`) are not listed: no number of seeds would separate them."""
    if not ranking or ranking[0].seeds < 2:
        return []
    best = ranking[0]
    return [r.name for r in ranking[1:] if r.seeds > 1 and r.eliminated_at == best.eliminated_at
            and np.isfinite(r.fitness_mean) and not fitness_tied(best, r)
            and _p_beats(best, r, "fitness", higher_is_better) < 0.5 + level / 2]


def tied_with_best(ranking: list[Ranked]) -> list[str]:
    """The candidates (after the best, in their order: by learning speed) whose fitness equals the best's and that
    trained as long."""
    best = ranking[0] if ranking else None
    return [r.name for r in ranking[1:] if r.eliminated_at == best.eliminated_at and fitness_tied(best, r)]


def _p_beats(a: Ranked, b: Ranked, by: str, higher_is_better: bool) -> float:
    """`beat_probability` of `a` over `b` by their final fitness (`by="fitness"`) or learning speed (`"auc"`)."""
    sign = 1.0 if higher_is_better else -1.0
    if by == "auc":
        return beat_probability(sign * a.auc, a.auc_std, a.seeds, sign * b.auc, b.auc_std, b.seeds)
    return beat_probability(sign * a.fitness_mean, a.fitness_std, a.seeds, sign * b.fitness_mean, b.fitness_std,
                            b.seeds)


def beats_next(ranking: list[Ranked], win_probability: dict, higher_is_better: bool = True,
               rank_by: str = "final") -> dict[str, dict[str, float]]:
    """`{a: {b: p}}` for each candidate `a` and the one ranked below it, `b`: the probability that `a` beats `b` by
    the key that ordered them, their fitness (`win_probability[a][b]`) or, where that is tied or `rank_by="auc"`,
    their learning speed (two seeds each needed, and the same rung)."""
    out = {}
    for a, b in zip(ranking, ranking[1:]):
        if rank_by == "auc" or fitness_tied(a, b):
            if a.eliminated_at == b.eliminated_at and min(a.seeds, b.seeds) >= 2 and np.isfinite([a.auc, b.auc]).all():
                out[a.name] = {b.name: _p_beats(a, b, "auc", higher_is_better)}
        elif b.name in win_probability.get(a.name, {}):
            out[a.name] = {b.name: win_probability[a.name][b.name]}
    return out


def separation(ranking: list[Ranked], higher_is_better: bool = True, rank_by: str = "final",
               level: float = 0.95) -> dict | None:
    """Whether the best candidate is separable at `level` (two-sided) from the runner-up and from every other
    candidate that trained as long, each by the key that ordered them: learning speed where `rank_by="auc"` or
    their fitness is tied, else the final fitness. `undecided` lists those it is not separated from (one seed, or
    no training curve, decides nothing); `p_best_beats` is the probability that the best beats the runner-up
    (None where undecidable). None with no runner-up that trained as long as the best."""
    if len(ranking) < 2 or ranking[1].eliminated_at != ranking[0].eliminated_at:
        return None
    best = ranking[0]

    def compare(other: Ranked) -> tuple[str, float | None]:
        by = "auc" if rank_by == "auc" or fitness_tied(best, other) else "fitness"
        values = (best.auc, other.auc) if by == "auc" else (best.fitness_mean, other.fitness_mean)
        if min(best.seeds, other.seeds) < 2 or not all(np.isfinite(values)):
            return by, None
        return by, _p_beats(best, other, by, higher_is_better)
    undecided = []
    for other in ranking[1:]:
        if other.eliminated_at != best.eliminated_at or not np.isfinite(other.fitness_mean):
            continue
        p = compare(other)[1]
        if p is None or p < 0.5 + level / 2:
            undecided.append(other.name)
    by, p = compare(ranking[1])
    return {"best": best.name, "runner_up": ranking[1].name, "by": by, "p_best_beats": p,
            "separable": p is not None and p >= 0.5 + level / 2, "undecided": undecided}
