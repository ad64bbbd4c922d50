"""Passes validation (progress 0) but its reward turns NaN after a few steps: must diverge in isolation."""
import jax.numpy as jnp


def compute_reward(state):
    return jnp.where(state["progress_buf"] > 3, jnp.nan, 1.0)
