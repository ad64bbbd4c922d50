import jax.numpy as jnp


def compute_reward(state):
    jnp.savetxt("/tmp/envcoder_sandbox_marker.txt", state["dof_pos"])
    return state["dof_pos"][:, 1]
