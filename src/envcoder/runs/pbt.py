"""Population-based training over shaping constants (PBT, Jaderberg et al. 2017) inside one run.

The groups whose candidates share all their code (copies of one file that differ in constants: one function class
per shaping type, `envcoder.candidates.constants`) form a population. Every `interval` iterations, in each
population, the worst `fraction` of the groups by their recent training task fitness (never the shaped reward)
take over the full training state of a group drawn among the best `fraction` (policy, optimizer, normalizers, best
policy; each keeps its own environments and randomness), and their constants become the winner's, each multiplied
by `exp(N(0, scale))` and one of them also by up to `10 ** jump_decades` either way, its sign flipped with probability
`flip` (a term of the wrong sign is fixed by the constants alone; zeros stay zero). A group none of whose episodes
has ended yet takes no part in a step: it is not known to be bad, and it is often the best, since agents that stay
up end a long episode last (an Anymal episode takes 104 iterations of 24 steps; ranked as the worst, a group whose
agents all stood was taken over by one whose agents fell). A diverged group is the worst. The copy is one program
compiled once: the training programs see new values of their inputs, never new code. Each step is recorded
(`lineage`): which group took over which, and the constants it then trains with.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # the settings are read by the command line, which imports JAX only when it trains
    from envcoder.env.grouping import GroupPlan


@dataclasses.dataclass(frozen=True)
class PopulationSettings:
    """How a run's populations evolve (`EvalSettings.population`)."""

    interval: int | None = None
    """Iterations between two exploit steps (None: a tenth of the run's, at least one; 0: never, so that the copies
    keep the constants they started with: a random search over them)."""
    fraction: float = 0.25
    """The worst part of a population that takes over the state of its best part, at each step."""
    scale: float = 0.3
    """The standard deviation of a perturbation's log-factor (every constant)."""
    jump_decades: float = 1.0
    """One constant of each perturbation is also multiplied by `10 ** U(-jump_decades, jump_decades)`."""
    flip: float = 0.1
    """The probability that the constant multiplied by the jump also has its sign flipped."""
    seed: int = 0


def populations(plan: GroupPlan) -> list[np.ndarray]:
    """The groups (plan indices) that share every function class and have constants, two or more of them."""
    identity: dict[tuple, list[int]] = {}
    for g in range(plan.num_groups):
        signature = tuple(next(i for i, c in enumerate(classes) if g in c.indices) for classes in plan.classes.values())
        identity.setdefault(signature, []).append(g)
    tuned = {g for classes in plan.classes.values() for c in classes if c.params for g in c.indices}
    return [np.array(members) for members in identity.values() if len(members) > 1 and members[0] in tuned]


def exploit(fitness: np.ndarray, members: list[np.ndarray], fraction: float, higher_is_better: bool,
            rng: np.random.Generator, diverged: np.ndarray | None = None) -> dict[int, int]:
    """`{loser: winner}` of one step: in each population, of its groups with a fitness (`fitness [G]`, NaN: no
    episode has ended yet) or diverged (`diverged [G]` bool: the worst), the worst `fraction` (at least one) each
    draw a winner among the best as many that have not diverged; a population with fewer than two such groups, or
    none that has not diverged, is left as it is."""
    sign = 1.0 if higher_is_better else -1.0
    diverged = np.zeros(len(fitness), bool) if diverged is None else np.asarray(diverged, bool)
    moves = {}
    for group in members:
        known = group[diverged[group] | ~np.isnan(fitness[group])]
        score = np.where(diverged[known], -np.inf, sign * np.nan_to_num(fitness[known]))
        if len(known) < 2 or not np.isfinite(score).any():
            continue
        n = max(1, int(fraction * len(known)))
        ranks = np.argsort(-score, kind="stable")  # best first
        order, winners = known[ranks], known[ranks[:n]][np.isfinite(score[ranks[:n]])]  # never a diverged winner
        for loser in order[-n:]:
            moves[int(loser)] = int(winners[rng.integers(len(winners))])
    return moves


