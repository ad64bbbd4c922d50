"""Keeps a traced value in a module list and uses it in the next trace."""
import jax.numpy as jnp

_seen = []


def compute_reward(state):
    _seen.append(state["dof_pos"][:, 1])
    return _seen[0] * 1.0
