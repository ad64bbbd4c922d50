"""Failure as soon as the pole leans 0.05 rad."""
import jax.numpy as jnp


def compute_terminal(state):
    return jnp.abs(state["dof_pos"][:, 1]) > 0.05
