"""Sparse start (issue: HNS): the task fitness as the only reward, 1 while the pole is upright (|angle| < 0.2)."""
import jax.numpy as jnp


def compute_reward(state):
    return (jnp.abs(state["dof_pos"][:, 1]) < 0.2).astype(jnp.float32)
