"""The train state of every grouped learner, and the record of one rollout step."""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

from envcoder.env import EnvState, StepInfo
from envcoder.rl.normalizer import RunningMeanStd


class BestPolicy(NamedTuple):
    """Each group's best policy so far by the task fitness of the episodes that ended in one iteration (from
    `save_best_after` on): the policy that collected them, kept on the device so that the driver never has to
    read parameters between iterations."""

    params: dict  # stacked over G
    obs_rms: RunningMeanStd  # [G, D_max]
    fitness: jnp.ndarray  # [G] NaN until a group has a best
    iteration: jnp.ndarray  # [G] int32: updates the policy had had (-1 until a group has a best)


class TrainState(NamedTuple):
    params: dict  # stacked over G
    opt_state: object  # stacked over G
    learning_rate: jnp.ndarray  # [G]
    obs_rms: RunningMeanStd  # [G, D_max]
    own: object  # the algorithm's own state, stacked over G (PPO: its value and critic normalizers; DQN, SAC: replay)
    env: EnvState
    key: jnp.ndarray  # [G, 2]
    iteration: jnp.ndarray  # [] int32
    diverged_at: jnp.ndarray  # [G] int32: iteration at which the group went non-finite, -1 while healthy
    solved_at: jnp.ndarray  # [G] int32: iteration whose episodes reached `score_to_win`, -1 until then
    best: BestPolicy
    constants: dict  # [G] per constant of the shaping functions (`GroupPlan.constants`): data, not code


class Transition(NamedTuple):
    obs: jnp.ndarray
    critic_obs: jnp.ndarray | None  # the critic's own observations (None: symmetric actor-critic)
    actions: jnp.ndarray  # sampled: a Gaussian action (unclipped), or a one-hot action
    log_probs: jnp.ndarray
    mu: jnp.ndarray
    values: jnp.ndarray  # normalized units
    rewards: jnp.ndarray  # training reward (scaled, time-outs bootstrapped)
    dones: jnp.ndarray  # 1.0 where an episode ended (failure or time-out)
    step_reward: jnp.ndarray  # candidate's reward, unscaled
    components: dict
    completed_return: jnp.ndarray
    completed_fitness: jnp.ndarray
    completed_length: jnp.ndarray
    fitness_step: jnp.ndarray  # the task fitness's per-step quantity (no after-failure fill)
    physics_failures: jnp.ndarray  # 1.0 where the env's physics blew up (non-finite or > max_qvel), reset

    @staticmethod
    def of_step(info: StepInfo, obs, actions, rewards, critic_obs=None, log_probs=None, mu=None,
                values=None) -> "Transition":
        """One step's record: the learner's own fields (`rewards`: the training reward) and the environment's
        report `info` (the fields an off-policy learner has no use for stay None)."""
        return Transition(obs, critic_obs, actions, log_probs, mu, values, rewards, info.done.astype(jnp.float32),
                          info.reward, info.components, info.episode_return, info.episode_fitness,
                          info.episode_length, info.fitness_step, info.physics_failures)


def all_finite_per_group(tree, group_axis: int) -> jnp.ndarray:
    """`[G]` bool: every entry of every leaf of `tree` is finite, per group."""
    def finite(x):
        x = jnp.moveaxis(x, group_axis, 0)
        return jnp.all(jnp.isfinite(x.reshape(x.shape[0], -1)), axis=1)
    return functools.reduce(jnp.logical_and, [finite(x) for x in jax.tree.leaves(tree)])


def where_group(mask, a, b):
    """`where` over a pytree whose leaves lead with the group axis, `mask [G]`."""
    return jax.tree.map(lambda x, y: jnp.where(mask.reshape(mask.shape + (1,) * (x.ndim - 1)), x, y), a, b)


def reached(traj: Transition, score_to_win: float | None, higher_is_better: bool) -> jnp.ndarray:
    """`[G]` bool: the episodes that ended in this rollout reached `score_to_win` on average (never without one)."""
    if score_to_win is None:
        return jnp.zeros(traj.dones.shape[1], bool)
    count = traj.dones.sum(axis=(0, 2))
    fitness = (traj.completed_fitness * traj.dones).sum(axis=(0, 2)) / jnp.maximum(count, 1)
    return (count > 0) & ((fitness >= score_to_win) if higher_is_better else (fitness <= score_to_win))


def iteration_metrics(traj: Transition, updates: dict, learning_rate) -> dict:
    """Per-group metrics `[G]` of one iteration from its rollout `traj` (`[T, G, E, ...]`) and the update's own
    (`updates`). Episode means are NaN when no episode ended."""
    count = traj.dones.sum(axis=(0, 2))

    def episode_mean(x):
        return jnp.where(count > 0, (x * traj.dones).sum(axis=(0, 2)) / jnp.maximum(count, 1), jnp.nan)

    metrics = {
        "episodes": count,
        "task_fitness": episode_mean(traj.completed_fitness),
        # Available every iteration, also before any long episode has ended.
        "task_fitness_per_step": traj.fitness_step.mean(axis=(0, 2)),
        "physics_failures": traj.physics_failures.sum(axis=(0, 2)),
        "shaped_return": episode_mean(traj.completed_return),
        "episode_length": episode_mean(traj.completed_length),
        "step_reward": traj.step_reward.mean(axis=(0, 2)),
        **updates, "learning_rate": learning_rate,
    }
    for name, value in traj.components.items():
        metrics[f"reward/{name}"] = value.mean(axis=(0, 2))
    return metrics
