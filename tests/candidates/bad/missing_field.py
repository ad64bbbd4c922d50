import jax.numpy as jnp


def compute_reward(state):
    return jnp.cos(state["pole_angle"])  # Isaac's local name: the state calls it dof_pos[:, 1]
