"""What a run is: its settings resolved once (`Plan`: the task, the fitness, the algorithm's settings, the likely
candidate count, checked against memory), what it trains (`Job`: the plan and its validated candidates, made by
`envcoder.runs.evaluation` before any training) and what the training driver (`envcoder.runs.driver`) keeps between
iterations (`DriverState`, whose progress a checkpoint records)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Callable

import numpy as np

from envcoder.candidates import Candidate, LoadFailure
from envcoder.candidates.variants import likely_count
from envcoder.rl.config import AlgorithmSettings, algorithm, load_config_file, task_settings
from envcoder.runs.eval_settings import EvalSettings
from envcoder.runs.memory import check_run_fits
from envcoder.runs.schedule import Rung
from envcoder.tasks import Fitness, Task, get_task


def _resolved(settings: EvalSettings, recorded: Path | None) -> tuple:
    """`(task, fitness name, fitness, the algorithm's settings)` of a run's `settings`: `Plan.of`'s."""
    task = get_task(settings.task)
    fitness_name, fitness = task.get_fitness(settings.fitness)
    task.check_algorithm(settings.algo)
    if recorded is not None:
        return task, fitness_name, fitness, algorithm(settings.algo).config.resolve(
            [(str(recorded), load_config_file(recorded, settings.algo))])
    layers = [(str(task.config_file), task_settings(task, settings.algo))]
    if settings.preset is not None:
        layers.append((f"--preset {settings.preset}", task.preset(settings.preset).get(settings.algo) or {}))
    if settings.config_file is not None:
        layers.append((str(settings.config_file), load_config_file(settings.config_file, settings.algo)))
    layers.append(("command-line override", settings.overrides))
    if settings.train_iterations is not None:
        layers.append(("--train-iterations", {"max_epochs": settings.train_iterations}))
    return task, fitness_name, fitness, algorithm(settings.algo).config.resolve(layers)


RESOLVED_FROM = ("task", "fitness", "algo", "preset", "config_file", "overrides", "train_iterations")
"""The settings a plan's task, fitness and algorithm settings are resolved from (`_resolved`)."""

COUNTED_FROM = ("functions", "task_default", "cross")
"""The settings a plan's likely candidate count is read from (`likely_count`)."""


@dataclasses.dataclass(frozen=True)
class Plan:
    """A run's settings resolved once, by the command line or `run_evaluation`'s entry: every layer below takes the
    plan and none resolves the settings again."""

    settings: EvalSettings
    task: Task
    fitness_name: str
    fitness: Fitness
    config: AlgorithmSettings  # the algorithm's resolved settings
    likely_candidates: int | None
    """How many candidates the files likely give, read once (`envcoder.candidates.variants.likely_count`)."""

    @classmethod
    def of(cls, settings: EvalSettings, recorded: Path | None = None) -> Plan:
        """The plan of `settings`: the algorithm's settings in their layers, the task's, the --config file's, the
        command line's, `--train-iterations`, in that order; or, with `recorded` (a run's `<algo>.yaml`, what
        `envcoder play` reads), those the run trained with."""
        return cls(settings, *_resolved(settings, recorded), likely_count(settings))

    def with_settings(self, **changes) -> Plan:
        """The plan with `changes` to its settings (`for_settings`)."""
        return self.for_settings(dataclasses.replace(self.settings, **changes))

    def for_settings(self, settings: EvalSettings) -> Plan:
        """The plan of `settings`: this one's resolution where they resolve alike (the same `RESOLVED_FROM`; their
        seeds, output or sizes may differ; other files are counted again), else resolved anew."""
        if any(getattr(settings, name) != getattr(self.settings, name) for name in RESOLVED_FROM):
            return Plan.of(settings)
        same_files = all(getattr(settings, name) == getattr(self.settings, name) for name in COUNTED_FROM)
        return dataclasses.replace(self, settings=settings,
                                   likely_candidates=self.likely_candidates if same_files else likely_count(settings))

    def check_sizes(self, candidates: int | None = None, seeds: int | None = None, what: str = "") -> None:
        """Refuse (`envcoder.runs.memory.RunTooLargeError`, one line with what would fit) a run whose sizes cannot
        fit in memory, before it allocates any of them (`check_run_fits`): `candidates` of `seeds` seeds (None: the
        likely count and the settings' seeds; `what`: whose sizes they are, for the message)."""
        candidates = candidates if candidates is not None else self.likely_candidates
        if candidates:
            s = self.settings
            check_run_fits(self.task, self.config, candidates, seeds if seeds is not None else len(s.seeds),
                           s.envs_per_candidate, s.evaluation_envs, s.devices, what)


@dataclasses.dataclass(frozen=True)
class Job:
    """What a run trains: its plan and its validated candidates, made by `envcoder.runs.evaluation.run_evaluation`
    before any training."""

    plan: Plan
    candidates: list[Candidate]  # the valid ones, in the run's order
    failures: list[LoadFailure]
    schedule: list[Rung]
    make_learner: Callable  # (candidate names, envs per candidate) -> GroupedLearner
    left_out: frozenset = frozenset()  # candidates that hung in training: they run inert and are not ranked

    @property
    def settings(self) -> EvalSettings:
        return self.plan.settings

    @property
    def task(self) -> Task:
        return self.plan.task

    @property
    def fitness_name(self) -> str:
        return self.plan.fitness_name

    @property
    def fitness(self) -> Fitness:
        return self.plan.fitness

    @property
    def config(self) -> AlgorithmSettings:
        return self.plan.config

    @property
    def iterations(self) -> int:
        """The run's training iterations: the algorithm's settings own them (`max_epochs`, `--train-iterations`
        among their layers)."""
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
