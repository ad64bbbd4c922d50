import jax.numpy as jnp


def compute_reward(state):
    return state["dof_pos"][:, 1] / 0.0 * 0.0
