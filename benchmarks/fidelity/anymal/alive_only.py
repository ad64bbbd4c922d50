"""Missing the task: a constant bonus for every step alive, nothing about the command."""
import jax.numpy as jnp


def compute_reward(state):
    return jnp.full(state["root_states"].shape[0], 0.02)
