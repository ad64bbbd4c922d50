# A good stand-in for nan_later.py: the same program, its NaN never reached.
import jax.numpy as jnp

NAN_AFTER = 1e9  # control steps


def compute_reward(state):
    return jnp.where(state["progress_buf"] > NAN_AFTER, jnp.nan, 1.0)
