"""Three actions instead of two: push left, coast, push right (the action space is part of the shaping)."""
import jax.numpy as jnp

ACTION_DIM = 3


def compute_torque(action, state):
    return 30.0 * (action.astype(jnp.float32) - 1.0)[:, None]
