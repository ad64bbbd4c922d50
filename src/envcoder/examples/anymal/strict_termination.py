"""Stricter failures: the episode ends when the base drops below 0.4 m or tilts more than 30°."""
import jax.numpy as jnp


def compute_terminal(state):
    up_z = quat_rotate_inverse(state["root_states"][:, 3:7], -state["gravity_vec"])[:, 2]
    return (state["root_states"][:, 2] < 0.4) | (up_z < jnp.cos(jnp.deg2rad(30.0)))
