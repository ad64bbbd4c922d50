"""A constant bonus for every step the episode lasts (gym's CartPole reward)."""
import jax.numpy as jnp


def compute_reward(state):
    return jnp.ones(state["dof_pos"].shape[0])
