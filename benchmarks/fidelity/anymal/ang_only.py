"""Missing term: tracks only the yaw-rate command, not the linear velocity."""
import jax.numpy as jnp


def compute_reward(state):
    base_quat = state["root_states"][:, 3:7]
    base_ang_vel = quat_rotate_inverse(base_quat, state["root_states"][:, 10:13])
    ang_vel_error = (state["commands"][:, 2] - base_ang_vel[:, 2]) ** 2
    return jnp.exp(-ang_vel_error / 0.25) * 0.02
