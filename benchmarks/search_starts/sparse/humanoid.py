"""Sparse start (issue: HNS): the task fitness as the only reward, the torso's forward (+x) velocity in m/s while
upright (torso above 0.8 m, tilted less than 45°), else 0."""
import jax.numpy as jnp


def compute_reward(state):
    root = state["root_states"]
    up = quat_rotate(root[:, 3:7], jnp.broadcast_to(jnp.array([0, 0, 1], jnp.float32), root[:, :3].shape))[:, 2]
    return jnp.where((root[:, 2] > 0.8) & (up > 0.7), root[:, 7], 0.0)