class Population:
    """The exploit-and-explore steps of one run (see the module docstring)."""

    def __init__(self, settings: PopulationSettings, plan: GroupPlan, labels: list[str], higher_is_better: bool,
                 sharding=None):
        """`sharding`: the learner's `GroupSharding` where its groups are sharded over several devices (the train
        state's rows are then in the devices' layout, not the plan's order)."""
        self.settings, self.labels, self.higher = settings, labels, higher_is_better
        self.members = populations(plan)
        self.lineage: list[dict] = []
        self.sharding = sharding
        import jax

        self._copy = jax.jit(_take_groups)
        self._sharded_copy = None

    @classmethod
    def of_run(cls, settings, job, learner, lineage: list[dict]) -> "Population | None":
        """The populations of a run (`settings.population`; None when it has none), its `lineage` so far (a
        resumed run's, from its checkpoint)."""
        if settings.population is None:
            return None
        if len(job.schedule) > 1:
            raise ValueError("population-based training runs a flat schedule")
        chosen = settings.population
        if chosen.interval is None:
            chosen = dataclasses.replace(chosen, interval=max(1, job.iterations // 10))
        population = cls(chosen, learner.plan, learner.labels, job.fitness.higher_is_better, learner.sharding)
        population.lineage = list(lineage)
        return population

    def step(self, train_state, iteration: int, history: list, last_fitness: np.ndarray):
        """The train state after `iteration` iterations, with the step's losers on their winners' states and
        perturbed constants. Fitness: each group's mean training task fitness over the interval (`history`: the
        driver's `(iteration, metrics)`), or its last finished episodes' (`last_fitness [G]`)."""
        rows = np.stack([m["task_fitness"] for i, m in history if i >= iteration - self.settings.interval])
        finite = np.isfinite(rows)
        mean = np.where(finite, rows, 0.0).sum(axis=0) / np.maximum(finite.sum(axis=0), 1)
        fitness = np.where(finite.any(axis=0), mean, last_fitness)
        rng = np.random.default_rng([self.settings.seed, iteration])
        moves = exploit(fitness, self.members, self.settings.fraction, self.higher, rng,
                        diverged=self._in_plan_order(train_state.diverged_at) >= 0)
        if not moves:
            return train_state
        source = np.arange(len(self.labels))
        for loser, winner in moves.items():
            source[loser] = winner
        constants = {k: v[source] for k, v in self._constants(train_state).items()}
        for loser in sorted(moves):
            factors = {}  # one per constant of the file, whichever functions' keys hold it
            for key, column in constants.items():
                factor = factors.setdefault(key.split(":", 1)[1], np.exp(rng.normal(0.0, self.settings.scale)))
                column[loser] = column[loser] * factor
            names = sorted({key.split(":", 1)[1] for key, column in constants.items() if column[loser] != 0.0})
            if names:  # and one of them by up to an order of magnitude: a weight 100× off is found in steps
                jump = names[rng.integers(len(names))]
                factor = 10.0 ** rng.uniform(-self.settings.jump_decades, self.settings.jump_decades) * (
                    -1.0 if rng.random() < self.settings.flip else 1.0)
                for key, column in constants.items():
                    if key.split(":", 1)[1] == jump:
                        column[loser] = column[loser] * factor
            self.lineage.append({"iteration": iteration, "group": self.labels[loser],
                                 "from": self.labels[moves[loser]], "fitness": _number(fitness[loser]),
                                 "from_fitness": _number(fitness[moves[loser]]),
                                 "constants": {k: float(v[loser]) for k, v in constants.items() if v[loser] != 0.0}})
        if self.sharding is None:
            return self._copy(train_state, source, constants)
        # Sharded: the same copy in the devices' row order (an inert row keeps its own state).
        layout = self.sharding.layout
        rows = np.flatnonzero(~layout.inert)
        in_layout = np.arange(len(layout.order))
        in_layout[rows] = layout.position[source[layout.order[rows]]]
        laid_out = {k: self.sharding.put(v[np.maximum(layout.order, 0)]) for k, v in constants.items()}
        if self._sharded_copy is None:  # one program for the run, its output laid out as its input
            import jax

            self._sharded_copy = jax.jit(_take_groups, out_shardings=jax.tree.map(lambda x: x.sharding, train_state))
        return self._sharded_copy(train_state, in_layout, laid_out)

    def _constants(self, train_state) -> dict[str, np.ndarray]:
        """The groups' constants `{key: [G]}` in the plan's order."""
        return {k: self._in_plan_order(v) for k, v in train_state.constants.items()}

    def _in_plan_order(self, rows) -> np.ndarray:
        """A train state's `[G]` rows on the host, in the plan's order."""
        import jax

        rows = np.asarray(jax.device_get(rows))
        return rows if self.sharding is None else self.sharding.in_plan_order(rows)

    def record(self, train_state) -> dict:
        """What `population.json` holds: the settings, the lineage and each group's constants at the end
        (`{label: {constant key: value}}`)."""
        constants = self._constants(train_state)
        return {"settings": dataclasses.asdict(self.settings), "lineage": self.lineage,
                "final_constants": {label: {k: float(v[g]) for k, v in constants.items()}
                                    for g, label in enumerate(self.labels)}}


def _number(x) -> float | None:
    return float(x) if np.isfinite(x) else None


def _take_groups(train_state, source, constants):
    """Every group's training state from group `source[g]` (its environments and randomness its own), and the
    new `constants`."""
    groups = source.shape[0]

    def take(x):
        return x[source] if getattr(x, "ndim", 0) >= 1 and x.shape[0] == groups else x
    import jax

    taken = {field: jax.tree.map(take, getattr(train_state, field)) for field in (
        "params", "opt_state", "learning_rate", "obs_rms", "own", "best", "diverged_at", "solved_at")}
    return train_state._replace(**taken, constants=constants)
