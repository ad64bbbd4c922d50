"""Budget schedules of a run: flat (every candidate trains for every iteration) or successive halving.

Successive halving (`--schedule halving`) splits the iterations into rungs. All candidates start together;
at the end of each rung the worse half (by the task fitness of their latest training episodes, mean over
seeds) stops, and the environments it freed go to the survivors: every rung steps about as many environments
as the first, so each rung costs about the same device time, and a survivor trains with more environments per
group the further it gets. A survivor keeps its policy, optimizer, normalizers, random key and best policy
across rungs; its environments start fresh episodes. Each rung's shapes compile once.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable

import numpy as np

SCHEDULES = ("flat", "halving")

RUNG_KEYS = ("task_fitness", "shaped_return", "episode_length")
"""The metrics of each iteration that a rung keeps to decide who survives it and to report the others."""

WINDOW = 0.25
"""The share of a rung's last iterations whose training-episode fitness decides who survives it."""


@dataclasses.dataclass(frozen=True)
class Rung:
    """One stretch of training with a fixed set of candidates."""

    end: int
    """Iterations done at its end (the first rung starts at 0, the others where the one before ends)."""
    candidates: int
    """How many candidates train in it."""
    envs_per_candidate: int
    """Environments of each (candidate, seed) group in it."""


def rungs(schedule: str, candidates: int, envs_per_candidate: int, iterations: int,
          count: int | None = None, fits: Callable[[int], bool] = lambda envs: True) -> list[Rung]:
    """The rungs of a run of `candidates` candidates. Halving: `count` rungs (default 4), at most as many as halve
    the candidates to one and as there are `iterations`, of equal iterations (the last takes the remainder); rung
    `r` keeps `ceil(candidates / 2**r)` candidates, each with the most envs that keep the rung
    within the first rung's environments, in steps of a quarter of `envs_per_candidate`, that `fits` (the
    algorithm's batch arithmetic) accepts."""
    if schedule not in SCHEDULES:
        raise ValueError(f"--schedule {schedule!r}: choose one of {', '.join(SCHEDULES)}")
    if schedule == "flat":
        return [Rung(iterations, candidates, envs_per_candidate)]
    if count is not None and count < 1:
        raise ValueError(f"--rungs {count}: pass 1 or more")
    most = 1 + math.ceil(math.log2(candidates)) if candidates > 1 else 1
    # More rungs than halve the candidates to one, or than there are iterations, are not possible: fewer are run
    # (the number of valid candidates is known only after validation).
    count = min(4 if count is None else count, most, iterations)
    length = iterations // count
    out = []
    step = max(1, envs_per_candidate // 4)
    for r in range(count):
        kept = math.ceil(candidates / 2 ** r)
        envs = candidates * envs_per_candidate // kept // step * step
        while envs > envs_per_candidate and not fits(envs):
            envs -= step
        out.append(Rung(iterations if r == count - 1 else length * (r + 1), kept, envs))
    return out


def survivors(scores: dict[str, float], keep: int, higher_is_better: bool) -> list[str]:
    """The `keep` best candidates by `scores` (NaN scores last), in `scores`' order."""
    sign = -1.0 if higher_is_better else 1.0
    order = sorted(scores, key=lambda name: (math.isnan(scores[name]), sign * np.nan_to_num(scores[name])))
    kept = set(order[:keep])
    return [name for name in scores if name in kept]


def recent_means(history: list[tuple[int, dict]], start: int, end: int, keys=RUNG_KEYS) -> dict[str, np.ndarray]:
    """Per group, the mean of each of `keys` over the iterations of `history` (`(iteration, metrics)` pairs)
    from the last `WINDOW` of the rung `[start, end)`; NaN where no episode ended in them."""
    first = end - max(1, math.ceil(WINDOW * (end - start)))
    rows = [m for i, m in history if first <= i < end]
    out = {}
    for key in keys:
        values = np.stack([np.asarray(m[key], dtype=np.float64) for m in rows])
        finite = np.isfinite(values)
        out[key] = np.where(finite.any(axis=0), np.where(finite, values, 0).sum(axis=0) /
                            np.maximum(finite.sum(axis=0), 1), np.nan)
    return out


def rung_scores(window: dict[str, np.ndarray], last_fitness: np.ndarray,
                candidates: list[str]) -> tuple[np.ndarray, dict[str, float]]:
    """`(score [G], {candidate: score})` at a rung's end: each group's training-episode fitness over the rung's last
    iterations (`window`, `recent_means`'s), or where none ended there its last (`last_fitness [G]`); a candidate's
    is the mean over its groups (`candidates [G]`: each group's candidate), NaN where none has one."""
    score = np.where(np.isnan(window["task_fitness"]), last_fitness, window["task_fitness"])
    per_candidate: dict[str, list[float]] = {}
    for g, name in enumerate(candidates):
        per_candidate.setdefault(name, []).append(score[g])
    return score, {name: float(np.nanmean(v)) if np.any(np.isfinite(v)) else float("nan")
                   for name, v in per_candidate.items()}


def carry_over(old, rows: np.ndarray, fresh):
    """The state of the next rung: `fresh` (the next rung's new train state, on the host) with each survivor's
    learned parts taken from `old` (this rung's, on the host) at `rows` (the survivors' groups in it, in the new
    order). Padded sizes may shrink (the largest candidate left) or grow: the overlap is copied and the rest
    stays `fresh`'s. The environments (their count changes) and the iteration counter are `fresh`'s and `old`'s."""
    import jax  # here, so that parsing the command line (which reads this module's constants) imports no JAX

    def fit(o, f):
        o = np.asarray(o)
        f = np.array(f, copy=True)
        if f.ndim == 0:
            return o
        o = o[rows]
        overlap = tuple(slice(0, min(a, b)) for a, b in zip(o.shape, f.shape))
        f[overlap] = o[overlap]
        return f

    learned = {}
    for field in old._fields:
        if field == "env":
            continue
        a, b = getattr(old, field), getattr(fresh, field)
        if b is None or a is None or jax.tree.structure(a) != jax.tree.structure(b):
            continue  # e.g. the critic's own normalizer when no survivor has privileged observations
        learned[field] = jax.tree.map(fit, a, b)
    return fresh._replace(**learned)
