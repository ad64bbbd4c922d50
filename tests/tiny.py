"""One way to make a tiny run in the tests: one tiny configuration of each algorithm (16-unit networks, 8
environments a group, a horizon of 8), the Cartpole task with its simulator and sample state made once a process,
and `train`, which trains candidates for a few iterations with the learner of the configuration given and returns
what the tests compare. Files that train the same candidates with the same settings share a compiled trainer through
JAX's compilation cache."""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Sequence

import jax

from envcoder.rl.config import ALGORITHMS
from envcoder.rl.dqn.config import DQNConfig
from envcoder.rl.ppo.config import PPOConfig
from envcoder.rl.sac.config import SACConfig

ENVS = 8
"""Environments per group of a tiny run."""
PPO = {"horizon_length": 8, "mini_epochs": 2, "units": (16, 16)}
"""The tiny PPO: what every test that trains with PPO changes of the task's own settings."""
DQN = {"steps_per_epoch": 4, "updates_per_epoch": 2, "batch_size": 16, "replay_buffer_size": 64, "units": (16, 16),
       "num_epochs_to_copy": 1}
SAC = {"steps_per_epoch": 4, "updates_per_epoch": 2, "batch_size": 16, "replay_buffer_size": 64, "units": (16, 16),
       "learning_starts": 1}


def ppo(task, **changes) -> PPOConfig:
    """The tiny PPO for `task`, with `changes`."""
    return PPOConfig.for_task(task, **{**PPO, **changes})


def dqn(task, **changes) -> DQNConfig:
    return DQNConfig.for_task(task, **{**DQN, **changes})


def sac(task, **changes) -> SACConfig:
    return SACConfig(**{**SAC, **changes})


@functools.cache
def cartpole():
    """`(task, simulator, sample state)` of Cartpole, made once a process."""
    from envcoder.candidates.validate import sample_state
    from envcoder.sim import Simulator
    from envcoder.tasks import get_task

    task = get_task("Cartpole")
    sim = Simulator(task.model_file, task.substeps)
    return task, sim, sample_state(task, sim)


@dataclasses.dataclass
class TinyRun:
    """What a tiny run gives the tests (its state and metrics on the host)."""

    trainer: Any
    ts: Any
    history: list[dict]
    initial_env: Any = None
    """The environments' state right after `init` (with `keep_initial`)."""
    evaluation: dict | None = None
    """The deterministic evaluation of the trained policies (with `evaluate`)."""

    def group(self, label: str) -> int:
        """The row of the group `name#seed`."""
        return self.trainer.labels.index(label)


def train(task, candidates: Sequence, iterations: int, config=None, *, sim=None, envs: int = ENVS,
          seeds: Sequence[int] = (0,), evaluate: bool = False, keep_initial: bool = False, **options) -> TinyRun:
    """`candidates` (validated) trained together for `iterations` with `config` (default: the tiny PPO), by the
    learner of the configuration's algorithm; `options` go to the learner."""
    config = config if config is not None else ppo(task)
    learner = next(a.learner for a in ALGORITHMS.values() if isinstance(config, a.config))
    trainer = learner(task, list(candidates), config, envs, tuple(seeds), sim, **options)
    ts = trainer.init()
    initial_env = jax.device_get(ts.env) if keep_initial else None
    history = []
    for _ in range(iterations):
        ts, metrics = trainer.iteration(ts)
        history.append(jax.device_get(metrics))
    evaluation = jax.device_get(trainer.evaluate(ts)) if evaluate else None
    return TinyRun(trainer, jax.device_get(ts), history, initial_env, evaluation)
