"""A good stand-in for nan_later."""
import jax.numpy as jnp


def compute_reward(state):
    return jnp.ones(state["progress_buf"].shape)
