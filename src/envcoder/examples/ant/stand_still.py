"""Deliberately poor for running: rewards staying alive and penalizes any motion."""
import jax.numpy as jnp


def compute_reward(state):
    speed = jnp.linalg.norm(state["root_states"][:, 7:10], axis=-1)
    return 1.0 - speed
