"""Sparse start (issue: HNS): the task fitness as the only reward, minus the velocity-command tracking error
|command_xy - base velocity_xy| in m/s (base frame)."""
import jax.numpy as jnp


def compute_reward(state):
    base_lin_vel = quat_rotate_inverse(state["root_states"][:, 3:7], state["root_states"][:, 7:10])
    return -jnp.linalg.norm(state["commands"][:, :2] - base_lin_vel[:, :2], axis=1)
