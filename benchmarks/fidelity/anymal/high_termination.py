"""Harmful termination: the episode ends when the base is below 0.45 m, not far under its reset height (0.55 m)."""
import jax.numpy as jnp


def compute_terminal(state):
    up_z = quat_rotate_inverse(state["root_states"][:, 3:7], -state["gravity_vec"])[:, 2]
    return (state["root_states"][:, 2] < 0.45) | (up_z < 0.5)
