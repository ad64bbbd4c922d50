"""Deliberately poor: rewards a fast-swinging pole, which topples it."""
import jax.numpy as jnp


def compute_reward(state):
    return jnp.abs(state["dof_vel"][:, 1])
