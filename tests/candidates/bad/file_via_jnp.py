import jax.numpy as jnp


def compute_reward(state):
    jnp.save("/tmp/envcoder_sandbox_marker.npy", state["dof_pos"])
    return state["dof_pos"][:, 1]
