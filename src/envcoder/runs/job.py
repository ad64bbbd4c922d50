"""What a run trains (`Job`, resolved by `envcoder.runs.evaluation` before any training) and what the training driver
(`envcoder.runs.driver`) keeps between iterations (`DriverState`, whose progress a checkpoint records)."""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

from envcoder.candidates import Candidate, LoadFailure
from envcoder.runs.schedule import Rung


@dataclasses.dataclass(frozen=True)
class Job:
    """What a run trains: resolved by `envcoder.runs.evaluation.run_evaluation` before any training."""

    settings: object  # EvalSettings
    task: object  # Task
    fitness_name: str
    fitness: object  # Fitness
    config: object  # the algorithm's resolved settings
    candidates: list[Candidate]  # the valid ones, in the run's order
    failures: list[LoadFailure]
    schedule: list[Rung]
    make_trainer: Callable  # (candidate names, envs per candidate) -> GroupedLearner
    left_out: frozenset = frozenset()  # candidates that hung in training: they run inert and are not ranked

    @property
    def iterations(self) -> int:
        """The run's training iterations: the algorithm's settings own them (`max_epochs`, `--iterations` among
        their layers)."""
        return self.config.max_epochs


@dataclasses.dataclass
class DriverState:
    """What the driver keeps between iterations (in the current rung's group order); a checkpoint's progress holds
    what a resumed run needs of it."""

    survivors: list[str]  # the candidates that train in the current rung
    rung: int = 0
    eliminated: list[dict] = dataclasses.field(default_factory=list)  # earlier rungs' dropped groups (results rows)
    next_survivors: list[str] | None = None  # who goes on, once the current rung has ended
    done: int = 0  # iterations whose metrics were read
    first: int = 0  # the first iteration this process trains in the rung (after a checkpoint when resumed)
    last_fitness: np.ndarray | None = None  # [G] task fitness of each group's last finished training episodes
    reported_divergence: set = dataclasses.field(default_factory=set)
    reported_solved: set = dataclasses.field(default_factory=set)
    best_written: np.ndarray | None = None  # [G] the iteration of the best policy last written per group
    history: list = dataclasses.field(default_factory=list)  # this rung's (iteration, {RUNG_KEYS: [G]})
    steady_steps: int = 0  # env steps and seconds of the iterations read after each rung's first (compiled) one
    steady_s: float = 0.0
    physics_resets: int = 0

    def progress(self) -> dict:
        """A checkpoint's record of this state, after `done` iterations."""
        return {"iteration": self.done, "last_fitness": [float(x) for x in self.last_fitness],
                "reported_divergence": sorted(int(g) for g in self.reported_divergence),
                "rung": self.rung, "survivors": list(self.survivors), "eliminated": list(self.eliminated),
                "next_survivors": self.next_survivors}
