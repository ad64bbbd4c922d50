"""Harmful termination: the episode also ends whenever the base moves faster than 0.3 m/s."""
import jax.numpy as jnp


def compute_terminal(state):
    up_z = quat_rotate_inverse(state["root_states"][:, 3:7], -state["gravity_vec"])[:, 2]
    speed = jnp.linalg.norm(state["root_states"][:, 7:9], axis=-1)
    return (state["root_states"][:, 2] < 0.3) | (up_z < 0.5) | (speed > 0.3)
