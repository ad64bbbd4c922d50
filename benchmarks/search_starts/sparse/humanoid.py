"""Sparse start (issue: HNS): the task fitness as the only reward, the torso's forward (+x) velocity in m/s while
upright (torso above 0.8 m, its up axis above 0.7: tilted less than 45°), else 0."""
import jax.numpy as jnp


def compute_reward(state):
    root = state["root_states"]
    upright = (root[:, 2] > 0.8) & (heading_and_up(root, state["targets"])["up_proj"] > 0.7)
    return jnp.where(upright, root[:, 7], 0.0)
