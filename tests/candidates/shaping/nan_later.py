# Passes validation (progress 0) but its reward turns NaN after a few steps: must diverge in isolation.
# (Comments, not a docstring: nan_replacement.py differs only in NAN_AFTER, a constant that is data, so both files
# are one program.)
import jax.numpy as jnp

NAN_AFTER = 3.0  # control steps


def compute_reward(state):
    return jnp.where(state["progress_buf"] > NAN_AFTER, jnp.nan, 1.0)
