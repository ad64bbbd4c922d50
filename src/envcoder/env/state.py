"""What the grouped environment holds and reports: every array `[G, E, ...]` (G groups × E environments)."""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp


class EnvState(NamedTuple):
    """Per-environment simulation state, `[G, E, ...]`."""

    data: object  # what the physics keeps between control steps (`Simulator.compact`: a `PhysicsState` on MJX)
    commands: jnp.ndarray  # [G, E, C]
    actions: jnp.ndarray  # [G, E, A_max] last clipped action
    torques: jnp.ndarray  # [G, E, nu]
    progress: jnp.ndarray  # [G, E] int32
    episode_return: jnp.ndarray  # [G, E] shaped return so far (unscaled)
    episode_fitness: jnp.ndarray  # [G, E] sum of the task's per-step fitness so far
    contact_forces: jnp.ndarray  # [G, E, len(task.contact_geoms), 3] of `data`, computed over the whole batch
    physics: dict  # randomized fields of each env's episode, name -> [G, E, ...] ({} when nothing is randomized)
    past_actions: jnp.ndarray | None  # [G, E, MAX_ACTION_LATENCY, A_max], newest first (None without latency)
    curriculum: dict  # each group's curriculum values, name -> [G, ...] ({} without a curriculum)


class ResetPool(NamedTuple):
    """Fresh reset states `[G, E, ...]`: an environment whose episode ends restarts from its own entry."""

    data: object  # placed (no physics pass yet), as `EnvState.data`
    commands: jnp.ndarray  # [G, E, C]
    contact_forces: jnp.ndarray  # [G, E, len(task.contact_geoms), 3]: zeros
    physics: dict  # randomized fields of the next episode

    @staticmethod
    def of(state: EnvState) -> "ResetPool":
        """The pool that restarts every environment where `state` (a fresh `reset`) starts it."""
        return ResetPool(state.data, state.commands, state.contact_forces, state.physics)


class StepInfo(NamedTuple):
    """What one step reports, every field `[G, E]` (`components`: name -> `[G, E]`)."""

    reward: jnp.ndarray  # the candidate's shaped reward, unscaled
    components: dict  # the reward's named components (0 for a group whose candidate lacks one)
    terminal: jnp.ndarray  # bool: failure terminations (the candidate's, and physics failures)
    truncated: jnp.ndarray  # bool: time-outs that were not failures
    done: jnp.ndarray  # bool: terminal | truncated (the environment was reset)
    episode_return: jnp.ndarray  # shaped return of the episode so far (at `done`: the finished episode's)
    episode_fitness: jnp.ndarray  # the task fitness of the episode so far, per step of a full episode
    episode_length: jnp.ndarray  # float: steps of the episode so far
    fitness_step: jnp.ndarray  # the task fitness's per-step quantity (no after-failure fill)
    physics_failures: jnp.ndarray  # 1.0 where the env's physics blew up (non-finite or > max_qvel) and was reset
    state: dict  # the task state after the step, before the reset (a bootstrap's next observation reads it)
