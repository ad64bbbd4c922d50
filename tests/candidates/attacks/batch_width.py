"""An observation whose width follows the number of environments."""
import jax.numpy as jnp


def compute_observation(state):
    n = state["dof_pos"].shape[0]
    return jnp.zeros((n, n // 17 + 1)) + state["dof_pos"][:, :1]
