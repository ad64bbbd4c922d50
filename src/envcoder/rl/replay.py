"""A replay buffer on the device, one per group (the train state stacks them), for the off-policy algorithms."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp


class Replay(NamedTuple):
    """One group's ring buffer of transitions (stacked over groups in the train state)."""

    obs: jnp.ndarray  # [N, D_max] raw observations
    actions: jnp.ndarray  # [N] int32 action indices (DQN), or [N, A_max] actions (SAC)
    rewards: jnp.ndarray  # [N] training rewards (scaled)
    next_obs: jnp.ndarray  # [N, D_max] the observation after the step (before an auto-reset)
    terminals: jnp.ndarray  # [N] 1.0 where the step ended the episode in failure (no bootstrap)
    position: jnp.ndarray  # [] int32: where the next transition goes
    size: jnp.ndarray  # [] int32: transitions held

    @classmethod
    def create(cls, capacity: int, obs_dim: int, action_dim: int | None = None) -> "Replay":
        """An empty buffer; `action_dim` None holds action indices, else actions of that size."""
        actions = jnp.zeros((capacity,), jnp.int32) if action_dim is None else jnp.zeros((capacity, action_dim))
        return cls(jnp.zeros((capacity, obs_dim)), actions, jnp.zeros((capacity,)),
                   jnp.zeros((capacity, obs_dim)), jnp.zeros((capacity,)), jnp.zeros((), jnp.int32),
                   jnp.zeros((), jnp.int32))

    def add(self, obs, actions, rewards, next_obs, terminals) -> "Replay":
        """The buffer with `[B, ...]` transitions written after the newest, over the oldest once it is full."""
        capacity, batch = self.rewards.shape[0], rewards.shape[0]
        index = (self.position + jnp.arange(batch)) % capacity
        return Replay(self.obs.at[index].set(obs), self.actions.at[index].set(actions),
                      self.rewards.at[index].set(rewards), self.next_obs.at[index].set(next_obs),
                      self.terminals.at[index].set(terminals), (self.position + batch) % capacity,
                      jnp.minimum(self.size + batch, capacity))

    def sample(self, key, batch_size: int) -> "Replay":
        """`batch_size` transitions drawn uniformly (with replacement) from those held."""
        index = jax.random.randint(key, (batch_size,), 0, jnp.maximum(self.size, 1))
        return jax.tree.map(lambda x: x[index] if x.ndim else x, self)
