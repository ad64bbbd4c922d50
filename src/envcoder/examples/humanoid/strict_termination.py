"""Stricter failures: the episode ends when the torso drops below 1.0 m or tilts more than 35°."""
import jax.numpy as jnp


def compute_terminal(state):
    root = state["root_states"]
    up_proj = heading_and_up(root, state["targets"])["up_proj"]
    return (root[:, 2] < 1.0) | (up_proj < jnp.cos(jnp.deg2rad(35.0)))
