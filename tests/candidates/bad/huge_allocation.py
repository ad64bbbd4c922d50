import jax.numpy as jnp


def compute_reward(state):
    big = jnp.sort(jnp.ones((state["dof_pos"].shape[0], 10**9)) * state["dof_pos"][:, :1])
    return big[:, 0]
