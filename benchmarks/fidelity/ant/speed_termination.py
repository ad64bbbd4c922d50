"""Harmful termination: the episode also ends when the torso moves faster than 1 m/s."""
import jax.numpy as jnp


def compute_terminal(state):
    speed = jnp.linalg.norm(state["root_states"][:, 7:9], axis=-1)
    return (state["root_states"][:, 2] < 0.31) | (speed > 1.0)
