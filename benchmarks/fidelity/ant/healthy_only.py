"""Missing the task: the healthy bonus alone."""
import jax.numpy as jnp


def compute_reward(state):
    return jnp.ones(state["root_states"].shape[0])
